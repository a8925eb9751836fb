"""How each mode of the epoch plan cuts the epoch's sample stream into the slots' runs, per slot.

Every mode is a set of stream cuts: a slot's runs are a few ranges of
:class:`~shardstream.shards.stream.SampleStream` positions that follow from cumulative sums, so
:meth:`SlotCuts.runs` computes one slot's runs on demand, in ``O(num_workers + log n)`` plus one
step per run, and no plan holds every slot's runs (a million runs at cluster scale).

* :class:`SampleCuts` (equal, ``granularity="sample"``): slot ``k`` reads positions
  ``[Q_k, Q_k + q_k)``, ``Q`` the cumulative quotas.
* :class:`ExactCuts` (exact): rank ``r`` holds ``total // R (+1)`` consecutive real samples,
  dealt to its workers in worker order; a worker's padding continues from the rank's first
  sample (wrapping at the stream's end).
* :class:`ShardCuts` (equal, ``granularity="shard"``): the boundaries between the slots' ideal
  ranges are moved to the nearest shard boundary (see its docstring).

The first two are the cuts of the first planner, position for position; the third replaces its
greedy heap, which assigned shards one at a time and could not be computed for one slot alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..errors import SplitError
from .runs import Run
from .stream import SampleStream

__all__ = ["ExactCuts", "SampleCuts", "ShardCuts", "SlotCuts"]


class SlotCuts(Protocol):
    """One mode's cuts of the epoch: the runs of any slot, computed when asked."""

    def runs(self, slot: int) -> tuple[Run, ...]:
        """The runs of slot ``slot`` (``rank * num_workers + worker``), in reading order."""
        ...


class SampleCuts:
    """Consecutive ranges of the stream: slot after slot, each exactly its quota.

    Args:
        stream: the epoch's sample stream.
        per_rank: every rank's worker quotas (the same for every rank).
    """

    def __init__(self, stream: SampleStream, per_rank: Sequence[int]) -> None:
        self.stream, self.per_rank = stream, list(per_rank)
        self.starts = [sum(self.per_rank[:w]) for w in range(len(self.per_rank))]

    def runs(self, slot: int) -> tuple[Run, ...]:
        rank, worker = divmod(slot, len(self.per_rank))
        first = rank * sum(self.per_rank) + self.starts[worker]
        return tuple(self.stream.runs(first, first + self.per_rank[worker]))


class ExactCuts:
    """Every sample once over the ranks, plus each short rank's padding from its own start.

    Args:
        stream: the epoch's sample stream.
        world_size: ranks.
        per_rank: every rank's worker quotas (their sum is at least ``ceil(total / world_size)``).
    """

    def __init__(self, stream: SampleStream, world_size: int, per_rank: Sequence[int]) -> None:
        self.stream, self.per_rank = stream, list(per_rank)
        self.base, self.extra = divmod(stream.total, world_size)

    def runs(self, slot: int) -> tuple[Run, ...]:
        rank, worker = divmod(slot, len(self.per_rank))
        left = self.base + (rank < self.extra)  # real samples of this rank not dealt yet
        real = rank * self.base + min(rank, self.extra)  # the next real sample's position
        pad = real  # padding repeats the rank's own samples, from its first one
        for quota in self.per_rank[:worker]:
            k = min(left, quota)
            left, real, pad = left - k, real + k, pad + quota - k
        quota = self.per_rank[worker]
        k = min(left, quota)
        return tuple(self.stream.runs(real, real + k) + self.stream.runs(pad, pad + quota - k, pad=True))


