"""Retries and throttles of this process, counted where they happen (not read back from logs).

Every retry of a transient fault increments :data:`FAULTS`: a stream's resume
(``sources/_resume.py``), an object or range GET retried by the fetch engine (``objects``), and
an answer of a ``get_many`` session that sends an object to the retry path. A throttling answer
(429, 503 SlowDown: ``shardstream.sources.is_throttle``) also counts as a throttle. A module of
the base layer, so that the sources count and telemetry reads without knowing each other. Telemetry reads
the counts at the start and end of a pass, so they are right at every log level; a forked child
inherits its parent's counts (readers keep a baseline).
"""

from __future__ import annotations

from .forks import ForkSafeLock

__all__ = ["FAULTS", "FaultCounts"]


class FaultCounts:
    """``retries`` and ``throttles`` so far in this process (thread-safe)."""

    def __init__(self) -> None:
        self.retries = 0
        self.throttles = 0
        self._lock = ForkSafeLock()

    def retry(self, *, throttled: bool = False) -> None:
        """Count one retry (and a throttle when the store asked to slow down)."""
        with self._lock:
            self.retries += 1
            self.throttles += throttled

    def snapshot(self) -> tuple[int, int]:
        """``(retries, throttles)`` now."""
        with self._lock:
            return self.retries, self.throttles


#: This process's counts.
FAULTS = FaultCounts()
