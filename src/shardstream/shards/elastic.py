"""What is left of an epoch, re-split over another number of workers or ranks (pure arithmetic).

An elastic resume (another ``num_workers``, or another world size with the same global batch)
cannot continue each old worker's stream as it was: the streams themselves change. It can
continue with exactly the *samples* the old run had not yet yielded. Those are described as
:class:`~shardstream.shards.runs.Run` values (the rest of a shard piece, or one sample that sat in a shuffle
buffer), collected from every old worker's saved position, and dealt out again here:

* :func:`cut` gives every new slot exactly its quota of samples, cutting runs at sample
  boundaries (the epoch planner's modes, where every rank must get the same number of batches);
* :func:`deal` hands out whole runs round robin (shard-list splitting, where counts are unknown).

Nothing here opens a shard: the stages layer turns saved positions into units and reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import StateError
from .runs import Run

__all__ = ["cut", "deal", "slot_quotas"]


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


def cut(units: Sequence[Run], quotas: Sequence[int]) -> list[list[Run]]:
    """Consecutive runs of exactly ``quotas[i]`` samples for slot ``i`` (unit counts must be known)."""
    total = sum(u.count for u in units if u.count is not None)
    if any(u.count is None for u in units) or total != sum(quotas):
        raise StateError(
            f"the remaining samples ({total}) do not match the new slots' quotas ({sum(quotas)})"
        )
    pending = list(reversed(units))
    parts: list[list[Run]] = []
    for quota in quotas:
        part: list[Run] = []
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


def deal(units: Sequence[Run], slots: int) -> list[list[Run]]:
    """Whole units round robin over ``slots`` (for runs whose sample counts are unknown)."""
    parts: list[list[Run]] = [[] for _ in range(slots)]
    for i, unit in enumerate(units):
        parts[i % slots].append(unit)
    return parts