class ShardCuts:
    """Whole shards per slot, cut at its quota; the surplus tops up the short slots.

    The active slots (quota > 0), in slot order, have ideal ranges ``[Q_k, Q_{k+1})`` of the
    stream. Each inner boundary ``Q_k`` moves to the nearest shard boundary (then, where shards
    are larger than quotas, forward or back just enough that every slot owns at least one shard),
    so slot ``k`` owns the whole shards ``[B_k, B_{k+1})``, about its quota (within one shard).
    It reads its own samples up to its quota; what it owns beyond that (the tail of its last
    shard, and any shard after it) joins the spare stream, in slot order, and the slots that own
    less than their quota take their missing samples from it, in slot order. So every slot reads
    exactly its quota, no sample is read twice, only top-up pieces start inside a shard, and the
    spare stream's end is what no slot reads (``truncated``). The shards a slot owns change every
    epoch with the shard order.

    Every array here has one value per active slot; one slot's runs are a bisection away.

    Args:
        stream: the epoch's sample stream.
        per_rank: every rank's worker quotas (non-increasing: the workers with a quota come first).
        world_size / batch_size: for the error message.

    Raises:
        SplitError: fewer non-empty shards than active slots (each needs a shard of its own).
    """

    def __init__(
        self, stream: SampleStream, per_rank: Sequence[int], world_size: int, batch_size: int
    ) -> None:
        self.stream, self.per_rank = stream, list(per_rank)
        num_workers = len(self.per_rank)
        self.active = sum(1 for q in self.per_rank if q > 0)  # per rank; always workers 0..active-1
        slots, shards = self.active * world_size, len(stream)
        if shards < slots:
            raise SplitError(
                f"{shards} non-empty shards cannot give each of {world_size} ranks x {num_workers} "
                f"DataLoader workers ({slots} readers with a quota) a shard of its own. Fixes: "
                "granularity='sample' (sample-level splitting from the index), at most "
                f"{max(1, shards // world_size)} workers per rank, split='resampled', or more shards "
                f"(batch_size={batch_size})."
            )
        quotas = np.tile(np.asarray(self.per_rank[: self.active], dtype=np.int64), world_size)
        ideal = np.zeros(slots + 1, dtype=np.int64)
        np.cumsum(quotas, out=ideal[1:])
        bounds = stream.bounds
        # The nearest shard boundary to each inner ideal boundary (ties go to the earlier one).
        after = np.searchsorted(bounds, ideal[1:-1], side="left")  # first boundary >= ideal
        before = after - 1
        nearer = bounds[after] - ideal[1:-1] < ideal[1:-1] - bounds[before]
        owned = np.concatenate(([0], np.where(nearer, after, before), [shards])).astype(np.int64)
        # Strictly increasing, with room for one shard per slot on both sides.
        k = np.arange(slots + 1, dtype=np.int64)
        owned = np.minimum(np.maximum.accumulate(owned - k) + k, shards - slots + k)
        self.first = bounds[owned[:-1]]  # position of each slot's first own sample
        load = bounds[owned[1:]] - self.first
        self.keep = np.minimum(quotas, load)
        self.quotas = quotas
        self.spare = np.zeros(slots + 1, dtype=np.int64)  # where each slot's surplus starts in
        np.cumsum(load - self.keep, out=self.spare[1:])  # the spare stream
        self.need = np.zeros(slots + 1, dtype=np.int64)  # where each slot's top-up starts in it
        np.cumsum(quotas - self.keep, out=self.need[1:])
        self.truncated = stream.total - int(ideal[-1])

    def runs(self, slot: int) -> tuple[Run, ...]:
        rank, worker = divmod(slot, len(self.per_rank))
        if worker >= self.active:
            return ()
        k = rank * self.active + worker
        first, keep = self.first.item(k), self.keep.item(k)
        pieces = self.stream.runs(first, first + keep)
        lo, hi = self.need.item(k), self.need.item(k + 1)
        # The spare stream's [lo, hi): pieces of the surplus of slots j, j + 1, ..., each of
        # which is the stream range right after slot j's kept samples.
        j = int(self.spare.searchsorted(lo, side="right")) - 1
        while lo < hi:
            end = self.spare.item(j + 1)
            if end > lo:
                n = min(hi, end) - lo
                at = self.first.item(j) + self.quotas.item(j) + lo - self.spare.item(j)
                pieces += self.stream.runs(at, at + n)
                lo += n
            j += 1
        return tuple(pieces)
