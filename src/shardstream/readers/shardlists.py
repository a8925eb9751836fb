"""Shard-list stages: the list, its per-epoch shuffle, resampling, and splitting over ranks/workers.

Each builds a node whose output for the epoch is a known list (or, for resampling, an indexable
endless sequence), so its state is one index and the reader can turn a shard number back into a
URL (``item(k)``). The arithmetic is pure and lives in :mod:`shardstream.shards`; these stages
only apply it to the epoch's :class:`RunContext`.

Splitting keeps WebDataset's meaning, with two additions. A DataLoader worker left without
shards (fewer shards than workers) yields nothing, since the other workers of its process hold the
epoch; its node says so (:func:`idle_worker`), worker 0 logs it once at INFO, and a shard list empty
as a whole raises. A rank without shards would hang DDP, so ``split_by_node`` still raises
:class:`~shardstream.errors.SplitError`; when uneven shards give ranks different batch counts and
their sample counts are in an ``_info.json`` beside them, rank 0 warns at the start of the epoch.
"""

from __future__ import annotations

import itertools
import logging
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import ConfigurationError, SplitError, redact_url
from ..pipeline.base import DrawNode, ListNode, Node, RunContext, Stage, StateDict
from ..shards.plan import epoch_order
from ..shards.spec import expand_urls
from ..shards.split import split_slice, take_every
from ..shards.world import World, derive_seed
from ..sources import scheme_of
from ..tar.index import read_index

__all__ = [
    "ResampledShards",
    "ShardShuffle",
    "SimpleShardList",
    "Splitter",
    "idle_worker",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
]

log = logging.getLogger(__name__)

_WARNED: set[str] = set()  # arguments without effect already logged in this process


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

    kind = "shards"
    label = "shard list"

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
        first = redact_url(self.urls[0])
        return f"SimpleShardList({len(self.urls)} shards, first={first!r}, seed={self.seed})"


def shardspec(spec: str | Sequence[str]) -> SimpleShardList:
    """A shard list from a spec string or list (WebDataset's ``shardspec``)."""
    return SimpleShardList(spec)


def _url_dict(url: str) -> dict[str, Any]:
    return {"url": url}


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
        deterministic: WebDataset's switch; draws here are always deterministic (``False`` logs
            a warning once and changes nothing).
        max_urls: use at most this many URLs of the spec.
        empty_check: raise when the spec names no shards (default); False allows an empty
            spec (nothing is yielded).
    """

    kind = "shards"
    label = "shard draws"

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
        if not deterministic and "deterministic" not in _WARNED:
            _WARNED.add("deterministic")  # once per process (WebDataset recipes pass it on every build)
            log.warning(
                "ResampledShards(deterministic=False) has no effect: draws are always seeded from "
                "(seed, epoch, rank, worker), so a run can be repeated and resumed; pass another "
                "seed= for another draw"
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
        self.deterministic = deterministic

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        seed = self.seed if self.seed is not None else ctx.seed
        if self.worker_seed is not None:
            seed = int(self.worker_seed())
        base = derive_seed(seed, "resample", ctx.epoch, ctx.world.rank, ctx.world.worker)
        return DrawNode(self.urls, base, self.nshards, state, make=_url_dict)

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

    kind = "shards"
    label = "shard shuffle"

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
    """Splitting an endless (or foreign) shard stream: every ``count``-th item from ``index``.

    Its ``k``-th item can be made again when upstream's can (resampled shards: any draw), so a
    shuffle buffer after the reader is restored from its samples' positions (a saved state, or a
    loader replacing a lost worker). It stays non-``indexable``: that promises a list whose rest
    can be re-split (``readers/elastic.py``), and an endless stream has no rest to share out."""

    def __init__(self, upstream: Node, index: int, count: int, state: StateDict | None) -> None:
        super().__init__(upstream)
        self.seen = int((state or {}).get("seen", 0))
        self.index, self.count = index, count
        self._it = self._run(index, count)

    def item(self, k: int) -> Any:
        """The ``k``-th item this node yields in the epoch: upstream's ``index + k * count``-th
        (upstream raises when it has no random access)."""
        assert self.upstream is not None
        return self.upstream.item(self.index + k * self.count)

    def _run(self, index: int, count: int) -> Iterator[Any]:
        assert self.upstream is not None
        for item in self.upstream:
            i = self.seen
            self.seen = i + 1
            if i % count == index:
                yield item

    def state_dict(self) -> StateDict:
        return {"seen": self.seen}


class _WorkerSliceNode(ListNode):
    """This worker's shards; ``idle`` when the epoch has shards but none for this worker."""

    def __init__(self, items: Sequence[Any], idle: bool, state: StateDict | None) -> None:
        super().__init__(items, state)
        self.idle = idle


