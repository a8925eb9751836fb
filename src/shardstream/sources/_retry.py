"""Retry policy for transient network faults: bounded attempts, total deadline, backoff with jitter."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from ..config import UNSET, read_settings

__all__ = ["RetryPolicy", "Sleep"]

#: Sleeps for the given number of seconds (injectable so tests do not wait).
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a stream retries a transient fault before giving up.

    The delay before retry ``n`` (1-based) is drawn uniformly from
    ``[0, min(max_delay, base_delay * 2 ** (n - 1))]`` ("full jitter"): many workers that lost
    their connections together do not come back in lockstep.

    Args:
        attempts: total tries including the first (default: ``SHARDSTREAM_RETRIES``, 8).
            ``1`` disables retries.
        deadline: seconds one stream may spend retrying in total, sleeps included (default:
            ``SHARDSTREAM_RETRY_DEADLINE``, 300).
        base_delay: upper bound of the first backoff in seconds (default 0.25).
        max_delay: cap on one backoff in seconds (default 10).
    """

    attempts: int = 8
    deadline: float = 300.0
    base_delay: float = 0.25
    max_delay: float = 10.0
    sleep: Sleep = field(default=time.sleep, repr=False, compare=False)
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        from ..errors import ConfigurationError

        if self.attempts < 1:
            raise ConfigurationError(
                f"retries={self.attempts!r}: need at least 1 attempt (1 disables retries)"
            )
        if self.deadline < 0 or self.base_delay < 0 or self.max_delay < 0:
            raise ConfigurationError(
                f"retry timings must be >= 0, got {self.deadline=}, {self.base_delay=}, {self.max_delay=}"
            )

    @classmethod
    def from_options(cls, *, retries: object = UNSET, retry_deadline: object = UNSET) -> RetryPolicy:
        """A policy from explicit options, falling back to the ``SHARDSTREAM_*`` settings."""
        if retries is UNSET or retries is None or retry_deadline is UNSET or retry_deadline is None:
            settings = read_settings()
            retries = settings.retries if retries is UNSET or retries is None else retries
            retry_deadline = (
                settings.retry_deadline
                if retry_deadline is UNSET or retry_deadline is None
                else retry_deadline
            )
        return cls(attempts=int(cast(int, retries)), deadline=float(cast(float, retry_deadline)))

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based), jittered."""
        cap = min(self.max_delay, self.base_delay * (2 ** max(0, retry - 1)))
        return self.rng.uniform(0.0, cap)

    def next_delay(self, retry: int, started: float) -> float | None:
        """Delay before retry ``retry`` of a stream that began retrying at ``started``
        (``time.monotonic()``), or ``None`` when attempts or the deadline are used up."""
        if retry >= self.attempts:
            return None
        remaining = self.deadline - (time.monotonic() - started)
        if remaining <= 0:
            return None
        return min(self.backoff(retry), remaining)
