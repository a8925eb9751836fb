"""This machine's decode-only capacity: the frame of reference for a loader's samples/s.

A dataset's JPEGs, already in memory, are decoded to arrays by ``processes`` processes at once
(the cores a loader's workers get), each decoding its share over and over for a fixed time, with
the image handler a ``decode(SPEC)`` stage uses. No reading, no pipeline, no batching, no hand-off
to the main process: what the cores could do if decoding were all there is, on this host as busy
as it is now. A loader's rate divided by it says how much of the machine the loader turns into
samples, which a bare samples/s cannot say on a host that other work shares. The processes start
together (after their start-up and a first decode), so that none has the cores to itself for a
while; each is timed from that start to its last decode, and the capacity is the sum of their rates.
The benchmarks' ceiling (``benchmarks/_ceiling.py``) is the same idea over one pass.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Capacity", "decode_capacity"]

#: Seconds each process decodes: long enough to cover the scheduler's time slices many times over.
MEASURE_S = 2.0
_START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Capacity:
    """Images decoded per second by ``processes`` processes (``decoded`` in ``seconds``)."""

    samples_per_s: float
    processes: int
    decoded: int
    seconds: float

    def share(self, samples_per_s: float) -> float:
        """A rate as a share of this capacity."""
        return samples_per_s / self.samples_per_s if self.samples_per_s > 0 else 0.0


def _decode_for(jpegs: list[bytes], spec: str, seconds: float, start: Any, results: Any) -> None:
    """In a child process: decode ``jpegs`` round and round from ``start`` for ``seconds``."""
    from ..decoders.image import ImageHandler

    decode = ImageHandler(spec).decode
    decode(jpegs[0], "jpg")  # imports and first-call costs, before the clock starts
    start.wait(_START_TIMEOUT_S)
    count, t0 = 0, time.perf_counter()
    end = t0 + seconds
    while True:
        for data in jpegs:
            decode(data, "jpg")
            count += 1
            if time.perf_counter() >= end:
                results.put((count, time.perf_counter() - t0))
                return


def decode_capacity(
    jpegs: list[bytes], processes: int, *, spec: str = "rgb8", seconds: float = MEASURE_S
) -> Capacity:
    """Measure how many of ``jpegs`` per second ``processes`` processes decode (``spec``: the
    decode stage's image spec). Takes about ``seconds`` plus the processes' start-up.

    Raises:
        RuntimeError: a process failed or did not report (it is killed by its PID).
    """
    if not jpegs:
        raise ValueError("no JPEGs to decode")
    processes = max(1, processes)
    # Fork when nothing else runs here (no start-up cost); a thread could hold a lock at the fork.
    ctx: Any = (
        multiprocessing.get_context("fork")
        if threading.active_count() == 1
        else multiprocessing.get_context("spawn")
    )
    start = ctx.Barrier(processes + 1)
    results = ctx.Queue()
    children = [
        ctx.Process(target=_decode_for, args=(jpegs[i::processes] or jpegs, spec, seconds, start, results))
        for i in range(processes)
    ]
    try:
        for child in children:
            child.start()
        start.wait(_START_TIMEOUT_S)  # every child has decoded once: go
        rates = [results.get(timeout=seconds + _START_TIMEOUT_S) for _ in children]
    except Exception as exc:
        raise RuntimeError(f"measuring the decode capacity failed: {type(exc).__name__}: {exc}") from exc
    finally:
        for child in children:
            child.join(timeout=5)
            if child.is_alive() and child.pid is not None:
                os.kill(child.pid, signal.SIGKILL)
                child.join(timeout=5)
        results.close()
    decoded = sum(count for count, _ in rates)
    return Capacity(
        samples_per_s=sum(count / elapsed for count, elapsed in rates if elapsed > 0),
        processes=processes,
        decoded=decoded,
        seconds=max(elapsed for _, elapsed in rates),
    )
