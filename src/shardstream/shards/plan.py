"""The epoch plan: which samples every (rank, worker) reads in one epoch, as a pure function.

:func:`plan_epoch` takes the shard list with its sample counts, the world shape
(``world_size`` x ``num_workers``), the epoch and the seed, and returns an :class:`EpochPlan`.
Every rank and every DataLoader worker computes the same plan and reads its own slot, so no
communication is needed and no rank can disagree about the epoch's length.

Quotas are fixed per rank in whole batches (``batches_per_rank`` x ``batch_size`` samples) and
then divided over the workers in whole batches, so the number of batches a rank yields does not
depend on ``num_workers`` (0, 1 or 2 workers give the same count).

Modes:
    ``"equal"`` (training): ``batches_per_rank = total // (world_size * batch_size)``, so fewer
        than ``world_size * batch_size`` samples of the epoch are left out (``truncated``; which
        ones changes every epoch with the shard order) and none is read twice.
        ``granularity="shard"`` (default) balances whole shards over the slots (largest remaining
        quota first, in the epoch's shuffled order) and cuts each slot to its quota; what the full
        slots leave over tops up the short ones. Only those top-up pieces start inside a shard
        (the reader skips the samples before them), and every slot needs a shard of its own, so
        fewer shards than ``world_size * num_workers`` is a :class:`SplitError`.
        ``granularity="sample"`` cuts the shuffled sample stream into consecutive runs: any
        number of shards works, but every slot may start inside a shard.
    ``"exact"`` (evaluation): every sample exactly once over all ranks (contiguous runs), and
        ``batches_per_rank = ceil(ceil(total / world_size) / batch_size)``; the ranks that run
        short read ``padded`` extra samples from the start of their run, marked as padding.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import SplitError
from .runs import Run
from .world import derive_seed

__all__ = ["MODES", "EpochPlan", "batches_per_rank", "epoch_order", "plan_epoch", "worker_quotas"]

MODES = ("equal", "exact", "resampled")
GRANULARITIES = ("shard", "sample")


@dataclass(frozen=True)
class EpochPlan:
    """One epoch's assignment of samples to every ``(rank, worker)`` slot.

    Attributes:
        slots: runs of samples per slot; slot ``rank * num_workers + worker``.
        quotas: samples per slot (whole batches).
        batches_per_rank / samples_per_rank: the same for every rank.
        truncated: samples of the epoch that no slot reads (equal mode).
        padded: padding samples added so every rank has the same count (exact mode).
    """

    mode: str
    epoch: int
    world_size: int
    num_workers: int
    batch_size: int
    order: tuple[str, ...]
    slots: tuple[tuple[Run, ...], ...]
    quotas: tuple[int, ...]
    batches_per_rank: int
    truncated: int = 0
    padded: int = 0

    @property
    def samples_per_rank(self) -> int:
        return self.batches_per_rank * self.batch_size

    def slot(self, rank: int, worker: int) -> tuple[Run, ...]:
        return self.slots[rank * self.num_workers + worker]

    def quota(self, rank: int, worker: int) -> int:
        return self.quotas[rank * self.num_workers + worker]

    def summary(self) -> str:
        return (
            f"epoch {self.epoch} plan: mode={self.mode}, {self.world_size} ranks x {self.num_workers} "
            f"workers, {self.batches_per_rank} batches of {self.batch_size} per rank, "
            f"truncated={self.truncated}, padded={self.padded}"
        )


def batches_per_rank(total: int, world_size: int, batch_size: int, mode: str) -> int:
    """Batches every rank yields per epoch for ``total`` samples (see the module docstring)."""
    if mode == "exact":
        per_rank = -(-total // world_size)  # ceil
        return -(-per_rank // batch_size)
    return total // (world_size * batch_size)


def worker_quotas(batches: int, num_workers: int, batch_size: int) -> list[int]:
    """Samples per worker of one rank: ``batches`` whole batches spread as evenly as possible."""
    return [batch_size * (batches // num_workers + (w < batches % num_workers)) for w in range(num_workers)]


def epoch_order(n: int, epoch: int, seed: int | None, shuffle: bool) -> list[int]:
    """The epoch's shard permutation: the same on every rank, different every epoch."""
    order = list(range(n))
    if shuffle:
        random.Random(derive_seed(seed, "shards", epoch)).shuffle(order)
    return order


