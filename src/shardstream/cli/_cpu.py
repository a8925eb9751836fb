"""CPU accounting for a process and its descendants (DataLoader workers, pipe: children).

Totals come from ``os.times()``: this process's user+system time, plus the time of children
that have been waited for (``RUSAGE_CHILDREN``), which includes DataLoader workers once the loader
has joined them and any grandchildren those workers reaped. That is exact but blind to children
still running, so a background thread also polls the process tree with psutil (when installed)
and keeps the last CPU time seen per child; the larger of the two views is reported. Polling also
gives the number of worker processes and their peak resident memory. Children that were already
running at :meth:`CPUMonitor.start` (a server the caller started) are left out of the polling;
they are not reaped during the interval, so ``os.times()`` does not count them either.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..forks import gate

__all__ = ["CPUMonitor", "CPUReport", "have_psutil"]

log = logging.getLogger(__name__)


def have_psutil() -> bool:
    """True when psutil can be imported."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class CPUReport:
    """CPU used during a measured interval.

    Attributes:
        wall: seconds of wall-clock time.
        main: CPU-seconds of this process.
        children: CPU-seconds of descendant processes (workers).
        processes: descendant processes seen (0 when psutil is missing and none was reaped).
        peak_rss_mb: peak resident memory of the whole tree seen by polling (None without psutil).
    """

    wall: float
    main: float
    children: float
    processes: int
    peak_rss_mb: float | None

    @property
    def total(self) -> float:
        return self.main + self.children

    @property
    def cores(self) -> float:
        """Average number of cores busy: total CPU-seconds / wall seconds."""
        return self.total / self.wall if self.wall > 0 else 0.0


class CPUMonitor:
    """Measures CPU of this process and its descendants between :meth:`start` and :meth:`stop`.

    Args:
        interval: psutil polling period in seconds. Default 0.1.
    """

    def __init__(self, *, interval: float = 0.1) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._child_cpu: dict[int, float] = {}
        self._preexisting: set[int] = set()
        self._peak_rss = 0
        self._t0 = 0.0
        self._os0: os.times_result | None = None
        self._proc: Any = None
        self._psutil: Any = None

    def start(self) -> CPUMonitor:
        try:
            import psutil

            self._psutil = psutil
            self._proc = psutil.Process()
            # Children that already run (a local S3 server started by the demo, say) are not part
            # of the measurement: remember them and leave them out.
            self._preexisting = {child.pid for child in self._proc.children(recursive=True)}
        except ImportError:
            self._proc = None
        self._os0 = os.times()
        self._t0 = time.perf_counter()
        if self._proc is not None:
            # Ours, through the fork gate: `bench --workers` forks DataLoader workers meanwhile.
            self._thread = gate.start(self._poll, name="shardstream-cpu-monitor")
        return self

    def _sample(self) -> None:
        psutil = self._psutil  # the module object: the polling thread never imports anything
        proc = self._proc
        rss = 0
        try:
            rss = proc.memory_info().rss
            children = proc.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            if child.pid in self._preexisting:
                continue
            try:
                cpu = _cpu_of(child)
                rss += child.memory_info().rss
            except psutil.Error:  # exited between listing and reading
                continue
            with self._lock:
                self._child_cpu[child.pid] = max(cpu, self._child_cpu.get(child.pid, 0.0))
        with self._lock:
            self._peak_rss = max(self._peak_rss, rss)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            with gate.busy():
                self._sample()

    def stop(self) -> CPUReport:
        """Stop polling and return the report for the interval since :meth:`start`."""
        wall = time.perf_counter() - self._t0
        if self._proc is not None:
            self._sample()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        t1 = os.times()
        t0 = self._os0 if self._os0 is not None else t1
        main = (t1.user - t0.user) + (t1.system - t0.system)
        reaped = (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)
        with self._lock:
            polled = sum(self._child_cpu.values())
            processes = len(self._child_cpu)
            peak = self._peak_rss / 1e6 if self._proc is not None else None
        return CPUReport(
            wall=wall, main=main, children=max(reaped, polled), processes=processes, peak_rss_mb=peak
        )


def _cpu_of(proc: Any) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0))
