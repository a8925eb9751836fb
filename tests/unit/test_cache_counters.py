"""Per-process cache counter files stay few on a cache shared by many processes, and are summed right.

Real processes (forked, each with its own cache object, exiting through multiprocessing's exit
path as DataLoader workers do) read a cached shard; their counter files are rolled up into totals
when they exit, by ``shardstream cache clean``, and by age. No count is lost or counted twice.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardstream.cache import ShardCache
from shardstream.cache.stats import ROLL_AT, CacheStats, CounterFile, read_counters, roll_up
from shardstream.cli import main
from shardstream.sources.memory import memory_store

URL = "memory://bucket/counted.tar"


@pytest.fixture
def shard() -> Iterator[str]:
    memory_store[URL] = b"x" * 5000
    yield URL
    memory_store.pop(URL, None)


def _reader(root: str, opens: int) -> None:
    cache = ShardCache(root)
    for _ in range(opens):
        stream, _ = cache(URL)
        stream.read()
        stream.close()


def _run_processes(root: Path, count: int, opens: int) -> None:
    ctx = multiprocessing.get_context("fork")
    for start in range(0, count, 8):  # 8 at a time: 2 cores
        procs = [ctx.Process(target=_reader, args=(str(root), opens)) for _ in range(min(8, count - start))]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0


def _stats(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["cache", "stats", str(root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_many_processes_leave_few_counter_files_and_exact_totals(
    shard: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cache"
    processes = 2 * ROLL_AT + 10
    _run_processes(root, processes, opens=3)
    files = os.listdir(root / ".shardstream" / "stats")
    assert len(files) <= ROLL_AT + 1, sorted(files)
    assert any(f.startswith("total~") for f in files)
    stats = _stats(root, capsys)
    counters = stats["counters"]
    assert isinstance(counters, dict)
    assert counters["hits"] + counters["misses"] == 3 * processes  # every open, once
    assert counters["misses"] >= 1 and stats["processes_counted"] == processes

    # `cache clean` rolls up whatever is left; the totals do not change.
    assert main(["cache", "clean", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counter_files_rolled_up"] >= 1
    assert len(os.listdir(root / ".shardstream" / "stats")) == 1
    again = _stats(root, capsys)
    assert again["counters"] == counters and again["processes_counted"] == processes


def _dead_pid() -> int:
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(out.stdout)


def test_files_of_dead_or_idle_processes_are_rolled_up_live_ones_kept(tmp_path: Path) -> None:
    directory = tmp_path / "stats"
    directory.mkdir()
    host = os.uname().nodename
    dead = f"{host}~{_dead_pid()}~1"
    live = f"{host}~{os.getpid()}~2"
    idle = "otherhost~77~3"
    for tag, hits, age in ((dead, 5, 0), (live, 7, 0), (idle, 11, 3 * 86_400)):
        path = directory / f"{tag}.json"
        path.write_text(json.dumps({"updated": time.time() - age, "counters": {"hits": hits}}))

    def is_dead(tag: str) -> bool:
        return tag == dead

    assert roll_up(str(directory), claimer="me~1~1", is_dead=is_dead) == 2
    found = read_counters(str(directory))
    assert set(found.processes) == {live}
    assert found.rolled_up == {"hits": 16} and found.rolled_up_processes == 2
    assert found.total() == {"hits": 23}


def test_a_process_rolled_up_while_idle_does_not_count_twice(tmp_path: Path) -> None:
    directory = tmp_path / "stats"
    directory.mkdir()
    stats = CacheStats()
    counters = CounterFile(str(directory), "h~1~1", stats.snapshot(), interval=0.0)
    stats.add(hits=4)
    counters.record(stats)
    assert roll_up(str(directory), claimer="me~2~2", max_age=-1.0) == 1  # taken for idle
    stats.add(hits=1)
    counters.record(stats)  # only the new hit is written
    counters.finish(stats)
    assert read_counters(str(directory)).total()["hits"] == 5
