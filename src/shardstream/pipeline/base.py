"""The stage contract: a :class:`Stage` is configuration, a :class:`Node` is its running iterator.

A pipeline is a chain of stages. For every epoch the pipeline builds one node per stage,
passing it the upstream node, the epoch's :class:`RunContext` (epoch, world, seed: resolved once)
and optionally a saved state::

    node = stage.build(upstream_node, ctx, state)    # a running iterator for one epoch
    item = next(node)
    saved = node.state_dict()                        # JSON-able; taken between two items
    again = stage.build(restored_upstream, ctx, saved)  # continues after the same item

Rules every node follows:

* ``state_dict()`` describes the node *after the last item it yielded*; together with the
  states of the nodes upstream (taken at the same moment) it is enough to continue exactly.
  Items a node has pulled but not yet yielded (a shuffle buffer, the rest of an unbatched batch)
  are part of its own state, recorded as upstream *positions* (tokens), never as sample bytes.
* ``tell`` (when not ``None``) returns a small JSON-able token locating the last item yielded,
  and ``item_at(token)`` produces that item again without disturbing the running iterator. The
  reader implements both from (shard, byte offset); one-to-one stages (map, decode, fields)
  forward ``tell`` and apply themselves in ``item_at``. A shuffle buffer is saved as tokens.
* ``stateful`` is ``False`` for nodes that cannot save state (plain callables, foreign
  iterators). A pipeline holding one saves a replay count instead (see ``DataPipeline``).

Nodes iterate through one internal generator (``_it``): ``iter(node)`` returns that generator
itself, so a chain of stages costs what a chain of generators costs; the generator updates the
node's state attributes before each ``yield``.

The try/handler/skip loop lives in one place, :func:`guarded`.
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ..errors import StateError, redact_url
from ..handlers import Handler
from ..shards.world import World, derive_seed
from ..telemetry.stats import StageStats

if TYPE_CHECKING:
    from ..telemetry.recorder import Recorder
    from .parallel import Threads
    from .trace import Trace

__all__ = [
    "DrawNode",
    "FunctionStage",
    "IterNode",
    "ListNode",
    "MapStage",
    "Node",
    "PipelineStage",
    "RunContext",
    "Stage",
    "StageStats",
    "StateDict",
    "guarded",
    "pending_positions",
    "pipelinefilter",
]

StateDict = dict[str, Any]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunContext:
    """What every stage of one epoch shares: the epoch number, the world and the base seed.

    Built once per epoch by the pipeline that owns the epoch (the world is detected once, in the
    process that iterates, or taken from an explicit ``world=``).
    """

    epoch: int = 0
    world: World = field(default_factory=World)
    seed: int | None = None
    #: The pipeline's telemetry recorder when telemetry is on (:mod:`shardstream.telemetry.recorder`).
    telemetry: Recorder | None = field(default=None, compare=False, repr=False)
    #: The pool that runs per-sample stages when a loader asks for threads (``pipeline/parallel.py``).
    threads: Threads | None = field(default=None, compare=False, repr=False)
    #: The items reach the loader's default collation with no stage in between that reads the
    #: values: a decode stage may leave images to be decoded straight into the batch
    #: (:mod:`shardstream.decoders.deferred`). Set per stage by :func:`~.build.build_nodes`.
    fills: bool = field(default=False, compare=False)
    #: Called with every item each node yields (``trace.py``): a loader's diagnostic run sets it
    #: to find the sample that kills its workers. ``None``: nothing is traced.
    trace: Trace | None = field(default=None, compare=False, repr=False)

    @classmethod
    def detect(cls, epoch: int = 0, seed: int | None = None, world: World | None = None) -> RunContext:
        return cls(epoch, World.current(override=world), seed)

    def derive(self, stage_seed: int | None, *parts: object) -> int:
        """A seed for one stage's randomness in this epoch, rank and worker."""
        base = self.seed if stage_seed is None else stage_seed
        return derive_seed(base, *parts, self.epoch, self.world.rank, self.world.worker)


