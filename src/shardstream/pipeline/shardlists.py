"""Shard-list stages: the list, its per-epoch shuffle, resampling, and splitting over ranks/workers.

Each builds a node whose output for the epoch is a known list (or, for resampling, an indexable
endless sequence), so its state is one index and the reader can turn a shard number back into a
URL (``item(k)``). The arithmetic is pure and lives in :mod:`shardstream.shards`; these stages
only apply it to the epoch's :class:`RunContext`.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import ConfigurationError, SplitError
from ..shards.plan import epoch_order
from ..shards.spec import expand_urls
from ..shards.split import split_slice, take_every
from ..shards.world import World, derive_seed
from .base import ListNode, Node, RunContext, Stage, StateDict

__all__ = [
    "ResampledShards",
    "ShardShuffle",
    "SimpleShardList",
    "Splitter",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
]


def _upstream_items(upstream: Node | None, what: str) -> Sequence[Any] | None:
    """The whole epoch's list of a list-shaped upstream (independent of its position)."""
    if upstream is None:
        raise SplitError(f"{what} needs a shard list before it")
    return getattr(upstream, "items", None)


class SimpleShardList(Stage):
    """Yields ``{"url": ...}`` for each shard, in order, or shuffled per epoch with ``seed``.

    Args:
        urls: a spec string or a list of URLs.
        seed: when given, the list is shuffled with this seed and the epoch on every epoch.
    """

    def __init__(self, urls: str | Sequence[str], seed: int | None = None) -> None:
        self.urls = expand_urls(urls)
        self.seed = seed

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        urls = list(self.urls)
        if self.seed is not None:
            random.Random(derive_seed(self.seed, "shardlist", ctx.epoch)).shuffle(urls)
        return ListNode([{"url": u} for u in urls], state)

    def __len__(self) -> int:
        return len(self.urls)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.build(None, RunContext.detect()))

    def __repr__(self) -> str:
        return f"SimpleShardList({len(self.urls)} shards, first={self.urls[0]!r}, seed={self.seed})"


def shardspec(spec: str | Sequence[str]) -> SimpleShardList:
    """A shard list from a spec string or list (WebDataset's ``shardspec``)."""
    return SimpleShardList(spec)


class _ResampledNode(Node):
    indexable = True

    def __init__(self, stage: ResampledShards, ctx: RunContext, state: StateDict | None) -> None:
        super().__init__(None)
        self.urls = stage.urls
        self.limit = stage.nshards
        seed = stage.seed if stage.seed is not None else ctx.seed
        if stage.worker_seed is not None:
            seed = int(stage.worker_seed())
        self.base = derive_seed(seed, "resample", ctx.epoch, ctx.world.rank, ctx.world.worker)
        self.next = int((state or {}).get("next", 0))
        self._it = self._run()

    def item(self, k: int) -> dict[str, Any]:
        # Draw k is seeded by (base, k): random access for resume, one small hash per shard.
        return {"url": self.urls[random.Random(self.base + k).randrange(len(self.urls))]}

    def _run(self) -> Iterator[dict[str, Any]]:
        if not self.urls:
            return
        while self.next < self.limit:
            k = self.next
            self.next = k + 1
            yield self.item(k)

    def state_dict(self) -> StateDict:
        return {"next": self.next}


