"""The GIL sampler (telemetry/gil.py): a thread running Python keeps the GIL busy, a thread in C
code that releases it (a sleep) does not; and the loader threads' CPU and run-queue time are read
per thread."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import pytest

from shardstream.telemetry.gil import GilSampler, gil_enabled, thread_times


def _share_while(work: Callable[[threading.Event], None], threads: int = 2, seconds: float = 0.4) -> float:
    stop = threading.Event()
    workers = [threading.Thread(target=work, args=(stop,), daemon=True) for _ in range(threads)]
    for t in workers:
        t.start()
    try:
        sampler = GilSampler()
        time.sleep(seconds)
        sampler.stop()
    finally:
        stop.set()
        for t in workers:
            t.join()
    assert sampler.probes >= 5  # a probe of a busy GIL waits for the switch interval (5 ms) or more
    share = sampler.share
    assert share is not None
    return share


def _python(stop: threading.Event) -> None:
    while not stop.is_set():
        total = 0
        for i in range(2000):
            total += i


def _sleeping(stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(0.0005)


@pytest.mark.skipif(not gil_enabled(), reason="no GIL in this interpreter")
def test_python_threads_keep_the_gil_busy_sleeping_ones_do_not() -> None:
    busy = _share_while(_python)
    idle = _share_while(_sleeping)
    assert busy > 0.6, busy
    assert idle < 0.3, idle


def test_the_sampler_stops_by_itself_at_its_limit() -> None:
    sampler = GilSampler(limit=0.05)
    time.sleep(0.3)
    assert "shardstream-gil-sampler" not in [t.name for t in threading.enumerate()]
    sampler.stop()
    assert 0 < sampler.probes < 100


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread CPU time from /proc")
def test_thread_cpu_time_of_a_busy_thread() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=_python, args=(stop,), daemon=True)
    worker.start()
    assert worker.native_id is not None
    before = thread_times([worker.native_id, -1])  # -1: no such thread, left out
    time.sleep(0.2)
    after = thread_times([worker.native_id])
    stop.set()
    worker.join()
    assert before is not None and after is not None and list(before) == [worker.native_id]
    on_core = after[worker.native_id][0] - before[worker.native_id][0]
    waited = after[worker.native_id][1] - before[worker.native_id][1]
    assert on_core > 10_000_000 and 0 <= waited < 300_000_000
