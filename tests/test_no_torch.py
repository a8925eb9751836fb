"""shardstream without torch: a fresh venv holding only the core dependencies (numpy, braceexpand,
cloudpickle).

torch is deliberately not a dependency (users install the build they want), so the package, the
tar reader and writer, and the ``shardstream`` inspection commands must work without it, and what
needs torch must say how to install it. The venv is made with the base interpreter and
``--without-pip``; a ``.pth`` file puts ``src/`` and a directory of symlinks to the core
dependencies of the current environment on its path, so nothing is downloaded or built.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _components import require_component

from shardstream.tar.sharded_writer import ShardWriter

# POSIX only: the venv layout (bin/), the console script's shebang line and the symlinks.
pytestmark = pytest.mark.skipif(os.name != "posix", reason="builds a POSIX venv")

ROOT = Path(__file__).resolve().parents[1]
#: The core dependencies ([project] dependencies in pyproject.toml), by import name.
CORE = ("numpy", "braceexpand", "cloudpickle")


def _base_python() -> str:
    """The interpreter this venv was made from (a venv made from a venv would share its packages)."""
    base = getattr(sys, "_base_executable", None)
    if base and Path(base).exists():
        return str(base)
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def _bin(venv: Path, name: str) -> Path:
    return venv / "bin" / name


def _link_core_dependencies(target: Path) -> None:
    """Symlink each core package (and its .libs/.dist-info siblings) from this environment."""
    target.mkdir()
    for module in CORE:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, f"{module} is not installed here"
        location = Path(spec.origin).parent
        site = location.parent if spec.submodule_search_locations else location
        for entry in site.iterdir():
            stem = re.split(r"[-.]", entry.name, maxsplit=1)[0]
            if stem.lower() == module.lower():
                (target / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv where shardstream and its core dependencies are importable, and torch is not."""
    home = tmp_path_factory.mktemp("no-torch")
    venv = home / "venv"
    subprocess.run([_base_python(), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = subprocess.run(
        [str(_bin(venv, "python")), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    _link_core_dependencies(home / "deps")
    Path(purelib, "shardstream-dev.pth").write_text(f"{ROOT / 'src'}\n{home / 'deps'}\n")
    # The console script pip would write for [project.scripts] (shardstream = "module:function").
    scripts = re.search(r"^\[project\.scripts\]\s*\nshardstream\s*=\s*\"([\w.]+):(\w+)\"", _pyproject(), re.M)
    assert scripts is not None, "pyproject.toml has no shardstream console script"
    script = _bin(venv, "shardstream")
    module, function = scripts[1], scripts[2]
    script.write_text(
        f"#!{_bin(venv, 'python')}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    )
    script.chmod(0o755)
    return venv


def _pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def _env(venv: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH")
        and not k.startswith(("SHARDSTREAM_", "WDS_"))
    }
    env["PATH"] = f"{_bin(venv, 'python').parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def _run(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), env=_env(venv), capture_output=True, text=True, timeout=120)


def _python(venv: Path, code: str) -> subprocess.CompletedProcess[str]:
    return _run(venv, str(_bin(venv, "python")), "-c", textwrap.dedent(code))


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, result.args))} exited with {result.returncode}\n"
            f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}",
            pytrace=False,
        )
    return result


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    """One shard of 3 samples (txt, cls, npy) written by ShardWriter in this (torch) environment."""
    with ShardWriter(str(tmp_path / "shard-%06d.tar"), maxcount=10, mtime=0) as sink:
        for i in range(3):
            sink.write({"__key__": f"k{i}", "txt": f"text {i}", "cls": i, "npy": np.arange(i + 1)})
    return tmp_path / "shard-000000.tar"


def test_core_dependencies_are_numpy_braceexpand_and_cloudpickle() -> None:
    tomllib = pytest.importorskip(
        "tomllib", reason="not tested here: the core dependencies (tomllib is 3.11's)"
    )
    dependencies = tomllib.loads(_pyproject())["project"]["dependencies"]
    names = {re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0].lower() for d in dependencies}
    assert names == set(CORE), "update CORE (and keep torch out of the dependencies)"


def test_the_venv_has_the_core_dependencies_and_no_torch(venv: Path) -> None:
    result = _ok(
        _python(
            venv,
            """
            import importlib.util
            print(sorted(m for m in ("numpy", "braceexpand", "torch") if importlib.util.find_spec(m)))
            """,
        )
    )
    assert result.stdout.strip() == "['braceexpand', 'numpy']"


