"""The fork rule for every thread shardstream starts (``shardstream.forks``), enforced.

For each kind of thread of ours (read-ahead opens, fetch-ahead fetches, the pools of shard
counting, object batches, listings and fetch-loop retries, the CPU monitor of ``bench``, ``pipe:``
stderr readers), the test makes one busy, forks meanwhile and checks that the fork waited for the
busy region to end and that the child works: it runs the same kind of thread itself. The cache
fill and heartbeat threads are covered in ``test_fork_safety.py``. A last test forks over and over
while threads of ours start and end, and each child imports a C extension (the dynamic loader's
lock is what a thread that exits at the fork could leave held).
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _components import require_module
from _procs import fork_child

from shardstream.forks import GatedExecutor, gate
from shardstream.objects.fetch import FetchAhead
from shardstream.readers.counts import shard_counts
from shardstream.sources import open_url
from shardstream.sources._ahead import PendingOpen

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

RELEASE_AFTER = 0.3  # seconds a thread stays busy while the fork waits


class Blocker:
    """A callable that blocks inside whatever busy region calls it until released."""

    def __init__(self) -> None:
        self.entered, self.go = threading.Event(), threading.Event()
        self.released_at = 0.0

    def __call__(self, *args: Any) -> Any:
        self.entered.set()
        assert self.go.wait(30)
        return args[0] if args else None

    def release_later(self) -> threading.Timer:
        def release() -> None:
            self.released_at = time.monotonic()
            self.go.set()

        timer = threading.Timer(RELEASE_AFTER, release)
        timer.start()
        return timer


# Each case: start(blocker) makes a thread of that kind busy in blocker() and returns a function
# that waits for the thread's work to end; child() runs the same kind of work in the child.


def _read_ahead(blocker: Blocker) -> Callable[[], None]:
    pending = PendingOpen(lambda: blocker(io.BytesIO(b"parent")))
    return lambda: pending.result().close()


def _read_ahead_child() -> None:
    assert PendingOpen(lambda: io.BytesIO(b"child")).result().read() == b"child"


def _fetch_ahead(blocker: Blocker) -> Callable[[], None]:
    results: list[Any] = []
    consumer = threading.Thread(target=lambda: results.extend(FetchAhead(blocker).run([1, 2])))
    consumer.start()
    return lambda: consumer.join(10)


def _fetch_ahead_child() -> None:
    assert [r for _, r in FetchAhead(lambda j: j * 2).run([1, 2, 3])] == [2, 4, 6]


def _pool(blocker: Blocker) -> Callable[[], None]:
    pool = GatedExecutor(2, thread_name_prefix="test-pool")
    future = pool.submit(blocker, 1)
    return lambda: (future.result(10), pool.shutdown())  # type: ignore[func-returns-value]


def _pool_child() -> None:
    with GatedExecutor(2) as pool:
        assert list(pool.map(lambda x: x + 1, [1, 2])) == [2, 3]


class _CountingFormat:
    """A shard format whose count blocks in the counting pool (the plug-in point of shard_counts)."""

    def __init__(self, blocker: Callable[..., Any] | None) -> None:
        self.blocker = blocker

    def count(self, source: Any, url: str) -> int:
        if self.blocker is not None:
            self.blocker()
        return 7

    def read_counts(self, location: str, storage_options: Any) -> dict[str, int]:
        return {}


def _counting(blocker: Blocker) -> Callable[[], None]:
    counted: list[int] = []
    fmt = _CountingFormat(blocker)
    runner = threading.Thread(target=lambda: counted.extend(shard_counts(["x/a.tar"], index={}, format=fmt)))
    runner.start()
    return lambda: runner.join(10)


def _counting_child() -> None:
    assert shard_counts(["y/b.tar", "y/c.tar"], index={}, format=_CountingFormat(None)) == [7, 7]


def _cpu_monitor(blocker: Blocker) -> Callable[[], None]:
    require_module("psutil", "the CPU monitor of the fork tests (psutil)")
    from shardstream.cli._cpu import CPUMonitor

    class Blocking(CPUMonitor):
        def _sample(self) -> None:
            if not blocker.go.is_set():
                blocker()
            super()._sample()

    monitor = Blocking(interval=0.01).start()
    return lambda: (monitor.stop(), None)[1]


def _cpu_monitor_child() -> None:
    from shardstream.cli._cpu import CPUMonitor

    monitor = CPUMonitor(interval=0.01).start()
    time.sleep(0.05)
    assert monitor.stop().wall > 0


CASES = {
    "read-ahead open": (_read_ahead, _read_ahead_child),
    "fetch-ahead fetch": (_fetch_ahead, _fetch_ahead_child),
    "pool task (object batches, listings, fetch-loop retries)": (_pool, _pool_child),
    "shard counting": (_counting, _counting_child),
    "bench CPU monitor": (_cpu_monitor, _cpu_monitor_child),
}


@pytest.fixture(autouse=True)
def no_thread_of_ours_left() -> Iterator[None]:
    before = gate.ours()  # long-lived ones of earlier tests (the cache heartbeat) may run
    yield
    deadline = time.monotonic() + 10
    while gate.ours() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not gate.ours() - before, "a thread of ours outlived the test"


@pytest.mark.parametrize("case", list(CASES))
def test_a_fork_waits_for_a_busy_thread_of_ours_and_the_child_runs_its_own(case: str) -> None:
    start, child_work = CASES[case]
    blocker = Blocker()
    wait = start(blocker)
    assert blocker.entered.wait(10), "the thread never got busy"
    assert gate.busy_count >= 1
    timer = blocker.release_later()

    def child() -> None:
        assert gate.busy_count == 0 and not gate.ours()  # the parent's threads do not exist here
        child_work()

    code, forked_at = fork_child(child)
    timer.join()
    wait()
    assert code == 0, f"the child failed or hung after forking while a {case} was busy"
    assert forked_at >= blocker.released_at > 0, "the fork did not wait for the busy region"


def test_forks_while_a_pipe_streams_and_its_stderr_reader_drains(tmp_path: Path) -> None:
    data = tmp_path / "payload.bin"
    data.write_bytes(os.urandom(1 << 20))
    url = f"pipe:sh -c 'for i in $(seq 2000); do echo noise $i >&2; done; cat {data}'"
    with open_url(url, allow_pipe=True) as stream:
        for _ in range(10):  # the stderr thread is draining while these forks happen
            code, _ = fork_child(lambda: None)
            assert code == 0
        assert len(stream.read()) == 1 << 20


def test_telemetry_starts_no_thread(tmp_path: Path) -> None:
    import shardstream as ss

    with ss.ShardWriter(str(tmp_path / "t-%06d.tar"), maxcount=20) as sink:
        for i in range(40):
            sink.write({"__key__": f"k{i:03d}", "cls": i})
    before = set(threading.enumerate())
    dataset = ss.ShardStream(str(tmp_path / "t-{000000..000001}.tar"), telemetry=True).decode()
    seen = [set(threading.enumerate()) - before for _ in dataset]
    assert len(seen) == 40 and not any(seen)


def _import_fresh_extension() -> None:
    """Import a C extension module the parent has not loaded (dlopen takes the loader's locks)."""
    for name in ("_bz2", "_lzma", "_decimal", "_ctypes", "_sqlite3", "_curses", "_dbm", "_tkinter"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                continue
            return


def test_forks_while_threads_of_ours_start_and_end() -> None:
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            t = gate.start(lambda: None, name="short-lived")
            t.join()
            with GatedExecutor(2) as pool:
                list(pool.map(abs, range(4)))

    churners = [threading.Thread(target=churn, daemon=True) for _ in range(2)]
    for t in churners:
        t.start()
    try:
        for _ in range(60):
            code, _ = fork_child(_import_fresh_extension, timeout=15)
            assert code == 0, "a child hung or failed while threads of ours started and ended"
    finally:
        stop.set()
        for t in churners:
            t.join(10)