def idle_worker(node: Node | None) -> bool:
    """True when ``node`` reads from a worker split that left this DataLoader worker without shards.

    An emptiness check after the reader uses it to tell an idle worker (harmless: the other
    workers hold the epoch's shards) from an epoch without samples.
    """
    for _ in range(1000):  # a chain of nodes, nested pipelines included; never a cycle
        if node is None:
            return False
        if getattr(node, "idle", False):
            return True
        inner = getattr(node, "nodes", None)  # a nested pipeline: walk its own chain
        node = inner[-1] if inner else node.upstream
    return False


_idle_logged = False


def _split_workers(items: Sequence[Any], world: World, state: StateDict | None) -> Node:
    global _idle_logged
    index, count = split_slice(world, "worker")
    if not items:
        raise SplitError(
            f"the shard list of this epoch is empty (rank {world.rank} of {world.world_size}): there "
            "is nothing to split over the DataLoader workers. Check the spec and the stages before "
            "split_by_worker."
        )
    if index == 0 and len(items) < count and not _idle_logged:
        _idle_logged = True
        log.info(
            "%d of %d DataLoader workers get no shard (the epoch has %d): they yield nothing while "
            "the others read every shard; workers beyond the number of shards do not help",
            count - len(items),
            count,
            len(items),
        )
    mine = list(itertools.islice(items, index, None, count))
    return _WorkerSliceNode(mine, idle=not mine, state=state)


class Splitter(Stage):
    """Split shards over ranks (``by="node"``), DataLoader workers (``by="worker"``), or refuse
    multi-rank use (``by="single"``); the slice comes from the epoch context's world.

    Instances are WebDataset's ``split_by_node``, ``split_by_worker`` and ``single_node_only``;
    like those functions they can be called on a shard iterator: ``split_by_worker(src)``.
    Workers without a shard yield nothing; a rank without a shard raises (see the module docstring).

    Args:
        by: ``"node"``, ``"worker"`` or ``"single"``.
        refusal: when set, an epoch in a world of several ranks raises a
            :class:`~shardstream.errors.ConfigurationError` with this message (``{ranks}``
            replaced by their number) instead of splitting: a split chosen for one rank (the
            native ``ShardStream``'s default) that finds itself under DDP, where whole shards per
            rank would give the ranks different batch counts.
    """

    kind = "shards"
    label = "split"

    def __init__(self, by: str, refusal: str | None = None) -> None:
        if by not in ("node", "worker", "single"):
            raise ValueError(f"by={by!r} must be 'node', 'worker' or 'single'")
        self.by = by
        self.refusal = refusal

    def __call__(self, src: Any, group: Any = None) -> Iterator[Any]:
        upstream = src if isinstance(src, Node) else ListNode(list(src))
        world = World.current(group)
        return iter(self.build(upstream, RunContext(0, world)))

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        world = ctx.world
        if self.refusal is not None and world.world_size > 1:
            raise ConfigurationError(self.refusal.format(ranks=world.world_size))
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
            if self.by == "worker":
                return _split_workers(items, world, state)
            if self.by == "node" and world.world_size > 1 and world.rank == 0 and world.worker == 0:
                _warn_uneven(items, ctx)
            mine = list(take_every(items, index, count, what=what))
            return ListNode(mine, state)
        assert upstream is not None
        return _LazySplitNode(upstream, index, count, state)

    def __repr__(self) -> str:
        name = {"node": "split_by_node", "worker": "split_by_worker", "single": "single_node_only"}[self.by]
        return name if self.refusal is None else f"{name} (one rank only)"

    def __reduce__(self) -> str | tuple[Any, ...]:
        return (Splitter, (self.by, self.refusal))


