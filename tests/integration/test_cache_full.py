"""A cache on a filesystem with no room: the epoch goes on from the source, one warning names the
cache directory and the fixes, and no partial entry is left behind.

Two real ways to run out of room: a 1 MiB tmpfs (``ENOSPC``; needs the right to mount, as root in
the test machines) and a file-size limit (``RLIMIT_FSIZE``: ``EFBIG``, "File too large", the error
users reported; works everywhere). Each runs in a fresh process (``_cache_full.py``), with and
without a cache size limit (with one, space is reserved before the copy, so the reservation is
what fails).
"""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import run_job

from shardstream.tar import TarWriter

HERE = Path(__file__).resolve().parent
SHARD_SAMPLES = 6
PAYLOAD = 100_000  # 6 samples of 100 kB: shards of about 600 kB


@pytest.fixture(scope="module")
def shards(http_server: Any) -> list[str]:
    urls = []
    for s in range(4):
        buf = io.BytesIO()
        with TarWriter(buf) as tar:
            for i in range(SHARD_SAMPLES):
                key = f"{s}-{i}"
                tar.write({"__key__": key, "txt": key, "bin": os.urandom(PAYLOAD)})
        urls.append(http_server.write(f"full/shard-{s}.tar", buf.getvalue()))
    return urls


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); the EFBIG test covers it")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _expected() -> list[str]:
    return [f"{s}-{i}:{s}-{i}" for s in range(4) for i in range(SHARD_SAMPLES)]


def _check(out: dict[str, Any], cache_dir: Path) -> None:
    assert out["keys"] == [_expected(), _expected()], "every sample, in order, in both epochs"
    full = [w for w in out["warnings"] if "has no room" in w]
    assert len(full) == 1, out["warnings"]
    assert str(cache_dir) in full[0] and "cache_size" in full[0] and "cache_dir" in full[0]
    assert not [w for w in out["warnings"] if "has no room" not in w], out["warnings"]
    # No partial entry: nothing left in the temp tree, and every published shard is whole.
    temps = [p for p in (cache_dir / ".shardstream" / "tmp").rglob("*") if p.is_file()]
    assert temps == []
    published = [p for p in cache_dir.rglob("*.tar") if ".shardstream" not in p.parts]
    for path in published:
        assert path.stat().st_size > SHARD_SAMPLES * PAYLOAD
        assert (
            (cache_dir / ".shardstream" / "meta" / path.relative_to(cache_dir))
            .with_suffix(".tar.json")
            .exists()
        )
    assert len(published) < 4, "the filesystem cannot hold every shard"


@pytest.mark.parametrize("cache_size", [None, 10_000_000])
def test_a_full_tmpfs_reads_on_from_the_source(
    shards: list[str], tmpfs: Path, tmp_path: Path, cache_size: int | None
) -> None:
    job = {"urls": shards, "cache_dir": str(tmpfs), "cache_size": cache_size, "fsize": None}
    out = run_job(HERE / "_cache_full.py", job, tmp_path)
    _check(out, tmpfs)


@pytest.mark.parametrize("cache_size", [None, 10_000_000])
def test_a_file_size_limit_reads_on_from_the_source(
    shards: list[str], tmp_path: Path, cache_size: int | None
) -> None:
    cache_dir = tmp_path / "cache"
    # The limit stops every shard part-way (no shard is published) but leaves room for the small
    # bookkeeping files, as a nearly full disk would.
    job = {"urls": shards, "cache_dir": str(cache_dir), "cache_size": cache_size, "fsize": 300_000}
    out = run_job(HERE / "_cache_full.py", job, tmp_path)
    _check(out, cache_dir)
