"""Requests in flight, bounded by an AIMD limit that throttling (503 SlowDown) halves.

TCP's congestion rule applied to requests: every success adds ``1/limit`` (about one request
per window of successes), every throttling episode halves the limit, down to ``minimum``. One
burst of 503s from a full window is one episode (halvings are at least ``cooldown`` seconds
apart), so a burst of 32 throttled requests does not collapse the limit to 1.
"""

from __future__ import annotations

import threading
import time

__all__ = ["Concurrency"]


class Concurrency:
    """A counting gate for requests whose capacity adapts (additive increase, multiplicative decrease).

    Args:
        maximum: the most requests in flight (the fetch window).
        minimum: the floor the limit never drops below (default 1).
        cooldown: seconds between two halvings (default 0.2).
    """

    def __init__(self, maximum: int, *, minimum: int = 1, cooldown: float = 0.2) -> None:
        self.maximum = maximum
        self.minimum = max(1, min(minimum, maximum))
        self.limit = float(maximum)
        self.cooldown = cooldown
        self.in_flight = 0
        self.throttles = 0  # throttled responses seen (for stats and tests)
        self.decreases = 0
        self._last_decrease = -1e9
        self._cond = threading.Condition(threading.Lock())

    def __repr__(self) -> str:
        return f"Concurrency(limit={self.limit:.1f}, maximum={self.maximum}, throttles={self.throttles})"

    def acquire(self, stop: threading.Event) -> bool:
        """Wait for a free slot; False when ``stop`` is set first."""
        with self._cond:
            while self.in_flight >= int(self.limit):
                if stop.is_set():
                    return False
                self._cond.wait(0.05)
            if stop.is_set():
                return False
            self.in_flight += 1
            return True

    def try_acquire(self) -> bool:
        """Take a free slot if there is one, without waiting."""
        with self._cond:
            if self.in_flight >= int(self.limit):
                return False
            self.in_flight += 1
            return True

    def release(self, *, ok: bool) -> None:
        with self._cond:
            self.in_flight -= 1
            if ok and self.limit < self.maximum:
                self.limit = min(float(self.maximum), self.limit + 1.0 / self.limit)
            self._cond.notify()

    def throttled(self) -> None:
        """Record a throttled response; halve the limit unless it was halved just now."""
        now = time.monotonic()
        with self._cond:
            self.throttles += 1
            if now - self._last_decrease >= self.cooldown:
                self._last_decrease = now
                self.limit = max(float(self.minimum), self.limit / 2)
                self.decreases += 1