class ResampledShards(Stage):
    """Yields ``nshards`` shards drawn at random with replacement (an endless stream by default).

    The draws are seeded from ``(seed, epoch, rank, worker)``: reproducible across runs,
    different every epoch and for every reader, so workers and ranks do not read in lockstep.

    Args:
        urls: a spec string or a list of URLs.
        nshards: how many shards to yield per pass (default: endless).
        seed: base seed (``None``: the pipeline's seed, else ``SHARDSTREAM_SEED``/``WDS_SEED`` or 0).
        worker_seed: a function returning the base seed, called in each reading process (as
            WebDataset's); overrides ``seed``.
        deterministic: WebDataset's switch; draws here are always deterministic, so only
            ``True`` is accepted.
        max_urls: use at most this many URLs of the spec.
        empty_check: raise when the spec names no shards (default); False allows an empty
            spec (nothing is yielded).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        nshards: int = sys.maxsize,
        seed: int | None = None,
        worker_seed: Callable[[], int] | None = None,
        deterministic: bool = True,
        max_urls: int = int(1e6),
        empty_check: bool = True,
    ) -> None:
        if not deterministic:
            raise ValueError(
                "ResampledShards(deterministic=False) is not supported: draws are always seeded "
                "from (seed, epoch, rank, worker); pass a different seed= for a different draw"
            )
        try:
            self.urls = expand_urls(urls)[:max_urls]
        except ConfigurationError:
            if empty_check:
                raise
            self.urls = []
        self.nshards = nshards
        self.seed = seed
        self.worker_seed = worker_seed

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        return _ResampledNode(self, ctx, state)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.build(None, RunContext.detect()))

    def __repr__(self) -> str:
        return f"ResampledShards({len(self.urls)} shards, nshards={self.nshards}, seed={self.seed})"


class ShardShuffle(Stage):
    """Permute the shard list every epoch, identically on every rank and worker.

    The permutation depends only on ``(seed, epoch)``, so it runs before splitting: ranks and
    workers then take disjoint slices of the same order, and the slices change every epoch.
    (WebDataset shuffles after splitting, with a buffer, and repeats its order every epoch.)
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        items = _upstream_items(upstream, "ShardShuffle")
        if items is None:
            assert upstream is not None
            items = list(upstream)  # a foreign shard iterator: it must be finite
        seed = self.seed if self.seed is not None else ctx.seed
        order = epoch_order(len(items), ctx.epoch, seed, shuffle=True)
        return ListNode([items[i] for i in order], state)


class _LazySplitNode(Node):
    """Splitting an endless (or foreign) shard stream: every ``count``-th item from ``index``."""

    def __init__(self, upstream: Node, index: int, count: int, state: StateDict | None) -> None:
        super().__init__(upstream)
        self.seen = int((state or {}).get("seen", 0))
        self._it = self._run(index, count)

    def _run(self, index: int, count: int) -> Iterator[Any]:
        assert self.upstream is not None
        for item in self.upstream:
            i = self.seen
            self.seen = i + 1
            if i % count == index:
                yield item

    def state_dict(self) -> StateDict:
        return {"seen": self.seen}


class Splitter(Stage):
    """Split shards over ranks (``by="node"``), DataLoader workers (``by="worker"``), or refuse
    multi-rank use (``by="single"``); the slice comes from the epoch context's world.

    Instances are WebDataset's ``split_by_node``, ``split_by_worker`` and ``single_node_only``;
    like those functions they can be called on a shard iterator: ``split_by_worker(src)``.
    """

    def __init__(self, by: str) -> None:
        if by not in ("node", "worker", "single"):
            raise ValueError(f"by={by!r} must be 'node', 'worker' or 'single'")
        self.by = by

    def __call__(self, src: Any, group: Any = None) -> Iterator[Any]:
        upstream = src if isinstance(src, Node) else ListNode(list(src))
        world = World.current(group)
        return iter(self.build(upstream, RunContext(0, world)))

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        world = ctx.world
        if self.by == "single":
            if world.world_size > 1:
                raise SplitError(
                    f"this pipeline reads every shard on each of {world.world_size} ranks (nodesplitter="
                    "single_node_only). Pass nodesplitter=split_by_node to give each rank its own "
                    "shards, or resampled=True to draw shards at random on every rank."
                )
            index, count, what = 0, 1, "rank"
        else:
            index, count = split_slice(world, self.by)
            what = "rank" if self.by == "node" else "worker"
        items = _upstream_items(upstream, f"split_by_{self.by}")
        if items is not None:
            mine = list(take_every(items, index, count, what=what))
            return ListNode(mine, state)
        assert upstream is not None
        return _LazySplitNode(upstream, index, count, state)

    def __repr__(self) -> str:
        return {"node": "split_by_node", "worker": "split_by_worker", "single": "single_node_only"}[self.by]

    def __reduce__(self) -> str | tuple[Any, ...]:
        return (Splitter, (self.by,))


split_by_node = Splitter("node")
split_by_worker = Splitter("worker")
single_node_only = Splitter("single")
