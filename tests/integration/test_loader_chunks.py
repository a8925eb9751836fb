"""Thread mode's pool: a batch the training loop waits for goes before the chunks queued, the
pool's light tasks keep the meaning of futures (values, errors, cancelling on close), and the
chunks hold at least one item per thread in thread mode, one item at least in worker processes;
which chunks the GIL check times."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

import pytest
from _resume_cases import write_shards

import shardstream as ss
from shardstream.pipeline.parallel import Threads

WAIT = 10.0


def test_a_batch_the_loop_waits_for_goes_before_the_chunks_queued() -> None:
    order: list[str] = []
    gate = threading.Event()
    with Threads(1) as pool:
        blocker = pool.task(gate.wait, WAIT)
        time.sleep(0.05)  # the one thread is busy: what follows queues
        chunks = [pool.task(order.append, f"chunk{i}") for i in range(2)]
        batch = pool.task(order.append, "batch", first=True)
        gate.set()
        for task in [blocker, *chunks, batch]:
            task.result()
    assert order == ["batch", "chunk0", "chunk1"]


def test_a_task_gives_its_value_or_raises_its_error() -> None:
    with Threads(2) as pool:
        assert pool.task(sum, [1, 2, 3]).result() == 6
        failed = pool.task(int, "x")
        with pytest.raises(ValueError, match="invalid literal"):
            failed.result()
        assert failed.done()


def test_closing_the_pool_cancels_tasks_not_started() -> None:
    gate = threading.Event()
    pool = Threads(1)
    blocker = pool.task(gate.wait, WAIT)
    time.sleep(0.05)  # the one thread is busy: what follows queues
    queued = pool.task(list, "never")
    threading.Timer(0.2, gate.set).start()
    pool.close()
    assert blocker.result() is True
    with pytest.raises(CancelledError):
        queued.result()


def test_a_cancelled_task_does_not_run() -> None:
    gate = threading.Event()
    ran: list[Any] = []
    with Threads(1) as pool:
        blocker = pool.task(gate.wait, WAIT)
        time.sleep(0.05)
        skipped = pool.task(ran.append, 1)
        skipped.cancel()
        gate.set()
        blocker.result()
        with pytest.raises(CancelledError):
            skipped.result()
    assert not ran


# -- chunk sizes: at least one item per thread in thread mode, from one item in worker processes --

SLOW = 0.005  # seconds per item: above the 4 ms of work a chunk aims at, so that rule alone gives 1


def _slow_stamp(sample: dict[str, Any]) -> str:
    """Lets the GIL go for 5 ms, then names the thread that ran it (picklable: worker processes)."""
    time.sleep(SLOW)
    return threading.current_thread().name


def _switches(loader: ss.Loader, skip: int) -> tuple[int, int]:
    """(thread changes between consecutive items, pairs of items) after the first ``skip`` items:
    the reading's first window is cut before the work per item is known, one item per chunk."""
    names = [name for batch in loader for name in batch][skip:]
    return sum(a != b for a, b in zip(names, names[1:], strict=False)), len(names) - 1


def test_thread_mode_chunks_hold_an_item_per_thread(tmp_path: Path) -> None:
    """4 threads, items of 5 ms: sized by their work alone the chunks would hold one item each,
    and the iterating thread would wait for the GIL once per item; with the pool's
    ``min_chunk`` (the thread count, in thread mode) a thread works 4 items in a row."""
    urls = write_shards(tmp_path, [120])
    pipeline = ss.ShardStream(urls, shuffle_shards=False).map(_slow_stamp)
    with ss.Loader(pipeline, batch_size=4, num_threads=4, collate_fn=list) as loader:
        # the first window, then the first chunks, which grow to 4 items once 12 are sent
        switches, pairs = _switches(loader, skip=2 * 4 + 2 + 12)
    assert switches <= pairs // 4 + 1, f"{switches} thread changes in {pairs} pairs: chunks of fewer than 4"


def test_worker_processes_keep_chunks_of_single_slow_items(tmp_path: Path) -> None:
    """The same items in a worker process with 4 threads: one item per chunk (each batch carries
    the positions of every item read ahead to the loader's process, so the chunks stay small)."""
    urls = write_shards(tmp_path, [120])
    pipeline = ss.ShardStream(urls, shuffle_shards=False).map(_slow_stamp)
    with ss.Loader(pipeline, batch_size=4, num_threads=4, num_workers=1, collate_fn=list) as loader:
        switches, pairs = _switches(loader, skip=2 * 4 + 2)
    assert switches >= pairs // 3, f"only {switches} thread changes in {pairs} pairs: chunks of several items"


