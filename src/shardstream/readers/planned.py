"""The stage that reads this (rank, worker)'s slot of the epoch plan: equal, exact or resampled.

:class:`PlannedSamples` starts a pipeline (it replaces shard list, splitters and reading). Every
epoch it takes the world from the run context, computes the
:class:`~shardstream.shards.plan.EpochPlan` (the same in every process) and yields exactly its
quota of samples, so every rank yields the same number of batches whatever the shard sizes and
``num_workers``. It is format-agnostic: a format (tar by default) reads pieces and counts samples.

A shard that holds fewer samples than its index says (a stale index, or a shard skipped by the
error handler) would break that promise and hang the next collective; the stage then re-reads
its own pieces to make up the quota and logs a warning with the shortfall.

State: the piece being read, how many of its samples were yielded and the byte offset of the
next one (a ranged read continues there), the quota done, and in resampled mode the draw count.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigurationError, SplitError
from ..handlers import Handler, reraise_exception
from ..pipeline.base import Node, RunContext, Stage, StateDict
from ..shards.plan import GRANULARITIES, MODES, EpochPlan, batches_per_rank, plan_epoch, worker_quotas
from ..shards.runs import Run
from ..shards.spec import expand_urls
from ..shards.world import World, derive_seed
from ..sources import SchemeRouter, Source
from ..tar.grouping import Cursor
from ..tar.samples import TarFormat
from ._reading import ReadingNode, pin_of, pinned
from .counts import CountSource, shard_count_array
from .read_shards import ShardFormat, open_ahead
from .runs import UnitsNode, read_span

__all__ = ["PlannedSamples"]

log = logging.getLogger(__name__)


class PlannedSamples(Stage):
    """Samples of this process's share of each epoch, with equal counts on every rank.

    Arguments by concern: mode (``mode`` to ``granularity``); order (``seed`` to ``shuffle``);
    reading and counts (``format`` to ``read_ahead``).

    Args:
        urls: shard spec or list of URLs.
        mode: ``"equal"`` (training default), ``"exact"`` (evaluation: every sample once,
            padding marked with ``__pad__``) or ``"resampled"`` (shards drawn with
            replacement; needs ``epoch_size``).
        batch_size: quotas are whole batches of this size, so batching downstream (in the
            pipeline or the DataLoader) gives the same batch count on every rank. Default 1.
        epoch_size: samples per rank per epoch in resampled mode (rounded down to whole
            batches). Independent of ``num_workers``.
        granularity: ``"shard"`` (default) or ``"sample"``; see :mod:`shardstream.shards.plan`.
        seed: base seed of the per-epoch shard permutation (and of resampling); ``None``
            takes the pipeline's seed.
        shuffle: permute the shards every epoch. Default True.
        format: the shard format (default :class:`~shardstream.tar.TarFormat`).
        source: where shards are opened (default: every scheme, no cache).
        handler: error policy for shard errors (default: raise).
        index: sample counts (mapping) or index location; default ``_info.json`` next to the
            shards, else a counting pass (cached in this process; ``count_cache`` persists it).
        storage_options: options for opening index files.
        read_ahead: open the next piece's shard while this piece is read (default True;
            see :class:`~shardstream.readers.read_shards.ReadShards`).
    """

    kind = "read"
    label = "read"

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
        format: ShardFormat | None = None,  # noqa: A002
        source: Source | None = None,
        handler: Handler = reraise_exception,
        index: CountSource = None,
        count_cache: str | None = None,
        storage_options: dict[str, Any] | None = None,
        read_ahead: bool = True,
    ) -> None:
        self.read_ahead = read_ahead
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
        self.format: ShardFormat = format if format is not None else TarFormat()
        self.source: Source = source if source is not None else SchemeRouter(storage_options)
        self.handler = handler
        # Samples per shard, as an array (8 bytes a shard, possibly a view of the index's table).
        self.counts: npt.NDArray[np.int64] | None = None
        if mode != "resampled":
            self.counts = shard_count_array(
                self.urls,
                index=index,
                cache=count_cache,
                format=self.format,
                source=self.source,
                storage_options=storage_options,
            )

    # -- lengths --------------------------------------------------------------------------------
    def batches_per_rank(self, world_size: int) -> int:
        """Batches every rank yields per epoch (the same for every epoch and ``num_workers``)."""
        if self.counts is None:
            return (self.epoch_size or 0) // self.batch_size
        return batches_per_rank(int(self.counts.sum()), world_size, self.batch_size, self.mode)

    def samples_per_rank(self, world_size: int) -> int:
        return self.batches_per_rank(world_size) * self.batch_size

    def plan(
        self, epoch: int, world: World, seed: int | None = None, batch_size: int | None = None
    ) -> EpochPlan:
        """The plan of ``epoch`` for ``world`` (``batch_size``: another than this stage's, for the
        plan a run with another world size and the same global batch made). The plan is lazy:
        ``plan.slot(rank, worker)`` computes one slot's runs (see :mod:`shardstream.shards.plan`)."""
        if self.counts is None:
            raise ConfigurationError("split='resampled' draws shards at random and has no epoch plan")
        return plan_epoch(
            self.urls,
            self.counts,
            world_size=world.world_size,
            num_workers=world.num_workers,
            epoch=epoch,
            seed=self.seed if self.seed is not None else seed,
            mode=self.mode,
            batch_size=batch_size or self.batch_size,
            granularity=self.granularity,
            shuffle=self.shuffle,
        )

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is not None:
            raise ConfigurationError("PlannedSamples starts a pipeline; it takes no upstream stage")
        if state and "units" in state:  # restored elastically: the runs of samples it was dealt
            return UnitsNode(self, state)
        return _PlannedNode(self, ctx, state or {})

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.build(None, RunContext.detect(seed=self.seed)))


