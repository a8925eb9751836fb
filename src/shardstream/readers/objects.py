"""The reader stage over single-sample objects: ``ObjectSamples`` (and ``open_table``, which lists a
prefix or reads a manifest once).

Access to single objects is random, so the shuffle is a true global permutation of all samples,
new every epoch and the same in every process (seeded by ``(seed, epoch)``); no shuffle buffer is
needed. The epoch plan of the tar path (:func:`~shardstream.shards.plan.plan_epoch`) cuts the
permuted sequence into the (rank, worker) slots: with ``split="equal"`` every rank gets the same
number of whole batches, with ``"exact"`` every sample is read once (short ranks pad, marked
``__pad__``), and with ``split=None`` the slots take every n-th sample of the permutation.

State: the number of samples the slot has yielded. The plan is a pure function of the epoch, so
a restored node recomputes it and the fetch-ahead engine restarts right after that sample.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..handlers import Handler, reraise_exception
from ..objects import Manifest, ObjectReader, SampleTable, load_manifest
from ..pipeline.base import Node, RunContext, Stage, StateDict
from ..pipeline.pipeline import close_iterator
from ..shards.plan import batches_per_rank, plan_epoch, worker_quotas
from ..shards.world import World, derive_seed
from ..telemetry.io import IoCounters

__all__ = ["ObjectSamples", "open_table"]

_SPLITS = (None, "equal", "exact")


def open_table(
    url: str,
    manifest: str | Manifest | Sequence[str] | None,
    storage_options: Mapping[str, Any] | None,
    manifest_dir: str | None,
) -> SampleTable:
    """The samples under prefix ``url`` (listing once, or reading the given manifest)."""
    found = load_manifest(url, manifest, storage_options=storage_options, manifest_dir=manifest_dir)
    return SampleTable.from_manifest(found)


class ObjectSamples(Stage):
    """Starts a pipeline with this slot's samples of each epoch, fetched ahead.

    Args:
        reader: the samples and how to fetch them.
        split: ``None`` (every n-th sample per rank and worker), ``"equal"`` or ``"exact"``.
        batch_size: with a split, quotas are whole batches of this size (default 1).
        shuffle: a new global permutation every epoch (default True).
        seed: base seed of the permutation (default: the pipeline's).
        handler: error policy for a sample that cannot be fetched (default: raise).
    """

    kind = "read"
    label = "read objects"

    def __init__(
        self,
        reader: ObjectReader,
        *,
        split: str | None = None,
        batch_size: int = 1,
        shuffle: bool = True,
        seed: int | None = None,
        handler: Handler = reraise_exception,
    ) -> None:
        if split not in _SPLITS:
            raise ConfigurationError(f"split={split!r} is unknown for objects; use one of {_SPLITS}")
        if batch_size < 1:
            raise ConfigurationError(f"batch_size={batch_size} must be at least 1")
        self.reader, self.split, self.batch_size = reader, split, batch_size
        self.shuffle, self.seed, self.handler = shuffle, seed, handler

    def slot_samples(self, world: World) -> int:
        """Samples the ``(rank, worker)`` slot of ``world`` yields per epoch (padding included), the
        length of :meth:`slot`'s list without drawing the permutation: with ``split=None`` every
        ``total_workers``-th sample from ``global_worker`` on; with a split, the worker's quota of
        the plan (whole batches of ``batch_size``, the same every epoch and on every rank)."""
        n = len(self.reader)
        if self.split is None:
            return len(range(world.global_worker, n, world.total_workers))
        batches = batches_per_rank(n, world.world_size, self.batch_size, self.split)
        return worker_quotas(batches, world.num_workers, self.batch_size)[world.worker]

    def slot(self, ctx: RunContext) -> list[tuple[int, bool]]:
        """``(sample number, is padding)`` of this (rank, worker) in ``ctx``'s epoch, in order."""
        n, world = len(self.reader), ctx.world
        order = list(range(n))
        seed = self.seed if self.seed is not None else ctx.seed
        if self.shuffle:
            random.Random(derive_seed(seed, "objects", ctx.epoch)).shuffle(order)
        if self.split is None:
            return [(i, False) for i in order[world.global_worker :: world.world_size * world.num_workers]]
        plan = plan_epoch(
            ["objects"],
            [n],
            world_size=world.world_size,
            num_workers=world.num_workers,
            mode=self.split,
            batch_size=self.batch_size,
            granularity="sample",
            shuffle=False,
        )
        return [
            (order[p], bool(piece.pad))
            for piece in plan.slot(world.rank, world.worker)
            for p in range(piece.start, piece.stop)
        ]

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is not None:
            raise ConfigurationError("ObjectSamples starts a pipeline; it takes no upstream stage")
        return _ObjectNode(self, ctx, state or {})

    def __repr__(self) -> str:
        return f"ObjectSamples({self.reader.table!r}, split={self.split!r}, shuffle={self.shuffle})"


class _ObjectNode(Node):
    def __init__(self, stage: ObjectSamples, ctx: RunContext, state: StateDict) -> None:
        super().__init__(None)
        self.stage = stage
        self.slot = stage.slot(ctx)
        self.done = int(state.get("done", 0))
        self.exact = stage.split == "exact"
        self.last: tuple[int, bool] = (-1, False)
        self.tell = self._tell
        self._io: IoCounters | None = None  # telemetry's I/O counters (seams.CountsIO)
        self._it = self._run()

    def count_io(self, counters: IoCounters) -> None:
        """Add the time waiting for the fetch engine, the bytes and the GETs to ``counters``."""
        self._io = counters

    def state_dict(self) -> StateDict:
        return {"done": self.done}

    def _tell(self) -> tuple[int, bool]:
        return self.last

    def item_at(self, token: Any) -> Any:
        sample = self.stage.reader.sample(int(token[0]))
        if self.exact:
            sample["__pad__"] = bool(token[1])
        return sample

    def _run(self) -> Iterator[dict[str, Any]]:
        stage, slot = self.stage, self.slot
        pads = dict(slot[self.done :]) if self.exact else {}
        fetched = stage.reader.stream(i for i, _ in slot[self.done :])
        if self._io is not None:
            fetched = _counted(fetched, self._io)
        try:
            for i, got in fetched:
                self.done += 1
                if isinstance(got, BaseException):
                    go_on = stage.handler(got)
                    stage.stats.record(got)
                    if go_on:
                        continue
                    return
                if self.exact:
                    got["__pad__"] = pads.get(i, False)
                self.last = (i, pads.get(i, False))
                yield got
        finally:
            fetched.close()  # type: ignore[attr-defined]


def _counted(
    fetched: Iterator[tuple[int, dict[str, Any] | BaseException]], io: IoCounters
) -> Iterator[tuple[int, dict[str, Any] | BaseException]]:
    """``fetched``, with the time waiting for each sample, its bytes and its objects (one GET
    each) added to ``io`` (telemetry on; the fetch engine's retries are counted where they happen)."""
    clock = time.perf_counter_ns
    try:
        while True:
            t = clock()
            item = next(fetched, None)
            io.io_ns += clock() - t
            if item is None:
                return
            sample = item[1]
            if not isinstance(sample, BaseException):
                for key, value in sample.items():
                    if key[:2] != "__" and isinstance(value, bytes | bytearray | memoryview):
                        io.io_bytes += len(value)
                        io.opens += 1
            yield item
    finally:
        close_iterator(fetched)