def _runs(names: list[str]) -> list[tuple[int, int]]:
    """``(start, length)`` of each run of consecutive items worked by one thread."""
    runs: list[tuple[int, int]] = []
    for i, name in enumerate(names):
        if runs and names[i - 1] == name:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def test_a_runs_first_chunks_grow_to_an_item_per_thread(tmp_path: Path) -> None:
    """8 threads, items of 5 ms: chunks of 8 items once the run has sent 56 (a chunk holds at
    most one item more than those sent divided by the threads), not from its first window on:
    sent at once, 8 chunks of 8 items would come back together, 40 ms after the first."""
    urls = write_shards(tmp_path, [160])
    pipeline = ss.ShardStream(urls, shuffle_shards=False).map(_slow_stamp)
    with ss.Loader(pipeline, batch_size=4, num_threads=8, collate_fn=list) as loader:
        names = [name for batch in loader for name in batch]
    full = [start for start, length in _runs(names) if length >= 8]
    assert full, f"no chunk of 8 items: {_runs(names)}"
    # 56 items sent before the first chunk of 8; a thread that takes two chunks in a row
    # joins them into one run, hence the margin
    assert full[0] >= 40, f"a run of 8 items from item {full[0]}: no ramp: {_runs(names)}"


def _stamp_start(started: list[float]) -> Any:
    def stamp(sample: dict[str, Any]) -> int:
        started.append(time.monotonic())
        time.sleep(0.02)
        return int(sample["cls"])

    return stamp


def test_closing_a_run_stops_the_chunks_it_left_running(tmp_path: Path) -> None:
    """8 threads, items of 20 ms (chunks of 8: 160 ms each). An epoch left after 20 batches
    closes its run: the pool's threads stop before their next item, where they went on through
    their chunks (each item started after the close would be the dead epoch's work holding a
    thread the next epoch needs). One item per thread may start just after: read the flag just
    before it was set."""
    urls = write_shards(tmp_path, [400])
    started: list[float] = []
    pipeline = ss.ShardStream(urls, shuffle_shards=False).map(_stamp_start(started))
    with ss.Loader(pipeline, batch_size=4, num_threads=8, collate_fn=list) as loader:
        it = iter(loader)
        for _ in range(20):
            next(it)
        it.close()  # type: ignore[attr-defined]
        closed = time.monotonic()
        time.sleep(0.4)  # longer than a chunk: without the stop every thread ends its chunk
        late = [t for t in started if t > closed]
        assert len(late) <= 8, f"{len(late)} items started after the run was closed"
        assert len(started) < 400


def test_a_run_times_one_chunk_in_eight_first_then_one_in_64(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GIL check's timed chunks: one in eight of a run's first 256 (``stats()`` has figures
    early), one in 64 after (the thread CPU clock is a system call per stage call)."""
    from shardstream.pipeline import parallel

    kinds: list[str] = []
    lock = threading.Lock()
    plain, sampled = parallel.ParallelMapNode._work, parallel.ParallelMapNode._work_sampled

    def counted(kind: str, work: Any) -> Any:
        def run(self: Any, items: list[Any]) -> Any:
            with lock:
                kinds.append(kind)
            return work(self, items)

        return run

    # Submitted in order by the run's one reading thread; the pool runs them in any order, so
    # the test counts them, which the order does not change.
    monkeypatch.setattr(parallel.ParallelMapNode, "_work", counted("plain", plain))
    monkeypatch.setattr(parallel.ParallelMapNode, "_work_sampled", counted("sampled", sampled))

    def slow(sample: dict[str, Any]) -> int:
        time.sleep(0.004)  # the chunks hold the pool's floor, 2 items: 350 chunks
        return int(sample["cls"])

    urls = write_shards(tmp_path, [700])
    pipeline = ss.ShardStream(urls, shuffle_shards=False).map(slow)
    with ss.Loader(pipeline, batch_size=10, num_threads=2, collate_fn=list) as loader:
        assert sum(len(batch) for batch in loader) == 700
        threads = loader.stats()["threads"]
    chunks = len(kinds)
    expected = sum(1 for k in range(chunks) if k % (8 if k < 256 else 64) == 0)
    assert chunks > 300, f"{chunks} chunks: the run hardly left its first 256"
    assert kinds.count("sampled") == expected
    assert threads, "no stage timed"
