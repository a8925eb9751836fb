"""One run of consecutive samples of one shard: the unit every plan, saved position and re-split uses.

An epoch plan gives each ``(rank, worker)`` slot a list of runs; a saved position names the run a
worker was reading and how far it got; an elastic resume collects what is left as runs and deals
them out again. One type for all three, so a run cut by the planner, saved in a state and resumed
on another world shape is the same value all the way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import StateError, redact_url

__all__ = ["Run"]


@dataclass(frozen=True)
class Run:
    """``count`` samples of shard ``url`` from sample number ``start`` (``count=None``: to the end).

    Attributes:
        url: the shard.
        start: the first sample's number, counted from the shard's first sample; ``-1`` only for
            a one-sample run whose byte ``offset`` is known (a sample saved from a shuffle buffer).
        count: how many samples; ``None`` when the shard's length is unknown (list splitting).
        offset: the first sample's byte offset when known (a saved position), else ``-1``; a
            reader seeks there instead of skipping ``start`` samples.
        pad: exact mode's padding marker (``True`` for samples repeated so every rank has the
            same count, ``False`` for real ones); ``None`` outside exact mode.
    """

    url: str
    start: int = 0
    count: int | None = None
    offset: int = -1
    pad: bool | None = None

    def __post_init__(self) -> None:
        if self.offset < 0 and self.start < 0:
            raise StateError(f"a run of samples of {self.shown} has neither a sample number nor an offset")
        if self.count is not None and self.count < 0:
            raise ValueError(f"a run of samples of {self.shown} cannot have {self.count} samples")

    def __repr__(self) -> str:  # (the dataclass's own would show the URL's credentials)
        return (
            f"Run(url={self.shown!r}, start={self.start}, count={self.count}, offset={self.offset}, "
            f"pad={self.pad})"
        )

    @property
    def shown(self) -> str:
        """The shard's URL as messages show it (credentials removed)."""
        return redact_url(self.url)

    @property
    def size(self) -> int:
        """The number of samples (the run's count must be known)."""
        if self.count is None:
            raise ValueError(f"the run of {self.shown} from sample {self.start} has no known length")
        return self.count

    @property
    def stop(self) -> int:
        """One past the last sample's number (``start + count``; both must be known)."""
        if self.start < 0:
            raise ValueError(f"the run of {self.shown} at byte {self.offset} has no sample number")
        return self.start + self.size

    def split(self, n: int) -> tuple[Run, Run]:
        """The first ``n`` samples and the rest (the rest starts at a known sample number)."""
        if self.count is None or self.start < 0 or not 0 < n < self.count:
            raise ValueError(f"cannot split {self} after {n} samples")
        head = Run(self.url, self.start, n, self.offset, self.pad)
        return head, Run(self.url, self.start + n, self.count - n, -1, self.pad)

    def to_json(self) -> list[Any]:
        """The run as a saved state stores it: ``[url, start, count, offset, pad]``."""
        return [self.url, self.start, self.count, self.offset, self.pad]

    @classmethod
    def from_json(cls, data: Any) -> Run:
        """The run :meth:`to_json` saved.

        Raises:
            StateError: the saved value is not a run of samples.
        """
        try:
            url, start, count, offset, pad = data
            return cls(
                str(url),
                int(start),
                None if count is None else int(count),
                int(offset),
                None if pad is None else bool(pad),
            )
        except (TypeError, ValueError) as exn:
            raise StateError(
                f"a saved run of samples is corrupted: {redact_url(data, limit=200)} ({exn})"
            ) from exn