def plan_epoch(
    urls: Sequence[str],
    counts: Sequence[int],
    *,
    world_size: int,
    num_workers: int,
    epoch: int = 0,
    seed: int | None = None,
    mode: str = "equal",
    batch_size: int = 1,
    granularity: str = "shard",
    shuffle: bool = True,
) -> EpochPlan:
    """Plan one epoch (pure: the same inputs give the same plan in every process).

    Args:
        urls / counts: the shards and their sample counts (same length).
        world_size / num_workers: ranks, and DataLoader workers per rank (1 for none).
        epoch / seed / shuffle: the shard order is a permutation seeded by ``(seed, epoch)``.
        mode: ``"equal"`` or ``"exact"`` (``"resampled"`` needs no plan).
        batch_size: quotas are whole batches of this many samples. Default 1.
        granularity: ``"shard"`` or ``"sample"`` (equal mode; exact mode always cuts samples).

    Raises:
        SplitError: too few shards or samples for the slots (the message gives the fixes).
    """
    if mode not in ("equal", "exact"):
        raise ValueError(f"mode={mode!r} has no epoch plan; use 'equal' or 'exact'")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity={granularity!r} must be one of {GRANULARITIES}")
    if len(urls) != len(counts):
        raise ValueError(f"{len(urls)} urls but {len(counts)} counts")
    if world_size < 1 or num_workers < 1 or batch_size < 1:
        raise ValueError(f"{world_size=}, {num_workers=} and {batch_size=} must be at least 1")
    order = [i for i in epoch_order(len(urls), epoch, seed, shuffle) if counts[i] > 0]
    shards = [Run(urls[i], 0, counts[i], pad=False) for i in order]
    total = sum(counts[i] for i in order)
    nb = batches_per_rank(total, world_size, batch_size, mode)
    if nb == 0:
        raise SplitError(
            f"the dataset has {total} samples, fewer than one batch of {batch_size} for each of "
            f"{world_size} ranks; use a smaller batch_size, fewer ranks, or split='exact'"
        )
    per_rank = worker_quotas(nb, num_workers, batch_size)
    quotas = per_rank * world_size
    base = EpochPlan(
        mode=mode,
        epoch=epoch,
        world_size=world_size,
        num_workers=num_workers,
        batch_size=batch_size,
        order=tuple(p.url for p in shards),
        slots=(),
        quotas=tuple(quotas),
        batches_per_rank=nb,
    )
    if mode == "exact":
        slots, padded = _exact(shards, total, world_size, per_rank)
        return replace(base, slots=slots, padded=padded)
    if granularity == "sample":
        stream = _Stream(shards)
        slots = tuple(tuple(stream.take(q)) for q in quotas)
        return replace(base, slots=slots, truncated=total - sum(quotas))
    slots, truncated = _by_shard(shards, quotas, world_size, num_workers, batch_size)
    return replace(base, slots=slots, truncated=truncated)


class _Stream:
    """Cuts consecutive pieces from a sequence of segments (whole shards or parts of shards)."""

    def __init__(self, segments: Sequence[Run], pos: int = 0) -> None:
        self.segments = segments
        self.total = sum(p.size for p in segments)
        self.index, self.offset = 0, 0
        if self.total:
            self.offset = pos % self.total
            while self.offset >= segments[self.index].size:
                self.offset -= segments[self.index].size
                self.index += 1

    def take(self, n: int, pad: bool = False) -> list[Run]:
        """The next ``n`` samples, wrapping around at the end."""
        pieces: list[Run] = []
        while n > 0:
            seg = self.segments[self.index]
            k = min(n, seg.size - self.offset)
            first = seg.start + self.offset
            pieces.append(Run(seg.url, first, k, pad=pad))
            n -= k
            self.offset += k
            if self.offset == seg.size:
                self.index, self.offset = (self.index + 1) % len(self.segments), 0
        return pieces

    def rest(self) -> list[Run]:
        """The pieces not taken yet (up to the end, no wrap)."""
        if self.index == 0 and self.offset == 0:
            return []  # everything or nothing taken; callers only ask after a partial take
        seg = self.segments[self.index]
        head = (
            [Run(seg.url, seg.start + self.offset, seg.size - self.offset, pad=seg.pad)]
            if self.offset
            else [seg]
        )
        return head + list(self.segments[self.index + 1 :])


def _exact(
    shards: Sequence[Run], total: int, world_size: int, per_rank: Sequence[int]
) -> tuple[tuple[tuple[Run, ...], ...], int]:
    stream = _Stream(shards)
    slots: list[tuple[Run, ...]] = []
    padded = 0
    start = 0
    for rank in range(world_size):
        real = total // world_size + (rank < total % world_size)
        pad_stream = _Stream(shards, start)  # padding repeats this rank's own first samples
        start += real
        for quota in per_rank:
            k = min(real, quota)
            real -= k
            pieces = stream.take(k) + pad_stream.take(quota - k, pad=True)
            padded += quota - k
            slots.append(tuple(pieces))
    return tuple(slots), padded


def _by_shard(
    shards: Sequence[Run], quotas: Sequence[int], world_size: int, num_workers: int, batch_size: int
) -> tuple[tuple[tuple[Run, ...], ...], int]:
    active = [s for s, q in enumerate(quotas) if q > 0]
    if len(shards) < len(active):
        raise SplitError(
            f"{len(shards)} non-empty shards cannot give each of {world_size} ranks x {num_workers} "
            f"DataLoader workers ({len(active)} readers with a quota) a shard of its own. Fixes: "
            "granularity='sample' (sample-level splitting from the index), at most "
            f"{max(1, len(shards) // world_size)} workers per rank, split='resampled', or more shards "
            f"(batch_size={batch_size})."
        )
    assigned: list[list[Run]] = [[] for _ in quotas]
    load = [0] * len(quotas)
    # Largest remaining deficit first, readers without a shard before all others; the shuffled
    # order makes the assignment change every epoch while the quotas stay the same.
    heap = [(0, -quotas[s], s) for s in active]
    heapq.heapify(heap)
    for shard in shards:
        _, _, s = heapq.heappop(heap)
        assigned[s].append(shard)
        load[s] += shard.size
        heapq.heappush(heap, (1, load[s] - quotas[s], s))
    # Cut every slot to its quota. What the full slots leave over (the tail of their last shard,
    # and any shard after it) tops up the short slots, so no sample is read twice; only those
    # top-up pieces may start inside a shard.
    cut: list[list[Run]] = []
    spare: list[Run] = []
    for s, quota in enumerate(quotas):
        stream = _Stream(assigned[s])
        cut.append(stream.take(min(quota, load[s])))
        if load[s] > quota:
            spare.extend(stream.rest() if quota else assigned[s])
    spare_stream = _Stream(spare)
    slots: list[tuple[Run, ...]] = []
    for s, quota in enumerate(quotas):
        missing = quota - min(quota, load[s])
        slots.append(tuple(cut[s] + (spare_stream.take(missing) if missing else [])))
    return tuple(slots), sum(load) - sum(quotas)
