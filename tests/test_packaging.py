"""``python -m build`` makes a wheel and an sdist that install and work in a fresh venv. ``build``
makes the wheel from the sdist, so the wheel's compiled part (the tar reader's fast path,
``tar/_cmembers.c``) shows that the sdist builds with this machine's compiler; the fresh venv's
reader is checked to take it.

Offline: the build runs without isolation (the setuptools of this environment, which must be new
enough for the SPDX licence fields), and the fresh venv installs the wheel with ``--no-index
--no-deps``; its core dependencies (numpy, braceexpand, cloudpickle) are linked in from this
environment the way ``tests/test_no_torch.py`` does it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from _components import require_module
from test_no_torch import _base_python, _link_core_dependencies

import shardstream

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _ok(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=cwd, env=env, check=False)
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new venv with ``wheel`` installed (offline, no dependencies) and the core dependencies
    linked in from this environment; returns its ``bin`` directory."""
    venv = tmp_path / "venv"
    _ok(_base_python(), "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    _ok(python, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", str(wheel))
    _link_core_dependencies(tmp_path / "deps")
    purelib = _ok(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    Path(purelib, "core-deps.pth").write_text(f"{tmp_path / 'deps'}\n")
    return venv / "bin"


#: Writes 12 samples in 3 shards and prints the sum of their labels, read back (66).
_WRITE_AND_READ = (
    "with ss.ShardWriter('out/t-%06d.tar', maxcount=5) as w:\n"
    "    [w.write({'__key__': f'k{i}', 'cls': i}) for i in range(12)]\n"
    "print(sum(s['cls'] for s in ss.ShardStream('out/t-{000000..000002}.tar').decode()))\n"
)


def test_build_install_and_smoke_test_in_a_fresh_venv(tmp_path: Path) -> None:
    require_module("build", "building and installing the sdist and wheel")
    dist = tmp_path / "dist"
    built = _ok(sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT))
    assert "SetuptoolsDeprecationWarning" not in built.stdout + built.stderr  # the licence table is gone
    version = shardstream.__version__
    wheels = sorted(dist.glob(f"shardstream-{version}-*.whl"))  # one, for this platform (the C part)
    sdist = dist / f"shardstream-{version}.tar.gz"
    assert len(wheels) == 1 and sdist.exists(), sorted(p.name for p in dist.iterdir())
    wheel = wheels[0]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(f"shardstream-{version}.dist-info/METADATA").decode()
    assert "shardstream/py.typed" in names and "shardstream/cli/_verify.py" in names
    assert "shardstream/tar/_cmembers.pyi" in names and "shardstream/tar/_cmembers.c" not in names
    assert any(n.startswith("shardstream/tar/_cmembers.") and n.endswith(".so") for n in names), names
    assert f"shardstream-{version}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata and f"Version: {version}" in metadata
    assert "Provides-Extra: cli" in metadata and "tqdm" in metadata
    with tarfile.open(sdist) as tf:
        assert f"shardstream-{version}/LICENSE" in tf.getnames()
        assert f"shardstream-{version}/src/shardstream/tar/_cmembers.c" in tf.getnames()
        assert f"shardstream-{version}/setup.py" in tf.getnames()

    bin_dir = _fresh_venv(tmp_path, wheel)
    python, script = str(bin_dir / "python"), str(bin_dir / "shardstream")

    assert _ok(script, "--version").stdout.strip() == f"shardstream {version}"
    code = (
        "import shardstream as ss, sys\nassert ss.__file__.startswith(sys.prefix), ss.__file__\n"
        + _WRITE_AND_READ
    )
    assert _ok(python, "-c", code, cwd=tmp_path).stdout.strip() == str(sum(range(12)))
    assert _ok(script, "verify", str(tmp_path / "out"), cwd=tmp_path).stdout.endswith("0 problems\n")
    fast = "from shardstream.tar import reader; assert reader._plain_members is not None"
    _ok(python, "-c", fast)


def test_an_install_without_a_c_compiler_reads_with_the_python_parse(tmp_path: Path) -> None:
    """The compiled part is optional: with no working compiler (``CC=/bin/false``) the wheel
    still builds, without it, and the installed reader reads a shard with its Python parse."""
    require_module("build", "building the sdist")
    dist = tmp_path / "dist"
    _ok(sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir", str(dist), str(ROOT))
    (sdist,) = dist.glob("shardstream-*.tar.gz")
    # From the sdist: pip unpacks it into a fresh directory, so nothing compiled earlier is reused.
    wheels = tmp_path / "wheels"
    env = {**os.environ, "CC": "/bin/false"}
    pip_wheel = (
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "--disable-pip-version-check",
    )
    _ok(sys.executable, *pip_wheel, "-w", str(wheels), str(sdist), env=env)
    (wheel,) = wheels.glob("shardstream-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert not [n for n in zf.namelist() if n.endswith(".so")]
    python = str(_fresh_venv(tmp_path, wheel) / "python")
    code = (
        "import shardstream as ss\n"
        "from shardstream.tar import reader\n"
        "assert reader._plain_members is None\n" + _WRITE_AND_READ
    )
    assert _ok(python, "-c", code, cwd=tmp_path).stdout.strip() == str(sum(range(12)))
