"""What is left of an epoch, re-split over another number of workers or ranks (pure arithmetic).

An elastic resume (another ``num_workers``, or another world size with the same global batch)
cannot continue each old worker's stream as it was: the streams themselves change. It can
continue with exactly the *samples* the old run had not yet yielded. Those are described as
:class:`~shardstream.shards.runs.Run` values (the rest of a shard piece, or one sample that sat in a shuffle
buffer), collected from every old worker's saved position, and dealt out again here:

* :func:`cut` gives every new slot exactly its quota of samples, cutting runs at sample
  boundaries (the epoch planner's modes, where every rank must get the same number of batches);
* :func:`deal` hands out whole runs round robin (shard-list splitting, where counts are unknown).

A mixture re-splits every source's runs at once: :func:`batch_quotas` gives each new slot its
number of items (every rank the same number of batches, when any split can), and
:func:`apportion` shares each slot's items among the sources in proportion to what each has left.

Nothing here opens a shard: the stages layer turns saved positions into units and reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import StateError
from .runs import Run

__all__ = ["apportion", "batch_quotas", "cut", "deal", "slot_quotas"]


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


def batch_quotas(total: int, world_size: int, num_workers: int, batch_size: int) -> list[int]:
    """Items per new ``(rank, worker)`` slot, rank-major, so that every rank yields the same number
    of batches of ``batch_size`` (each rank's share in whole batches over its workers, its last
    batch partial). Unlike :func:`slot_quotas`, ranks may differ by one item when that keeps
    their batch counts equal (a mixture's rest need not divide over the ranks).

    Raises:
        StateError: no split gives every rank the same number of batches.
    """
    base, extra = divmod(total, world_size)
    if extra and base % batch_size == 0:
        raise StateError(
            f"{total} items remain in the epoch: over {world_size} ranks, {extra} of them would get "
            f"{base + 1} items and the others {base}, which is one batch of {batch_size} more, so the "
            "ranks cannot yield the same number of batches. Resume with a world size that divides "
            f"{total}, or with the world size that saved the state"
        )
    quotas: list[int] = []
    for rank in range(world_size):
        batches, rest = divmod(base + (rank < extra), batch_size)
        whole, more = divmod(batches, num_workers)
        own = [batch_size * (whole + (w < more)) for w in range(num_workers)]
        own[more] += rest  # the partial batch comes last in round-robin order
        quotas.extend(own)
    return quotas


def apportion(totals: Sequence[int], quotas: Sequence[int]) -> list[list[int]]:
    """``out[i][s]``: how many of source ``i``'s ``totals[i]`` items slot ``s`` gets, so that slot
    ``s`` gets ``quotas[s]`` items in all and every source's share of the first slots stays within
    one item of its proportion (each source's cumulative share is kept between the floor and the
    ceiling of ``totals[i] * quotas so far / total``, by largest remainder, never decreasing)."""
    total = sum(totals)
    if total != sum(quotas):
        raise StateError(f"the sources' remaining items ({total}) do not fill the new slots' ({sum(quotas)})")
    n = len(totals)
    out = [[0] * len(quotas) for _ in range(n)]
    before, reached = [0] * n, 0
    for s, quota in enumerate(quotas):
        reached += quota
        exact = [t * reached / total if total else 0.0 for t in totals]
        now = [min(max(int(x), b), t) for x, b, t in zip(exact, before, totals, strict=True)]
        while sum(now) < reached:  # the largest shortfall first (ties: the lower source)
            i = max((i for i in range(n) if now[i] < totals[i]), key=lambda i: exact[i] - now[i])
            now[i] += 1
        while sum(now) > reached:  # only floors held up by an earlier slot's ceiling get here
            i = min((i for i in range(n) if now[i] > before[i]), key=lambda i: exact[i] - now[i])
            now[i] -= 1
        for i in range(n):
            out[i][s] = now[i] - before[i]
        before = now
    return out
