"""``shardstream cache ls | stats | clean``: a real cache, a real reader process, dead owners' debris."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardstream.cache import ShardCache
from shardstream.cache.owner import Owner
from shardstream.cli import main
from shardstream.sources.memory import memory_store


def _dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(proc.stdout)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    """A cache holding two shards, read once each (2 misses) and one of them again (1 hit)."""
    root = tmp_path / "cache"
    for name, size in (("a", 1000), ("b", 3000)):
        memory_store[f"memory://bucket/{name}.tar"] = bytes([65]) * size
    cache = ShardCache(str(root))
    for url in ("memory://bucket/a.tar", "memory://bucket/b.tar", "memory://bucket/a.tar"):
        stream, _ = cache(url)
        stream.read()
        stream.close()
    del cache
    gc.collect()  # the cache writes its counters when it goes
    yield root
    for name in ("a", "b"):
        memory_store.pop(f"memory://bucket/{name}.tar", None)


def _json(capsys: pytest.CaptureFixture[str]) -> object:
    return json.loads(capsys.readouterr().out)


def test_cache_ls_and_stats(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "ls", str(cache_dir), "--json"]) == 0
    rows = _json(capsys)
    assert [(r["name"], r["size"], r["state"], r["url"]) for r in rows] == [  # type: ignore[union-attr]
        ("memory/bucket/a.tar", 1000, "idle", "memory://bucket/a.tar"),
        ("memory/bucket/b.tar", 3000, "idle", "memory://bucket/b.tar"),
    ]
    assert main(["cache", "stats", str(cache_dir), "--json"]) == 0
    stats = _json(capsys)
    assert isinstance(stats, dict)
    assert stats["entries"] == 2 and stats["bytes"] == 4000
    assert stats["counters"]["hits"] == 1 and stats["counters"]["misses"] == 2
    assert stats["counters"]["bytes_fetched"] == 4000 and stats["hit_rate"] == pytest.approx(1 / 3)
    assert main(["cache", "stats", str(cache_dir)]) == 0
    assert "hits:         1   misses: 2   hit rate: 33.3%" in capsys.readouterr().out


def test_cache_clean_removes_debris_of_dead_processes_only(
    cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    book = cache_dir / ".shardstream"
    dead = Owner(Owner.current().host, _dead_pid(), None, "deadbeef0000")
    lock = book / "lock" / "memory" / "bucket" / "c.tar.lock"  # a fill whose process died
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"host": dead.host, "pid": dead.pid, "start": None, "token": dead.token}))
    temp = book / "tmp" / "memory" / "bucket" / f"c.tar~{dead.tag()}.part"
    temp.parent.mkdir(parents=True, exist_ok=True)
    temp.write_bytes(b"partial")
    lease = book / "lease" / "memory" / "bucket" / "a.tar" / dead.tag()
    lease.parent.mkdir(parents=True, exist_ok=True)
    lease.write_bytes(b"")
    (cache_dir / "mine.txt").write_text("placed here by hand")
    assert main(["cache", "stats", str(cache_dir), "--json"]) == 0
    stats = _json(capsys)
    assert isinstance(stats, dict)
    assert (stats["stale_locks"], stats["dead_temp_files"], stats["dead_leases"], stats["foreign_files"]) == (
        1,
        1,
        1,
        1,
    )
    assert main(["cache", "clean", str(cache_dir), "--dry-run"]) == 0
    assert lock.exists() and temp.exists() and lease.exists()
    assert main(["cache", "clean", str(cache_dir)]) == 0
    assert "1 stale locks, 1 dead temp files, 1 dead leases" in capsys.readouterr().out
    assert not lock.exists() and not temp.exists() and not lease.exists()
    assert (cache_dir / "memory/bucket/a.tar").exists() and (cache_dir / "mine.txt").exists()


def test_cache_clean_all_keeps_what_a_live_process_reads(
    cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real reader: another process opens a.tar through the cache and holds it open.
    code = textwrap.dedent(f"""
        import sys, time
        from shardstream.cache import ShardCache
        from shardstream.sources.memory import memory_store
        memory_store["memory://bucket/a.tar"] = b"A" * 1000
        stream, _ = ShardCache({str(cache_dir)!r})("memory://bucket/a.tar")
        print("open", flush=True)
        time.sleep(60)
    """)
    reader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "open\n"
        assert main(["cache", "ls", str(cache_dir)]) == 0
        assert "reading:1" in capsys.readouterr().out
        assert main(["cache", "clean", str(cache_dir), "--all", "--json"]) == 0
        report = _json(capsys)
        assert isinstance(report, dict)
        assert report["evicted"] == ["memory/bucket/b.tar"] and report["kept_in_use"] == 1
        assert (cache_dir / "memory/bucket/a.tar").exists()
        assert not (cache_dir / "memory/bucket/b.tar").exists()
    finally:
        reader.kill()  # by its PID
        reader.wait()
        if reader.stdout is not None:
            reader.stdout.close()
    assert main(["cache", "clean", str(cache_dir), "--max-size", "0"]) == 0  # the reader is gone now
    assert not (cache_dir / "memory/bucket/a.tar").exists()


def test_cache_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "ls", str(tmp_path)]) == 2
    assert "is not a shardstream cache" in capsys.readouterr().err
    (tmp_path / ".shardstream").mkdir()
    assert main(["cache", "stats", str(tmp_path), "--all"]) == 2
    assert main(["cache", "clean", str(tmp_path), "--max-size", "lots"]) == 2
    assert "expected bytes with an optional unit" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["cache", "nonsense", str(tmp_path)])
    assert exc.value.code == 2
