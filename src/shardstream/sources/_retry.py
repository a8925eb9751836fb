"""Retry policy for transient network faults: bounded attempts, total deadline, backoff with jitter.

Two budgets, so that a dead server fails fast while a long transfer survives outages: a stream
that has not received its first byte gives up after ``first_byte_deadline`` seconds (default 60,
counted from its first request, timeouts included), while a stream that has received bytes may
spend ``deadline`` seconds (default 300) retrying in total. :func:`silent_server_give_up` is the
arithmetic for a server that accepts connections and never answers.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from ..config import UNSET, read_settings
from ..errors import TransientSourceError

log = logging.getLogger("shardstream.sources")
_T = TypeVar("_T")

__all__ = ["RetryPolicy", "Sleep", "silent_server_give_up"]

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
        first_byte_deadline: seconds a stream may take, from its first request and retries
            included, to receive its first byte (default 60; never more than ``deadline``).
        base_delay: upper bound of the first backoff in seconds (default 0.25).
        max_delay: cap on one backoff in seconds (default 10).
    """

    attempts: int = 8
    deadline: float = 300.0
    first_byte_deadline: float = 60.0
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
        if min(self.deadline, self.first_byte_deadline, self.base_delay, self.max_delay) < 0:
            raise ConfigurationError(
                f"retry timings must be >= 0, got {self.deadline=}, {self.first_byte_deadline=}, "
                f"{self.base_delay=}, {self.max_delay=}"
            )

    @classmethod
    def from_options(
        cls,
        *,
        retries: object = UNSET,
        retry_deadline: object = UNSET,
        first_byte_deadline: object = UNSET,
    ) -> RetryPolicy:
        """A policy from explicit options, falling back to the ``SHARDSTREAM_*`` settings."""
        if retries is UNSET or retries is None or retry_deadline is UNSET or retry_deadline is None:
            settings = read_settings()
            retries = settings.retries if retries is UNSET or retries is None else retries
            retry_deadline = (
                settings.retry_deadline
                if retry_deadline is UNSET or retry_deadline is None
                else retry_deadline
            )
        first = cls.first_byte_deadline if first_byte_deadline in (UNSET, None) else first_byte_deadline
        return cls(
            attempts=int(cast(int, retries)),
            deadline=float(cast(float, retry_deadline)),
            first_byte_deadline=float(cast(float, first)),
        )

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based), jittered."""
        cap = min(self.max_delay, self.base_delay * (2 ** max(0, retry - 1)))
        return self.rng.uniform(0.0, cap)

    def next_delay(self, retry: int, started: float, deadline: float | None = None) -> float | None:
        """Delay before retry ``retry`` of a stream that began retrying at ``started``
        (``time.monotonic()``), or ``None`` when attempts or the deadline (``self.deadline``
        unless given) are used up."""
        if retry >= self.attempts:
            return None
        remaining = (self.deadline if deadline is None else deadline) - (time.monotonic() - started)
        if remaining <= 0:
            return None
        return min(self.backoff(retry), remaining)

    def call(self, attempt: Callable[[], _T], what: str) -> _T:
        """``attempt()``, retried on :class:`~shardstream.errors.TransientSourceError` within the
        attempts and the deadline; each retry is logged (``retry <k>/<max> for <what> in <s>s:
        <error>``, ``what`` already redacted), and the last error is raised when the budget is
        spent. For whole requests (stat, a listing page, an upload's block); streams resume
        through :class:`~._resume.ResumableReader` instead."""
        started = time.monotonic()
        failures = 0
        while True:
            try:
                return attempt()
            except TransientSourceError as exc:
                failures += 1
                delay = self.next_delay(failures, started)
                if delay is None:
                    raise
                log.warning("retry %d/%d for %s in %.2fs: %s", failures, self.attempts - 1, what, delay, exc)
                self.sleep(delay)


def silent_server_give_up(policy: RetryPolicy, attempt_seconds: float) -> float:
    """Worst-case seconds until a stream gives up on a server that never sends a byte.

    Each attempt costs ``attempt_seconds`` (connect, then ``response_timeout`` waiting for the
    headers) and the backoff before it takes its largest jittered value; the stream gives up at
    the first failure past ``min(first_byte_deadline, deadline)`` or when attempts run out, as
    :class:`~._resume.ResumableReader` does.
    """
    deadline = min(policy.deadline, policy.first_byte_deadline)
    elapsed = 0.0
    for failure in range(1, policy.attempts + 1):
        elapsed += attempt_seconds
        if failure >= policy.attempts or elapsed >= deadline:
            return elapsed
        elapsed += min(policy.max_delay, policy.base_delay * 2 ** (failure - 1), deadline - elapsed)
    return elapsed  # pragma: no cover - the loop always returns
