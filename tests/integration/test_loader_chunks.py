"""Thread mode's pool: a batch the training loop waits for goes before the chunks queued, and the
pool's light tasks keep the meaning of futures (values, errors, cancelling on close)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError
from typing import Any

import pytest

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
