"""The GIL-free wait that stands for a sample's work in ``bench_scaling`` (see its docstring).

A module of its own so that ``Work`` pickles by name: process mode sends it to worker processes,
and shardstream's forkserver would send a class of the script by value, with the globals its
methods reach (an ``Event``'s lock among them), which do not pickle.
"""

from __future__ import annotations

import ctypes
import select
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["WAITS", "Calibration", "Work", "calibrate", "gil_check", "set_timer_slack"]

#: ``prctl`` option: the calling thread's timer slack, in ns.
PR_SET_TIMERSLACK = 29


_never = threading.Event()


def _select_wait(seconds: float) -> None:
    select.select([], [], [], seconds)


def _event_wait(seconds: float) -> None:
    _never.wait(seconds)


#: The C calls that wait without the GIL, by ``--wait`` name.
WAITS: dict[str, Callable[[float], Any]] = {"sleep": time.sleep, "select": _select_wait, "event": _event_wait}


class Work:
    """The per-sample work: wait ``seconds`` without the GIL, then ``(json, bin)`` as they are.
    Pickled by name (process mode sends it to the workers)."""

    def __init__(self, seconds: float, wait: str) -> None:
        self.seconds, self.wait_name = seconds, wait
        self.wait = WAITS[wait]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Work, (self.seconds, self.wait_name))

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, Any]:
        self.wait(self.seconds)
        return sample["json"], sample["bin"]


def set_timer_slack(ns: int) -> bool:
    """This thread's timer slack (threads started later, and child processes, inherit it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # not Linux
        return False


@dataclass
class Calibration:
    """One wait call on one idle thread: actual durations (us) and CPU per wait (us)."""

    name: str
    median: float
    mean: float
    p99: float
    cpu: float


def calibrate(name: str, seconds: float, count: int) -> Calibration:
    wait = WAITS[name]
    took: list[float] = []
    c0 = time.thread_time()
    for _ in range(count):
        t0 = time.perf_counter()
        wait(seconds)
        took.append((time.perf_counter() - t0) * 1e6)
    cpu = (time.thread_time() - c0) / count * 1e6
    took.sort()
    return Calibration(name, statistics.median(took), statistics.fmean(took), took[int(0.99 * count)], cpu)


def gil_check(wait: Callable[[float], Any], seconds: float, threads: int = 8, span: float = 0.2) -> float:
    """A pure-Python loop's speed beside ``threads`` threads waiting back to back, over its speed
    alone (the best of 3 spans each, alternating: other jobs on the host slow either): a wait that
    kept the GIL would leave the loop next to nothing; one that releases it leaves the loop all but
    the moments each waking thread takes the GIL to return to Python."""

    def spin() -> int:
        n, end = 0, time.perf_counter() + span
        while time.perf_counter() < end:
            n += 1
        return n

    def beside() -> int:
        stop = threading.Event()

        def waiter() -> None:
            while not stop.is_set():
                wait(seconds)

        pool = [threading.Thread(target=waiter, daemon=True) for _ in range(threads)]
        for t in pool:
            t.start()
        try:
            return spin()
        finally:
            stop.set()
            for t in pool:
                t.join()

    alone, near = [], []
    for _ in range(3):
        alone.append(spin())
        near.append(beside())
    return max(near) / max(alone)