def test_import_shardstream(venv: Path) -> None:
    result = _ok(
        _python(venv, "import shardstream, sys; print(shardstream.__file__, 'torch' in sys.modules)")
    )
    assert result.stdout.split() == [str(ROOT / "src" / "shardstream" / "__init__.py"), "False"]


def test_cli_help(venv: Path) -> None:
    for command in (
        [_bin(venv, "python"), "-m", "shardstream.cli", "--help"],
        [_bin(venv, "shardstream"), "--help"],
    ):
        out = _ok(_run(venv, *map(str, command))).stdout
        for name in ("bench", "demo", "ls", "cat", "stat", "write"):
            assert name in out


@pytest.mark.parametrize("command", ["ls", "cat", "stat"])
def test_cli_inspects_a_shard(venv: Path, shard: Path, command: str) -> None:
    extra = ["k1.txt"] if command == "cat" else []
    out = _ok(_run(venv, str(_bin(venv, "shardstream")), command, str(shard), *extra)).stdout
    if command == "ls":
        assert [line.split()[-1] for line in out.splitlines()[1:4]] == ["k0.cls", "k0.npy", "k0.txt"]
    elif command == "cat":
        assert out == "text 1"
    else:
        samples = re.search(r"^\s*samples:\s*(\S+)", out, re.M)
        assert samples is not None and samples[1] == "3", out


def test_tar_reader_and_writer(venv: Path, shard: Path, tmp_path: Path) -> None:
    code = f"""
        import sys
        import numpy as np
        from shardstream.tar.reader import iter_members
        from shardstream.tar.writer import TarWriter
        from shardstream.decoders import Decoder

        with open({str(shard)!r}, "rb") as stream:
            names = [name for name, _, _ in iter_members(stream, "shard")]
        assert names[:3] == ["k0.cls", "k0.npy", "k0.txt"], names

        out = {str(tmp_path / "written.tar")!r}
        with TarWriter(out) as sink:
            sink.write({{"__key__": "a", "txt": "hello", "npy": np.eye(2), "json": {{"x": 1}}}})
        with open(out, "rb") as stream:
            fields = {{name: data for name, data, _ in iter_members(stream, out)}}
        sample = Decoder([])({{k.partition(".")[2]: v for k, v in fields.items()}})
        assert sample["txt"] == "hello" and sample["json"] == {{"x": 1}}, sample
        assert (sample["npy"] == np.eye(2)).all()
        print("torch" in sys.modules)
    """
    assert _ok(_python(venv, code)).stdout.strip() == "False"


def test_what_needs_torch_says_how_to_install_it(venv: Path, shard: Path) -> None:
    code = """
        from shardstream.decoders import Decoder
        for build in (lambda: Decoder([])({"pth": b"x"}), lambda: Decoder("torchrgb")):
            try:
                build()
            except ImportError as exc:
                print(exc)
            else:
                raise SystemExit("no ImportError")
    """
    out = _ok(_python(venv, code)).stdout
    assert out.count("pip install torch") == 2 and out.count("deliberately does not depend on torch") == 2
    bench = _run(venv, str(_bin(venv, "shardstream")), "bench", str(shard))
    assert bench.returncode == 2, bench.stderr
    assert "pip install torch" in bench.stderr and "deliberately" in bench.stderr


_TORCH_SPY = """
import importlib.abc, json, os, sys, traceback

chain = []


class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not chain:
            here = os.sep + "shardstream" + os.sep
            chain.extend(f"{f.filename}:{f.lineno}" for f in traceback.extract_stack() if here in f.filename)
        return None


def check(what):
    if chain:
        sys.exit(f"{what} imported torch, first by: " + " <- ".join(reversed(chain)))


sys.meta_path.insert(0, Spy())
from shardstream.cli import main

check("from shardstream.cli import main")
for argv in json.loads(sys.argv[1]):
    try:
        main(argv)
    except SystemExit:
        pass
    check("shardstream " + " ".join(argv))
"""


def test_inspection_commands_do_not_import_torch_where_it_is_installed(shard: Path) -> None:
    # Importing torch takes seconds: `shardstream ls` must not pay that where torch is installed.
    require_component(
        "torch",
        "the CLI's start-up where torch is installed (the fresh venv tests cover the case without)",
        present=importlib.util.find_spec("torch") is not None,
    )
    commands = [["--help"], ["ls", str(shard)], ["cat", str(shard), "k0.txt"], ["stat", str(shard)]]
    result = subprocess.run(
        [sys.executable, "-c", _TORCH_SPY, json.dumps(commands)], capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        pytest.fail(result.stderr.strip(), pytrace=False)
