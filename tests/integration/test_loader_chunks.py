"""Thread mode cuts the reading into chunks for the pool: a reader that is busy sends large chunks
even when each item's wall time on the pool looks long (small ones first), a batch the training
loop waits for goes before the chunks queued, and the pool's light tasks keep the meaning of
futures (values, errors, cancelling on close)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError
from typing import Any

import pytest

import shardstream as ss
from shardstream.pipeline.parallel import Threads

WAIT = 10.0


def _longest_run(names: list[str]) -> int:
    """The longest run of consecutive items that one pool thread worked."""
    longest = run = 1
    for before, name in zip(names, names[1:], strict=False):
        run = run + 1 if name == before else 1
        longest = max(longest, run)
    return longest


def test_chunks_grow_when_the_reading_outpaces_each_items_wall_time() -> None:
    """32 threads, each item a 2 ms GIL-free wait: sized by the items' wall time alone, a chunk
    would hold 2 items (4 ms of work), and on many threads the hand-off of each chunk takes the
    GIL from the reading. The reading here makes items far faster than the pool needs them, so
    chunks hold what it reads in 2 ms: tens of items, worked one after the other by one thread
    (at least 10 in a row are asked: the old sizing made runs of 2)."""
    count = 1500
    names: list[str] = [""] * count

    def work(n: int) -> int:
        time.sleep(0.002)
        names[n] = threading.current_thread().name
        return n

    pipeline = ss.DataPipeline(lambda: iter(range(count)), ss.map(work))
    with ss.Loader(pipeline, batch_size=None, num_threads=32) as loader:
        assert list(loader) == list(range(count))
    assert _longest_run(names) >= 10, f"chunks of at most {_longest_run(names)} items"
    # They grow from the chunks taken back, not from those sent: the first items (what the
    # first batches are made of) still come in small chunks spread over the threads.
    assert _longest_run(names[:200]) <= 8, f"a chunk of {_longest_run(names[:200])} items at the start"


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
