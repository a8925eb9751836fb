"""What is left of an epoch, re-split over another number of workers or ranks (pure arithmetic).

An elastic resume (another ``num_workers``, or another world size with the same global batch)
cannot continue each old worker's stream as it was: the streams themselves change. It can
continue with exactly the *samples* the old run had not yet yielded. Those are described as
:class:`Unit` runs of samples (the rest of a shard piece, or one sample that sat in a shuffle
buffer), collected from every old worker's saved position, and dealt out again here:

* :func:`cut` gives every new slot exactly its quota of samples, cutting runs at sample
  boundaries (the epoch planner's modes, where every rank must get the same number of batches);
* :func:`deal` hands out whole runs round robin (shard-list splitting, where counts are unknown).

Nothing here opens a shard: the stages layer turns saved positions into units and reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StateError

__all__ = ["Unit", "cut", "deal", "slot_quotas"]


@dataclass(frozen=True)
class Unit:
    """``count`` samples of shard ``url`` (``None``: to the shard's end).

    The run starts at byte ``offset`` when known (``-1``: unknown), else at sample number
    ``start`` (counted from the shard's first sample; ``-1`` only for a one-sample unit whose
    offset is known). ``pad`` is exact mode's padding marker (``None`` outside exact mode).
    """

    url: str
    start: int = 0
    count: int | None = None
    offset: int = -1
    pad: bool | None = None

    def __post_init__(self) -> None:
        if self.offset < 0 and self.start < 0:
            raise StateError(f"a run of samples of {self.url} has neither a sample number nor an offset")

    def to_json(self) -> list[Any]:
        return [self.url, self.start, self.count, self.offset, self.pad]

    @classmethod
    def from_json(cls, data: Any) -> Unit:
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
            raise StateError(f"a saved run of samples is corrupted: {str(data)[:200]} ({exn})") from exn

    def split(self, n: int) -> tuple[Unit, Unit]:
        """The first ``n`` samples and the rest (the rest starts at a known sample number)."""
        if self.count is None or self.start < 0 or not 0 < n < self.count:
            raise ValueError(f"cannot split {self} after {n} samples")
        head = Unit(self.url, self.start, n, self.offset, self.pad)
        return head, Unit(self.url, self.start + n, self.count - n, -1, self.pad)


def slot_quotas(total: int, world_size: int, num_workers: int, batch_size: int) -> list[int]:
    """Samples per new ``(rank, worker)`` slot, rank-major: every rank the same, each rank's share
    in whole batches over its workers (a rank's last batch may be partial).

    Raises:
        StateError: ``total`` does not divide evenly over the ranks (the ranks' saved positions
            are from different steps), which would give ranks different batch counts.
    """
    if total % world_size:
        raise StateError(
            f"{total} samples remain in the epoch, which does not divide over {world_size} ranks; the "
            "saved rank states are from different steps. Save every rank's state at the same step"
        )
    per_rank = total // world_size
    batches, rest = divmod(per_rank, batch_size)
    quotas = [batch_size * (batches // num_workers + (w < batches % num_workers)) for w in range(num_workers)]
    quotas[batches % num_workers] += rest  # the partial batch comes last in round-robin order
    return quotas * world_size


def cut(units: Sequence[Unit], quotas: Sequence[int]) -> list[list[Unit]]:
    """Consecutive runs of exactly ``quotas[i]`` samples for slot ``i`` (unit counts must be known)."""
    total = sum(u.count for u in units if u.count is not None)
    if any(u.count is None for u in units) or total != sum(quotas):
        raise StateError(
            f"the remaining samples ({total}) do not match the new slots' quotas ({sum(quotas)})"
        )
    pending = list(reversed(units))
    parts: list[list[Unit]] = []
    for quota in quotas:
        part: list[Unit] = []
        while quota:
            unit = pending.pop()
            assert unit.count is not None
            if unit.count > quota:
                unit, rest = unit.split(quota)
                pending.append(rest)
            if unit.count:
                part.append(unit)
            quota -= unit.count or 0
        parts.append(part)
    return parts


def deal(units: Sequence[Unit], slots: int) -> list[list[Unit]]:
    """Whole units round robin over ``slots`` (for runs whose sample counts are unknown)."""
    parts: list[list[Unit]] = [[] for _ in range(slots)]
    for i, unit in enumerate(units):
        parts[i % slots].append(unit)
    return parts
