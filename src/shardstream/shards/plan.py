"""The epoch plan: which samples every (rank, worker) reads in one epoch, as a pure function.

:func:`plan_epoch` takes the shard list with its sample counts, the world shape
(``world_size`` x ``num_workers``), the epoch and the seed, and returns an :class:`EpochPlan`.
Every rank and every DataLoader worker computes the same plan and reads its own slot, so no
communication is needed and no rank can disagree about the epoch's length.

Quotas are fixed per rank in whole batches (``batches_per_rank`` x ``batch_size`` samples) and
then divided over the workers in whole batches, so the number of batches a rank yields does not
depend on ``num_workers`` (0, 1 or 2 workers give the same count).

Modes (the cuts themselves are in :mod:`shardstream.shards.slots`):
    ``"equal"`` (training): ``batches_per_rank = total // (world_size * batch_size)``, so fewer
        than ``world_size * batch_size`` samples of the epoch are left out (``truncated``; which
        ones changes every epoch with the shard order) and none is read twice.
        ``granularity="shard"`` (default) gives every slot the whole shards around its share of
        the shuffled shard stream, cut to its quota; what the full slots leave over tops up the
        short ones. Only those top-up pieces start inside a shard (the reader skips the samples
        before them), and every slot needs a shard of its own, so fewer shards than
        ``world_size * num_workers`` is a :class:`SplitError`.
        ``granularity="sample"`` cuts the shuffled sample stream into consecutive runs: any
        number of shards works, but every slot may start inside a shard.
    ``"exact"`` (evaluation): every sample exactly once over all ranks (contiguous runs), and
        ``batches_per_rank = ceil(ceil(total / world_size) / batch_size)``; the ranks that run
        short read ``padded`` extra samples from the start of their run, marked as padding.

Scale: a plan is lazy. :func:`plan_epoch` costs ``O(n)`` vectorised work for ``n`` shards
(permutation, cumulative counts) plus ``O(slots)`` for ``granularity="shard"``, and
:meth:`EpochPlan.slot` computes one slot's runs on demand, so a DataLoader worker of a run with
1,000,000 shards and 131,072 slots plans in well under a second without holding the world's runs.

Changes from the first planner (which built every slot's runs eagerly): the shard permutation
is NumPy's legacy ``RandomState`` (MT19937) instead of ``random.Random.shuffle`` (much faster at
a million shards: ``benchmarks/results/bench_plan.md``, "The plan's shard permutation alone";
and NumPy keeps that stream fixed across versions and platforms, so every rank computes the
same order), so the plan's order for a given ``(seed, epoch)`` differs from earlier
releases (shard lists' ``ShardShuffle`` keeps :func:`epoch_order`); given the order, exact mode
and ``granularity="sample"`` cut the same runs as before.
``granularity="shard"`` no longer deals shards one by one with a heap (largest remaining quota
first): that is sequential over every shard and slot (seconds at a million shards: the
"before" column of ``benchmarks/results/bench_plan.md``), and no slot's share follows without
the others'. It now moves the boundaries between the slots' ideal ranges
to the nearest shard boundary (:class:`~shardstream.shards.slots.ShardCuts`), with the same
guarantees: exact quotas, no sample read twice, only top-up pieces start inside a shard, a shard
of its own for every slot, a new assignment every epoch, and the same :class:`SplitError`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..errors import SplitError
from .runs import Run
from .slots import ExactCuts, SampleCuts, ShardCuts, SlotCuts
from .stream import SampleStream
from .world import derive_seed

__all__ = [
    "MODES",
    "PLAN_VERSION",
    "EpochPlan",
    "batches_per_rank",
    "epoch_order",
    "epoch_permutation",
    "plan_epoch",
    "worker_quotas",
]

MODES = ("equal", "exact", "resampled")
#: Bumped when the plan of given inputs changes (2: NumPy's shard permutation and the
#: vectorised equal-by-shard cuts): a state saved under another plan is refused, not misread.
PLAN_VERSION = 2
GRANULARITIES = ("shard", "sample")


@dataclass(frozen=True, eq=False)
class EpochPlan:
    """One epoch's assignment of samples to every ``(rank, worker)`` slot, computed per slot.

    Attributes:
        mode / epoch / world_size / num_workers / batch_size: what the plan was made for.
        batches_per_rank / samples_per_rank: the same for every rank.
        truncated: samples of the epoch that no slot reads (equal mode).
        padded: padding samples added so every rank has the same count (exact mode).
        stream: the epoch's shards in order as one sample stream.
        cuts: the mode's cuts of the stream (one slot's runs on demand).
    """

    mode: str
    epoch: int
    world_size: int
    num_workers: int
    batch_size: int
    batches_per_rank: int
    per_rank: tuple[int, ...]
    stream: SampleStream = field(repr=False)
    cuts: SlotCuts = field(repr=False)
    truncated: int = 0
    padded: int = 0

    @property
    def samples_per_rank(self) -> int:
        return self.batches_per_rank * self.batch_size

    @property
    def order(self) -> tuple[str, ...]:
        """The epoch's non-empty shards in stream order (built on each call: ``O(n)``)."""
        return tuple(self.stream.url(i) for i in range(len(self.stream)))

    @property
    def quotas(self) -> tuple[int, ...]:
        """Samples per slot (whole batches), slot ``rank * num_workers + worker``."""
        return self.per_rank * self.world_size

    @property
    def slots(self) -> tuple[tuple[Run, ...], ...]:
        """Every slot's runs (built on each call: every run of the epoch; prefer :meth:`slot`)."""
        return tuple(self.cuts.runs(s) for s in range(self.world_size * self.num_workers))

    def slot(self, rank: int, worker: int) -> tuple[Run, ...]:
        """The runs ``(rank, worker)`` reads this epoch, in order (computed on each call)."""
        self._check(rank, worker)
        return self.cuts.runs(rank * self.num_workers + worker)

    def quota(self, rank: int, worker: int) -> int:
        self._check(rank, worker)
        return self.per_rank[worker]

    def summary(self) -> str:
        return (
            f"epoch {self.epoch} plan: mode={self.mode}, {self.world_size} ranks x {self.num_workers} "
            f"workers, {self.batches_per_rank} batches of {self.batch_size} per rank, "
            f"truncated={self.truncated}, padded={self.padded}"
        )

    def _check(self, rank: int, worker: int) -> None:
        if not (0 <= rank < self.world_size and 0 <= worker < self.num_workers):
            raise IndexError(
                f"slot ({rank=}, {worker=}) is outside the plan's {self.world_size} ranks x "
                f"{self.num_workers} workers"
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


def epoch_permutation(
    n: int, epoch: int, seed: int | None, shuffle: bool
) -> npt.NDArray[np.int64 | np.int32]:
    """The epoch plan's shard permutation: the same on every rank, new every epoch.

    NumPy's legacy ``RandomState`` (MT19937, seeded with the two 32-bit halves of
    ``derive_seed(seed, "shards", epoch)``), whose stream NumPy's compatibility policy keeps
    fixed, so processes with different NumPy versions or platforms agree on the order. The array
    is ``int32`` below 2**31 shards (half the memory; the same values as ``permutation(n)``).
    """
    order = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    if shuffle:
        key = derive_seed(seed, "shards", epoch)
        np.random.RandomState(np.array([key & 0xFFFFFFFF, key >> 32], dtype=np.uint32)).shuffle(order)
    return order


def epoch_order(n: int, epoch: int, seed: int | None, shuffle: bool) -> list[int]:
    """A shard list's permutation for ``ShardShuffle``: the same on every rank, new every epoch.

    ``random.Random`` seeded by ``derive_seed(seed, "shards", epoch)``, as in every release so
    far (shard-list orders stay the same); the planner uses :func:`epoch_permutation`.
    """
    order = list(range(n))
    if shuffle:
        random.Random(derive_seed(seed, "shards", epoch)).shuffle(order)
    return order


def plan_epoch(
    urls: Sequence[str],
    counts: Sequence[int] | npt.NDArray[np.integer],
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
        urls: the shards.
        counts: their sample counts (as many as ``urls``; may be an array).
        world_size: ranks.
        num_workers: DataLoader workers per rank (1 for none).
        epoch: with ``seed``, seeds the shard order's permutation, ``(seed, epoch)``.
        seed: the base seed of that permutation.
        shuffle: permute the shards (default True); False keeps the order given.
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
    order = epoch_permutation(len(urls), epoch, seed, shuffle)
    sizes = np.asarray(counts, dtype=np.int64)[order]
    if not sizes.all():  # empty shards are left out of the stream
        order, sizes = order[sizes > 0], sizes[sizes > 0]
    stream = SampleStream(urls, order, sizes)
    del sizes
    total = stream.total
    nb = batches_per_rank(total, world_size, batch_size, mode)
    if nb == 0:
        raise SplitError(
            f"the dataset has {total} samples, fewer than one batch of {batch_size} for each of "
            f"{world_size} ranks; use a smaller batch_size, fewer ranks, or split='exact'"
        )
    per_rank = tuple(worker_quotas(nb, num_workers, batch_size))

    def plan(cuts: SlotCuts, truncated: int = 0, padded: int = 0) -> EpochPlan:
        return EpochPlan(
            mode=mode,
            epoch=epoch,
            world_size=world_size,
            num_workers=num_workers,
            batch_size=batch_size,
            batches_per_rank=nb,
            per_rank=per_rank,
            stream=stream,
            cuts=cuts,
            truncated=truncated,
            padded=padded,
        )

    samples = world_size * nb * batch_size
    if mode == "exact":
        return plan(ExactCuts(stream, world_size, per_rank), padded=samples - total)
    if granularity == "sample":
        return plan(SampleCuts(stream, per_rank), truncated=total - samples)
    return plan(ShardCuts(stream, per_rank, world_size, batch_size), truncated=total - samples)