def guarded(
    src: Iterable[Any], fn: Callable[[Any], Any], handler: Handler, stats: StageStats, drop_none: bool
) -> Iterator[Any]:
    """``fn`` over ``src`` under an error policy: the one try/handler/skip loop.

    The handler decides per exception: True skips the item (counted in ``stats``), False ends
    the stream (counted), or it re-raises. With ``drop_none``, a ``None`` result drops the item.
    """
    for item in src:
        try:
            out = fn(item)
        except Exception as exn:
            go_on = handler(exn)
            stats.record(exn)
            if go_on:
                continue
            return
        if drop_none and out is None:
            continue
        yield out


class Node:
    """A stage's running iterator for one epoch (see the module docstring for the contract)."""

    stateful: bool = True
    #: True for nodes whose output has random access (``item(k)``): shard lists.
    indexable: bool = False
    tell: Callable[[], Any] | None = None
    _it: Iterator[Any]

    def __init__(self, upstream: Node | None = None) -> None:
        self.upstream = upstream

    def __iter__(self) -> Iterator[Any]:
        return self._it

    def __next__(self) -> Any:
        return next(self._it)

    def state_dict(self) -> StateDict:
        """This node's own state after the last item it yielded (upstream nodes save theirs).

        Every stateful node implements it (``{}`` when it keeps nothing between two items, as a
        map does); a node that cannot save state says ``stateful = False`` instead. Forgetting
        both raises here rather than saving nothing and resuming wrong.
        """
        if not self.stateful:
            return {}
        raise NotImplementedError(
            f"{type(self).__name__} is stateful but does not implement state_dict(): return its "
            "state after the last item it yielded ({} when it keeps none), or set stateful = False"
        )

    def item_at(self, token: Any) -> Any:
        """The item whose position ``tell()`` reported as ``token``, produced again."""
        raise StateError(
            f"{type(self).__name__} cannot produce an item from its position; a shuffle buffer "
            "over it cannot be saved as positions"
        )

    def items_at(self, tokens: list[Any]) -> list[Any]:
        """``item_at`` for many positions at once (a reader groups them by shard: one pass each)."""
        return [self.item_at(t) for t in tokens]

    def item(self, k: int) -> Any:
        """The ``k``-th item of this epoch's output, for nodes whose output is a known list."""
        raise StateError(f"{type(self).__name__} has no random access to its items")

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


class ListNode(Node):
    """Yields a list known when the epoch starts; the state is the index of the next item."""

    indexable = True

    def __init__(self, items: Sequence[Any], state: StateDict | None = None) -> None:
        super().__init__(None)
        self.items = items
        self.next = int((state or {}).get("next", 0))
        self._it = self._run()

    def _run(self) -> Iterator[Any]:
        items = self.items
        while self.next < len(items):
            i = self.next
            self.next = i + 1
            yield items[i]

    def item(self, k: int) -> Any:
        return self.items[k]

    def state_dict(self) -> StateDict:
        return {"next": self.next}


class DrawNode(Node):
    """Yields ``limit`` items drawn with replacement from ``items``; draw ``k`` is seeded by
    ``(base, k)``, so any draw can be produced again (``item(k)``) and the state is one index."""

    indexable = True

    def __init__(
        self,
        items: Sequence[Any],
        base: int,
        limit: int,
        state: StateDict | None = None,
        *,
        make: Callable[[Any], Any] | None = None,
        upstream: Node | None = None,
    ) -> None:
        super().__init__(upstream)
        # Not ``items``: splitters take an upstream ``items`` list as the epoch's whole output.
        self.pool, self.base, self.limit, self.make = items, base, limit, make
        self.next = int((state or {}).get("next", 0))
        self._it = self._run()

    def item(self, k: int) -> Any:
        # One small seeded draw per item: random access for resume at the cost of a hash.
        chosen = self.pool[random.Random(self.base + k).randrange(len(self.pool))]
        return chosen if self.make is None else self.make(chosen)

    def _run(self) -> Iterator[Any]:
        if not self.pool:
            return
        while self.next < self.limit:
            k = self.next
            self.next = k + 1
            yield self.item(k)

    def state_dict(self) -> StateDict:
        return {"next": self.next}