split_by_node = Splitter("node")
split_by_worker = Splitter("worker")
single_node_only = Splitter("single")


# -- uneven ranks under split_by_node ---------------------------------------------------------------

#: shard directory -> {basename: samples} from its _info.json (None: none readable), per process.
_INDEXES: dict[str, dict[str, int] | None] = {}
_uneven_checked = False


def _indexed_counts(urls: list[str]) -> list[int] | None:
    """Sample counts of ``urls`` from the ``_info.json`` beside them; None if any is unknown."""
    counts = []
    for url in urls:
        directory, _, name = url.rpartition("/")
        if directory not in _INDEXES:
            try:
                _INDEXES[directory] = None if scheme_of(url) == "pipe" else read_index(directory)
            except Exception as exc:  # no index, unreadable, unreachable: nothing to warn about
                log.debug("no shard index beside %s (%s)", redact_url(url), redact_url(exc))
                _INDEXES[directory] = None
        table = _INDEXES[directory]
        if table is None or name not in table:
            return None
        counts.append(table[name])
    return counts


def _warn_uneven(items: Sequence[Any], ctx: RunContext) -> None:
    """Warn (once per process, rank 0 worker 0) when this epoch's ranks get different batch counts.

    In a DataLoader worker the dataset it iterates is visible: batches are counted for its first
    ``batched`` stage (each worker batches its own shards), and a ``with_epoch`` cap means no
    warning. Elsewhere samples are compared and the message names the cap as the exception.
    """
    global _uneven_checked
    torch_data = sys.modules.get("torch.utils.data")
    dataset = getattr(torch_data.get_worker_info() if torch_data else None, "dataset", None)
    if _uneven_checked or getattr(dataset, "nsamples", -1) > 0:  # with_epoch(n): equal per worker
        return
    _uneven_checked = True
    counts = _indexed_counts([item["url"] if isinstance(item, dict) else str(item) for item in items])
    if counts is None:
        return
    ranks, workers = ctx.world.world_size, max(1, ctx.world.num_workers)
    samples = [[sum(counts[r::ranks][w::workers]) for w in range(workers)] for r in range(ranks)]
    todo, size, partial = [dataset], 0, True
    while todo and not size:  # the first batched() stage, nested pipelines included
        stage = todo.pop(0)
        size, partial = getattr(stage, "batchsize", 0) or 0, getattr(stage, "partial", True)
        todo.extend(getattr(stage, "pipeline", None) or [])
    per_rank = [sum((-(-n // size) if partial else n // size) if size else n for n in s) for s in samples]
    if len(set(per_rank)) == 1:
        _uneven_checked = False  # balanced in this epoch's shard order; check the next epoch too
        return
    log.warning(
        "split_by_node gives the %d ranks different amounts of data in epoch %d (%s %s, from the "
        "shards' _info.json): under DDP the rank that runs out first waits forever in the next "
        "collective, unless with_epoch(n) caps every rank's epoch. Use split='equal' with batch_size= "
        "(WebDataset(urls, split='equal', batch_size=b), or ShardStream(urls) without split=) for the "
        "same number of batches on every rank, or resampled=True with .with_epoch(n).",
        ranks,
        ctx.epoch,
        ", ".join(f"rank {r}: {n}" for r, n in enumerate(per_rank)),
        f"batches of {size} per DataLoader worker" if size else "samples",
    )