class _PlannedNode(ReadingNode):
    stage: PlannedSamples

    def __init__(self, stage: PlannedSamples, ctx: RunContext, state: StateDict) -> None:
        super().__init__(None)
        self.stage, self.ctx = stage, ctx
        world = ctx.world
        self.cursor = Cursor()
        self.done = int(state.get("done", 0))
        self.piece = int(state.get("piece", 0))
        self.skip = int(state.get("skip", 0))  # samples of the piece already yielded
        self.offset = int(state.get("offset", -1))  # where the next one starts, when known
        self.pin = pin_of(state) if self.offset >= 0 else None
        self.makeup = bool(state.get("makeup", False))
        self.stopped = False  # the error policy ended the stream
        self._opening: Any = None  # the next piece's shard, opened ahead (see read.open_ahead)
        self.pieces: Sequence[Run] = ()
        if stage.counts is None:
            quotas = worker_quotas(
                stage.batches_per_rank(world.world_size), world.num_workers, stage.batch_size
            )
            self.quota = quotas[world.worker]
            self._it = self._resampled()
        else:
            plan = stage.plan(ctx.epoch, world, ctx.seed)
            if world.global_worker == 0 and not state:
                log.info("%s", plan.summary())
            self.quota = plan.quota(world.rank, world.worker)
            self.pieces = plan.slot(world.rank, world.worker)
            self._it = self._read()
        self.tell = self._tell

    def state_dict(self) -> StateDict:
        state: StateDict = {"done": self.done, "piece": self.piece, "skip": self.skip}
        if self.cursor.next >= 0:
            state["offset"] = self.cursor.next
            pinned(state, self.cursor)
        if self.makeup:
            state["makeup"] = True
        return state

    def _tell(self) -> tuple[int, int]:
        return self.piece, self.cursor.start

    def _url(self, piece: int) -> str:
        if self.stage.counts is None:
            return self._draw(piece)
        return self.pieces[piece].url

    def item_at(self, token: Any) -> Any:
        piece, offset = int(token[0]), int(token[1])
        sample = self.stage.format.sample_at(self.stage.source, self._url(piece), offset)
        if self.stage.mode == "exact":
            sample["__pad__"] = self.makeup or self.pieces[piece].pad
        return sample

    # -- reading --------------------------------------------------------------------------------
    def _samples(
        self, url: str, start: int, stop: int | None, opening: Any = None
    ) -> Iterator[dict[str, Any]]:
        """Samples ``[start + skip, stop)`` of a shard; from the saved byte offset when resuming
        (``opening``: the shard's open started ahead, from byte 0)."""
        first = self.skip
        # (A saved offset is only for the first piece after a restore, which nothing opened ahead.)
        offset, self.offset = (self.offset, -1) if self.offset >= 0 else (0, -1)
        pin, self.pin = self.pin, None
        drop = start + first if offset == 0 else 0
        count = None if stop is None else stop - start - first
        return read_span(self, self.stage, url, offset, drop, count, opening, pin=pin)

    def _piece(
        self, url: str, start: int, stop: int | None, pad: bool | None, opening: Any = None
    ) -> Iterator[dict[str, Any]]:
        """One piece's samples, counted into the node's state; ends at the quota."""
        for sample in self._samples(url, start, stop, opening):
            if pad is not None:
                sample["__pad__"] = pad
            self.skip += 1
            self.done += 1
            yield sample
            if self.done == self.quota:
                return

    def _pieces(self, pad: bool | None) -> Generator[dict[str, Any], None, int]:
        """The slot's pieces from the current one on (``pad``: exact mode's marker, None to use
        each piece's own); returns how many samples this pass read."""
        exact, got = self.stage.mode == "exact", 0
        while self.piece < len(self.pieces):
            piece = self.pieces[self.piece]
            marker = (piece.pad if pad is None else pad) if exact else None
            opening, self._opening = self._opening, None
            if pad is None and self.piece + 1 < len(self.pieces):  # not while making up a shortfall
                self._opening = open_ahead(self.stage, self.pieces[self.piece + 1].url)
            for sample in self._piece(piece.url, piece.start, piece.stop, marker, opening):
                got += 1
                yield sample
            if self.stopped or self.done == self.quota:
                return got
            self.piece += 1
            self.skip = 0
        return got

    def _read(self) -> Iterator[dict[str, Any]]:
        try:
            if not self.makeup and self.done < self.quota:
                yield from self._pieces(pad=None)
        finally:
            if self._opening is not None:  # the quota or an early stop ended the pieces
                self._opening.cancel()
                self._opening = None
        if self.done < self.quota and not self.stopped:
            yield from self._make_up()

    def _make_up(self) -> Iterator[dict[str, Any]]:
        world = self.ctx.world
        if not self.makeup:
            self.makeup, self.piece, self.skip = True, 0, 0
            log.warning(
                "rank %d worker %d read %d samples fewer than planned (stale index or skipped shard); "
                "repeating its own samples to keep every rank's batch count equal",
                world.rank,
                world.worker,
                self.quota - self.done,
            )
        while self.done < self.quota:
            got = yield from self._pieces(pad=True)
            if self.stopped or self.done == self.quota:
                return
            self.piece = 0
            if got == 0:
                raise SplitError(
                    f"rank {world.rank} worker {world.worker} cannot read any of its planned shards "
                    f"({[p.url for p in self.pieces][:3]}...) to fill its quota; check the shards and "
                    "the index"
                )

    def _draw(self, k: int) -> str:
        world, urls = self.ctx.world, self.stage.urls
        seed = self.stage.seed if self.stage.seed is not None else self.ctx.seed
        base = derive_seed(seed, "resample", self.ctx.epoch, world.rank, world.worker)
        return urls[derive_seed(base, k) % len(urls)]

    def _resampled(self) -> Iterator[dict[str, Any]]:
        while self.done < self.quota:
            yield from self._piece(self._draw(self.piece), 0, None, None)
            if self.stopped or self.done == self.quota:
                return
            self.piece += 1
            self.skip = 0