class _ForeignNode(Node):
    stateful = False

    def __init__(self, src: Iterable[Any]) -> None:
        super().__init__(None)
        self._it = iter(src)


def IterNode(src: Iterable[Any], state: StateDict | None = None) -> Node:  # noqa: N802 - a node factory
    """A node over a source that is not a stage: a ``list``/``tuple`` is stateful (an index),
    anything else (a DataLoader, a generator) is not (its pipeline replays on restore)."""
    if isinstance(src, (list, tuple)):
        return ListNode(src, state)
    return _ForeignNode(src)


class Stage:
    """Configuration of one pipeline step; :meth:`build` makes its running :class:`Node`.

    A Stage is also callable on an iterable, as WebDataset stages are: ``stage(src)`` builds a
    node over ``src`` with a context detected now (epoch 0), for use outside a pipeline.
    """

    #: Set by stages whose output count equals their input count (used for positions).
    one_to_one: bool = False
    #: The kind of work, for telemetry: read, decode, map, fields, batch, shuffle, shards, stage.
    kind: ClassVar[str] = "stage"
    #: A short name in telemetry reports (default: the class name).
    label: ClassVar[str] = ""
    #: True for stages that move, drop or reorder values without reading them (to_tuple, rename,
    #: shuffle, slice): a decode before them may defer its images to the batch (``fills``).
    passes_values: ClassVar[bool] = False

    def describe(self) -> str:
        """The stage's name in telemetry reports: ``read``, ``decode``, ``map <lambda>``."""
        return self.label or type(self).__name__.lstrip("_")

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if not isinstance(self, _WebDatasetStage):
            raise NotImplementedError(
                f"{type(self).__name__} must implement build(upstream, ctx, state) (or, as a "
                "WebDataset PipelineStage, run(self, src))"
            )
        # A WebDataset PipelineStage: a generator over the upstream, whose state nobody can save.
        # The pipeline then saves the number of items yielded and replays the epoch on restore.
        name = type(self).__qualname__
        if name not in _UNSAVED_WARNED:
            _UNSAVED_WARNED.add(name)
            log.warning(
                "stage %s implements WebDataset's run(src), not build(upstream, ctx, state): its state "
                "cannot be saved, so state_dict() records the items yielded and a restore replays the "
                "epoch up to there (exact only if %s yields the same items again, e.g. seeded by epoch)",
                name,
                name,
            )
        return _FunctionNode(iter(self.run(upstream if upstream is not None else ())), upstream)

    def __call__(self, src: Iterable[Any]) -> Iterator[Any]:
        upstream = src if isinstance(src, Node) else IterNode(src)
        return iter(self.build(upstream, RunContext.detect()))

    @property
    def stats(self) -> StageStats:
        stats: StageStats | None = self.__dict__.get("_stats")
        if stats is None:
            stats = self.__dict__["_stats"] = StageStats()
        return stats

    def close(self) -> None:
        """Release resources the configuration holds (running nodes are closed by the pipeline)."""


@runtime_checkable
class _WebDatasetStage(Protocol):
    """A stage written for WebDataset: it overrides ``run(src)`` (a generator over the upstream)."""

    def run(self, src: Iterable[Any]) -> Iterator[Any]: ...


# WebDataset name for the stage base class.
PipelineStage = Stage
#: Stage classes whose unsaved state was already logged (once per class and process).
_UNSAVED_WARNED: set[str] = set()


def pending_positions(state: StateDict | None) -> list[Any] | None:
    """The positions a map node's state holds of items pulled and not yet yielded, in order:
    ``{"pending": [token, ...]}``, or ``{"pending_runs": [(token, ...), ...]}`` as thread mode
    saves them, a tuple per chunk (``parallel.py``: the producer takes the state after every
    batch, and a reference per chunk costs less than a copy of every position in its window);
    ``None`` for any other state."""
    if not state:
        return None
    if set(state) == {"pending"}:
        return list(state["pending"])
    if set(state) == {"pending_runs"}:
        return [token for run in state["pending_runs"] for token in run]
    return None


