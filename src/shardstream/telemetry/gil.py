"""How busy the GIL is: a sampling thread's waits for it, and the CPU and run-queue time of
given threads.

CPython says nothing about who holds the GIL, so :class:`GilSampler` asks the way any thread would:
a thread of its own sleeps ``period`` seconds (releasing the GIL), wakes and takes the GIL back.
Its time blocked beyond the sleep, neither on a core nor waiting for one (Linux's
``/proc/thread-self/schedstat``: run time and run-queue time), is the wait for the GIL; a probe
that waited more than :data:`HELD_NS` found the GIL held. Probes at times unrelated to the work
measured make the share of probes that found it held the share of the time it was held (by any
other thread: the pipeline's, and the training loop's own Python).

The noise floor decides the threshold: with the thread's timer slack at its minimum (``prctl``,
Linux; the kernel's default slack is noise of the size of the waits measured) an unheld GIL reads
a little below zero, the reads of schedstat inside the timed span counting as run time, so a
threshold just above zero sees a GIL held for a few tens of microseconds. Without schedstat (not
Linux) the run-queue time is unknown, and a loaded machine reads as a busy GIL.

The sampler costs one wake-up per ``period`` (two ``pread`` calls and a sleep) and, when a thread
holds the GIL through the switch interval, one forced switch: it runs only while a loader
measures its pipeline (``loader/_auto.py``).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Iterable

from ..forks import gate

__all__ = ["HELD_NS", "GilSampler", "gil_enabled", "thread_times"]

#: A probe whose wait for the GIL exceeds this found it held (see the module docstring).
HELD_NS = 20_000
_PR_SET_TIMERSLACK = 29


def gil_enabled() -> bool:
    """Whether this interpreter runs with a GIL: ``sys._is_gil_enabled()`` on builds that have it
    (free-threaded 3.13+ may run without), else True."""
    if sys.version_info >= (3, 13):
        return bool(sys._is_gil_enabled())
    return True


def _schedstat(fd: int) -> tuple[int, int]:
    """(ns on a core, ns waiting for one) of the thread ``fd`` was opened for."""
    fields = os.pread(fd, 128, 0).split()
    return int(fields[0]), int(fields[1])


def thread_times(native_ids: Iterable[int]) -> dict[int, tuple[int, int]] | None:
    """``{native id: (ns on a core, ns waiting for one)}`` so far of the threads of this process
    with these ids (``/proc/self/task/ID/schedstat``; a thread that has ended is left out), or
    ``None`` where that is not readable (not Linux)."""
    times = {}
    for tid in native_ids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                fields = f.read().split()
        except FileNotFoundError:
            continue
        except OSError:
            return None
        try:
            times[tid] = (int(fields[0]), int(fields[1]))
        except (IndexError, ValueError):
            return None
    return times


class GilSampler:
    """A thread that probes the GIL every ``period`` seconds until :meth:`stop`, or for ``limit``
    seconds at most (a caller that stops calling does not leave it running; see the module).

    ``probes`` and ``held`` count the probes and those that found the GIL held; :attr:`share`
    is their ratio.
    """

    def __init__(self, period: float = 0.001, limit: float = 30.0) -> None:
        self.period, self.limit = period, limit
        self.probes = 0
        self.held = 0
        self._stop = threading.Event()
        self._thread = gate.start(self._run, name="shardstream-gil-sampler")

    @property
    def share(self) -> float | None:
        """The share of probes that found the GIL held (``None``: no probe yet)."""
        return self.held / self.probes if self.probes else None

    def _run(self) -> None:
        _tight_timer()
        try:
            fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            fd = None
        period_ns = int(self.period * 1e9)
        clock = time.perf_counter_ns
        deadline = clock() + int(self.limit * 1e9)
        try:
            while not self._stop.is_set() and clock() < deadline:
                if fd is not None:
                    t0, (run0, queued0) = clock(), _schedstat(fd)
                    time.sleep(self.period)
                    t1, (run1, queued1) = clock(), _schedstat(fd)
                    waited = (t1 - t0) - (run1 - run0) - (queued1 - queued0) - period_ns
                else:
                    t0, c0 = clock(), time.thread_time_ns()
                    time.sleep(self.period)
                    waited = (clock() - t0) - (time.thread_time_ns() - c0) - period_ns
                self.probes += 1
                self.held += waited > HELD_NS
        finally:
            if fd is not None:
                os.close(fd)

    def stop(self) -> None:
        """Stop probing and join the thread (idempotent)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


def _tight_timer() -> None:
    """Set this thread's timer slack to its minimum (Linux; the default would hide short GIL
    segments in its noise); elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
    except (OSError, AttributeError):
        pass
