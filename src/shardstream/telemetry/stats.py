"""Counters a stage keeps whether telemetry is on or off: the items its error policy skipped, and
how much of a core it got when it ran on a thread pool."""

from __future__ import annotations

from ..errors import redact_url

__all__ = ["StageStats"]


class StageStats:
    """Counters a stage keeps (per process): the items its error policy skipped, and, for a stage
    run on ``ss.Loader``'s threads, the wall and CPU time of a sample of its calls there."""

    __slots__ = ("last_error", "skipped", "thread_cpu_ns", "thread_queued_ns", "thread_wall_ns")

    def __init__(self) -> None:
        self.skipped = 0
        self.last_error: str | None = None
        self.thread_wall_ns = 0
        self.thread_cpu_ns = 0
        self.thread_queued_ns = 0  # of the wall time: waiting for a core (other work on it)

    def record(self, exn: BaseException) -> None:
        self.skipped += 1
        # (any error: a user's map function or a library may have put a URL in it)
        self.last_error = redact_url(f"{type(exn).__name__}: {exn}")

    def gil_wait(self) -> float | None:
        """Share of the sampled calls' wall time on threads spent neither on a core nor waiting
        for one: waiting for the GIL, for a stage that does no I/O (``None``: none sampled)."""
        if not self.thread_wall_ns:
            return None
        blocked = self.thread_wall_ns - self.thread_cpu_ns - self.thread_queued_ns
        return max(0.0, blocked / self.thread_wall_ns)

    def __repr__(self) -> str:
        return f"StageStats(skipped={self.skipped}, last_error={self.last_error!r})"