class _MapNode(Node):
    def __init__(
        self, stage: MapStage, upstream: Node, ctx: RunContext, state: StateDict | None = None
    ) -> None:
        super().__init__(upstream)
        self.fn = stage.function(ctx)
        self.tell = upstream.tell
        #: Items pulled by threaded map stages, not yielded when saved (parallel.py): first, again.
        self.pending: deque[Any] = deque(pending_positions(state) or ())
        self.src: Iterable[Any] = upstream
        if self.pending:
            self.src = self._replaying(upstream)
            if upstream.tell is not None:
                self.tell = self._tell
        self._it = guarded(self.src, self.fn, stage.handler, stage.stats, stage.drop_none)

    def _replaying(self, upstream: Node) -> Iterator[Any]:
        self.replaying, self.current = True, None
        for item in upstream.items_at(list(self.pending)):
            self.current = self.pending.popleft()
            yield item
        self.replaying = False
        yield from upstream

    def _tell(self) -> Any:
        assert self.upstream is not None and self.upstream.tell is not None
        return self.current if self.replaying else self.upstream.tell()

    def state_dict(self) -> StateDict:
        # {} once replayed: one item in, one out, nothing is held between two items.
        return {"pending": list(self.pending)} if self.pending else {}

    def item_at(self, token: Any) -> Any:
        assert self.upstream is not None
        return self.fn(self.upstream.item_at(token))

    def items_at(self, tokens: list[Any]) -> list[Any]:
        assert self.upstream is not None
        return [self.fn(item) for item in self.upstream.items_at(tokens)]


class MapStage(Stage):
    """A one-to-one stage: ``function()`` returns the per-item function, applied under ``handler``.

    A skipped item (handler True, or a ``None`` result with ``drop_none``) is simply not yielded,
    so the stage keeps no state of its own and forwards positions (``tell``/``item_at``).
    """

    one_to_one = True
    handler: Handler
    drop_none: bool = False

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        raise NotImplementedError

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise StateError(f"{type(self).__name__} needs an upstream stage")
        return _MapNode(self, upstream, ctx, state)


class _FunctionNode(Node):
    stateful = False

    def __init__(self, it: Iterator[Any], upstream: Node | None) -> None:
        super().__init__(upstream)
        self._it = it


class FunctionStage(Stage):
    """A generator function with its arguments bound: ``f(src, *args, **kw)``.

    Plain functions cannot save state; a pipeline holding one saves a replay count instead.
    """

    kind = "map"  # a user's generator function

    def describe(self) -> str:
        return str(getattr(self.f, "__name__", None) or type(self.f).__name__)

    def __init__(self, f: Callable[..., Iterator[Any]], *args: Any, **kw: Any) -> None:
        self.f = f
        self.args = args
        self.kw = kw

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        return _FunctionNode(iter(self.f(upstream, *self.args, **self.kw)), upstream)

    def __repr__(self) -> str:  # (its arguments may be URLs or storage options: redacted)
        name = getattr(self.f, "__name__", repr(self.f))
        arguments = ", ".join([*map(repr, self.args), *(f"{k}={v!r}" for k, v in self.kw.items())])
        return f"{name}({redact_url(arguments)})"


def pipelinefilter(f: Callable[..., Iterator[Any]]) -> Callable[..., FunctionStage]:
    """Curry a generator function ``f(src, *args, **kw)`` into a stage factory.

    ``shuffle = pipelinefilter(_shuffle)`` makes ``shuffle(1000)`` a stage to put in a pipeline.
    """

    @functools.wraps(f)
    def factory(*args: Any, **kw: Any) -> FunctionStage:
        return FunctionStage(f, *args, **kw)

    # Show the curried signature (without the upstream iterator) in help() and introspection.
    try:
        params = list(inspect.signature(f).parameters.values())[1:]
        factory.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    return factory
