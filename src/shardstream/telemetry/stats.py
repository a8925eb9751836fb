"""Counters a stage keeps whether telemetry is on or off: the items its error policy skipped."""

from __future__ import annotations

__all__ = ["StageStats"]


class StageStats:
    """Counters a stage keeps about the items its error policy skipped (per process)."""

    __slots__ = ("skipped", "last_error")

    def __init__(self) -> None:
        self.skipped = 0
        self.last_error: str | None = None

    def record(self, exn: BaseException) -> None:
        self.skipped += 1
        self.last_error = f"{type(exn).__name__}: {exn}"

    def __repr__(self) -> str:
        return f"StageStats(skipped={self.skipped}, last_error={self.last_error!r})"
