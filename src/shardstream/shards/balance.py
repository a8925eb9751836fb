"""The source that reads this (rank, worker)'s slot of the epoch plan: equal, exact or resampled.

:class:`PlannedSamples` starts a pipeline (it replaces shard list, splitters and tar reading). On
every epoch it detects the world, computes the :class:`~shardstream.shards.plan.EpochPlan` (the
same in every process) and yields exactly its quota of samples, so every rank yields the same
number of batches whatever the shard sizes and ``num_workers``.

A shard that holds fewer samples than its index says (a stale index, or a shard skipped by the
error handler) would break that promise and hang the next collective; the source then re-reads
its own pieces to make up the quota and logs a warning with the shortfall.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ConfigurationError, SplitError
from ..tar.samples import TarSamples
from .counts import CountSource, shard_counts
from .plan import GRANULARITIES, MODES, EpochPlan, Piece, batches_per_rank, plan_epoch, worker_quotas
from .spec import expand_urls
from .world import World, derive_seed

__all__ = ["PlannedSamples"]

log = logging.getLogger(__name__)


class PlannedSamples:
    """Samples of this process's share of each epoch, with equal counts on every rank.

    Args:
        urls: shard spec or list of URLs.

        Mode:
            mode: ``"equal"`` (training default), ``"exact"`` (evaluation: every sample once,
                padding marked with ``__pad__``) or ``"resampled"`` (shards drawn with
                replacement; needs ``epoch_size``).
            batch_size: quotas are whole batches of this size, so batching downstream (in the
                pipeline or the DataLoader) gives the same batch count on every rank. Default 1.
            epoch_size: samples per rank per epoch in resampled mode (rounded down to whole
                batches). Independent of ``num_workers``.
            granularity: ``"shard"`` (default) or ``"sample"``; see :mod:`shardstream.shards.plan`.

        Order:
            seed: base seed of the per-epoch shard permutation (and of resampling).
            shuffle: permute the shards every epoch. Default True.

        Counts and world:
            index: sample counts (mapping) or index location; default ``_info.json`` next to the
                shards, else a counting pass (cached in this process; ``count_cache`` persists it).
            world: explicit rank/world size (``World(rank=..., world_size=...)``); default detected.
            reader: the :class:`TarSamples` stage that reads shards (handler, opener, ...).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        mode: str = "equal",
        batch_size: int = 1,
        epoch_size: int | None = None,
        granularity: str = "shard",
        seed: int | None = None,
        shuffle: bool = True,
        index: CountSource = None,
        count_cache: str | None = None,
        world: World | None = None,
        reader: TarSamples | None = None,
    ) -> None:
        if mode not in MODES:
            raise ConfigurationError(f"split mode {mode!r} is unknown; use one of {MODES}")
        if granularity not in GRANULARITIES:
            raise ConfigurationError(f"granularity={granularity!r} is unknown; use one of {GRANULARITIES}")
        if batch_size < 1:
            raise ConfigurationError(f"batch_size={batch_size} must be at least 1")
        if mode == "resampled" and (epoch_size is None or epoch_size < batch_size):
            raise ConfigurationError(
                f"split='resampled' needs epoch_size (samples per rank per epoch) of at least one batch; "
                f"got epoch_size={epoch_size}, batch_size={batch_size}"
            )
        self.urls = expand_urls(urls)
        self.mode, self.batch_size, self.epoch_size = mode, batch_size, epoch_size
        self.granularity, self.seed, self.shuffle = granularity, seed, shuffle
        self.world = world
        self.reader = reader if reader is not None else TarSamples()
        self.epoch = 0
        self._detected: World | None = None
        self.counts: list[int] | None = None
        if mode != "resampled":
            self.counts = shard_counts(
                self.urls,
                index=index,
                cache=count_cache,
                storage_options=self.reader.storage_options,
                allow_pipe=self.reader.allow_pipe,
                opener=self.reader.opener,
            )

    # -- world and epochs -----------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def detect_world(self) -> World:
        """The world for planning: explicit, else detected, else remembered from the main process.

        A DataLoader worker started with *spawn* cannot see ``torch.distributed`` (it is not
        initialised there) and may have no launcher variables; it then uses the world the main
        process recorded when it pickled this source. Forked workers and the main process detect
        it themselves, so a stale record (from a copy made before ``init_process_group``) is
        never preferred over a live answer.
        """
        if self.world is not None:
            return World.current(override=self.world)
        live = World.current()
        if live.world_size == 1 and self._detected is not None and _in_worker():
            return World.current(override=self._detected)
        return live

    def remember_world(self) -> None:
        """Record the calling (main) process's rank for DataLoader workers started later."""
        if self.world is None and not _in_worker():
            self._detected = World.current().with_worker(0, 1)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self.world is None and not _in_worker():
            state["_detected"] = World.current().with_worker(0, 1)
        return state

    # -- lengths --------------------------------------------------------------------------------
    def batches_per_rank(self, world_size: int | None = None) -> int:
        """Batches every rank yields per epoch (the same for every epoch and ``num_workers``)."""
        size = world_size if world_size is not None else self.detect_world().world_size
        if self.counts is None:
            return (self.epoch_size or 0) // self.batch_size
        return batches_per_rank(sum(self.counts), size, self.batch_size, self.mode)

    def __len__(self) -> int:
        """Samples per rank per epoch."""
        return self.batches_per_rank() * self.batch_size

    def plan(self, epoch: int | None = None, world: World | None = None) -> EpochPlan:
        """The plan of ``epoch`` (default: the current one) for ``world`` (default: detected)."""
        if self.counts is None:
            raise ConfigurationError("split='resampled' draws shards at random and has no epoch plan")
        world = world or self.detect_world()
        return plan_epoch(
            self.urls,
            self.counts,
            world_size=world.world_size,
            num_workers=world.num_workers,
            epoch=self.epoch if epoch is None else epoch,
            seed=self.seed,
            mode=self.mode,
            batch_size=self.batch_size,
            granularity=self.granularity,
            shuffle=self.shuffle,
        )

    # -- reading --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        world = self.detect_world()
        if self.counts is None:
            quota = worker_quotas(self.batches_per_rank(), world.num_workers, self.batch_size)[world.worker]
            yield from itertools.islice(self._resampled(world), quota)
            return
        plan = self.plan(world=world)
        if world.global_worker == 0:
            log.info("%s", plan.summary())
        quota = plan.quota(world.rank, world.worker)
        yield from self._read(plan.slot(world.rank, world.worker), quota, world)

    def _resampled(self, world: World) -> Iterator[dict[str, Any]]:
        rng = random.Random(derive_seed(self.seed, "resample", self.epoch, world.rank, world.worker))
        while True:
            url = self.urls[rng.randrange(len(self.urls))]
            yield from self.reader.run(iter([{"url": url}]))

    def _pieces(self, pieces: Sequence[Piece]) -> Iterator[tuple[Piece, dict[str, Any]]]:
        for piece in pieces:
            samples = self.reader.run(iter([{"url": piece.url}]))
            try:
                for sample in itertools.islice(samples, piece.start, piece.stop):
                    yield piece, sample
            finally:
                close = getattr(samples, "close", None)
                if close is not None:
                    close()

    def _read(self, pieces: Sequence[Piece], quota: int, world: World) -> Iterator[dict[str, Any]]:
        exact = self.mode == "exact"
        done = 0
        if quota == 0:
            return
        for piece, sample in self._pieces(pieces):
            if exact:
                sample["__pad__"] = piece.pad
            done += 1
            yield sample
            if done == quota:
                return
        if done < quota:
            yield from self._make_up(pieces, quota - done, world)

    def _make_up(self, pieces: Sequence[Piece], missing: int, world: World) -> Iterator[dict[str, Any]]:
        log.warning(
            "rank %d worker %d read %d samples fewer than planned (stale index or skipped shard); "
            "repeating its own samples to keep every rank's batch count equal",
            world.rank,
            world.worker,
            missing,
        )
        while missing > 0:
            got = 0
            for _, sample in self._pieces(pieces):
                if missing == 0:
                    return
                if self.mode == "exact":
                    sample["__pad__"] = True
                missing -= 1
                got += 1
                yield sample
            if got == 0:
                raise SplitError(
                    f"rank {world.rank} worker {world.worker} cannot read any of its planned shards "
                    f"({[p.url for p in pieces][:3]}...) to fill its quota; check the shards and the index"
                )


def _in_worker() -> bool:
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None
