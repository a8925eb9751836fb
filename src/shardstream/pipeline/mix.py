"""MixSource: the stage that starts a pipeline by interleaving several pipelines, each with its own passes.

Every epoch the stage builds one node per source pipeline, with the source's own seed and
world (the loader's worker reaches it: each worker mixes its own share of every source), and
takes items from them in the order a schedule of :mod:`shardstream.shards.mixing` gives. A
source that runs out follows ``stop``:

* ``"first_exhausted"``: the mixture's pass ends (no source repeats);
* ``"all_exhausted"``: the source starts its next pass until every source has ended once;
* ``"never"``: every source starts its next pass whenever it ends (an endless stream);
* ``"longest"``: the source leaves and the others go on until all have ended (each read once).

A source's pass ``k`` in the mixture's epoch ``e`` runs as the source's epoch
``e + k * PASS_STRIDE`` (its own shard order and shuffles; distinct for every mixture epoch below
a million). A pass that yields nothing leaves the mixture at once (it could never give its share).

State: the schedule's counter, each source's pass number and whether it has ended or left, and
each source node's state (``{"nodes": [...]}`` for a pipeline), all after the last item yielded.
Positions (``tell``) are ``[source, pass, the source's own token]``, so a shuffle buffer after
the mixture is saved small, as after a reader.

A pass restored elastically (another ``num_workers`` or world size: ``readers/elastic_mix.py``)
has two more keys. ``"dealt"``: per source, ``[pass, state]`` of the runs of samples this worker
was dealt (kept for the positions of its items still in a buffer downstream once the source has
moved on or left). ``"stop"``: the rule of this pass when it differs from the stage's:
``"longest"`` after a resume of a ``first_exhausted``, ``all_exhausted`` or ``longest`` mixture,
whose workers read exactly what they were dealt. A fresh schedule then interleaves the sources
by their weights until one runs out; the others go on, renormalised. States of passes that were
not restored elastically are unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from operator import length_hint
from typing import Any

from ..errors import ConfigurationError, StateError
from ..shards.mixing import Balanced, RandomDraws, phases
from .base import IterNode, Node, RunContext, Stage, StateDict
from .build import build_one
from .pipeline import DataPipeline, close_iterator

__all__ = ["ORDERS", "PASS_STRIDE", "STOPS", "MixSource"]

log = logging.getLogger(__name__)

STOPS = ("first_exhausted", "all_exhausted", "never", "longest")
ORDERS = ("balanced", "rotation", "random")
#: A source's pass ``k`` of the mixture's epoch ``e`` is the source's epoch ``e + k * PASS_STRIDE``.
PASS_STRIDE = 1_000_000

_STOP, _LEFT = object(), object()  # what a source that ran out means for the pass


class MixSource(Stage):
    """Items of several pipelines interleaved by a schedule (see the module docstring).

    Args:
        sources: the pipelines (``ShardStream``, ``WebDataset``, ``DataPipeline``); any other
            iterable is iterated afresh for every pass (a list keeps an index; anything else
            makes the mixture replay on restore).
        weights: one weight per source (default: equal). ``"balanced"`` needs them positive.
        stop: what a source that runs out means (``STOPS``; default ``"first_exhausted"``).
        order: ``"balanced"`` (low-discrepancy, the ``ss.Mix`` order), ``"rotation"`` (one item
            of each in turn) or ``"random"`` (independent weighted draws).
        seed: seed of the balanced phases and of the random draws; ``None`` takes the
            pipeline's seed.
    """

    kind = "read"
    label = "mix"

    def __init__(
        self,
        sources: Sequence[Any],
        weights: Sequence[float] | None = None,
        *,
        stop: str = "first_exhausted",
        order: str = "balanced",
        seed: int | None = None,
    ) -> None:
        self.sources = list(sources)
        n = len(self.sources)
        if n == 0:
            raise ConfigurationError("a mixture needs at least one source; got none")
        if stop not in STOPS:
            raise ConfigurationError(f"stop={stop!r} is unknown; use one of {STOPS}")
        if order not in ORDERS:
            raise ConfigurationError(f"order={order!r} is unknown; use one of {ORDERS}")
        self.weights = [1.0] * n if weights is None else [float(w) for w in weights]
        if len(self.weights) != n:
            raise ConfigurationError(
                f"{len(self.weights)} weights for {n} sources; give one weight per source"
            )
        least = 0.0 if order == "random" else 1e-12
        bad = [(i, w) for i, w in enumerate(self.weights) if not w >= least or w == float("inf")]
        if bad or sum(self.weights) <= 0:
            raise ConfigurationError(
                f"weights {self.weights} cannot be used (source, weight: {bad}): give every source a "
                "positive finite weight (drop a source rather than weighting it 0)"
            )
        self.stop, self.order, self.seed = stop, order, seed

    def context(self, i: int, passes: int, ctx: RunContext) -> RunContext:
        """The run context of source ``i``'s pass ``passes`` in the mixture's ``ctx``: its own seed
        and world (rank from its ``world=`` when given), the mixture's worker, threads and trace."""
        src, epoch = self.sources[i], ctx.epoch + passes * PASS_STRIDE
        if not isinstance(src, DataPipeline):
            return RunContext(
                epoch, ctx.world, ctx.seed, threads=ctx.threads, fills=ctx.fills, trace=ctx.trace
            )
        world = ctx.world
        if src.world is not None:
            world = src.world.with_worker(ctx.world.worker, ctx.world.num_workers)
        return RunContext(epoch, world, src.seed, threads=ctx.threads, fills=ctx.fills, trace=ctx.trace)

    def source_node(self, i: int, passes: int, ctx: RunContext, state: StateDict | None) -> Node:
        """Source ``i``'s node for pass ``passes`` (a pipeline's nodes as one, from ``state``)."""
        src, sub = self.sources[i], self.context(i, passes, ctx)
        if isinstance(src, DataPipeline) and src.repetitions == 1 and src.nsamples <= 0:
            return build_one(src, None, sub, state)
        # repeat()/with_epoch() pipelines and foreign iterables run by their own rules
        return IterNode(src, state)

    def schedule(self, ctx: RunContext, saved: Any) -> Balanced | RandomDraws:
        """The schedule of a pass, from its saved counter (``None``: the pass's start)."""
        n, seed = len(self.sources), self.seed if self.seed is not None else ctx.seed
        if self.order == "random":
            return RandomDraws(self.weights, ctx.derive(seed, "random-mix"), int(saved or 0))
        phase = [i / n for i in range(n)] if self.order == "rotation" else phases(n, seed)
        return Balanced(self.weights, phase, saved)

    def fingerprint(self) -> dict[str, Any]:
        """What a saved mixture state must be restored into (each source's own fingerprint too)."""
        fp: dict[str, Any] = {
            "sources": len(self.sources),
            "weights": self.weights,
            "stop": self.stop,
            "order": self.order,
        }
        for i, src in enumerate(self.sources):
            fp[f"source{i}"] = src.fingerprint() if isinstance(src, DataPipeline) else type(src).__name__
        return fp

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is not None:
            raise ConfigurationError("MixSource starts a pipeline; it takes no upstream stage")
        return _MixNode(self, ctx, state or {})

    def __repr__(self) -> str:
        return f"MixSource({len(self.sources)} sources, weights={self.weights}, stop={self.stop!r})"


class _MixNode(Node):
    def __init__(self, stage: MixSource, ctx: RunContext, state: StateDict) -> None:
        super().__init__(None)
        n = len(stage.sources)
        saved = state.get("sources")
        if saved is not None and len(saved) != n:
            raise StateError(
                f"the saved mixture has {len(saved)} sources but this one has {n}; restore it into a "
                "mixture of the same sources, weights and stop rule"
            )
        self.stage, self.ctx = stage, ctx
        self.stop = str(state.get("stop", stage.stop))
        if self.stop not in STOPS:
            raise StateError(f"the saved mixture's stop rule {self.stop!r} is none of {STOPS} (corrupted)")
        self.dealt: list[Any] | None = state.get("dealt")
        if self.dealt is not None and len(self.dealt) != n:
            raise StateError(f"the saved mixture was dealt runs for {len(self.dealt)} sources, not {n}")
        self.passes = [int(x) for x in state.get("passes", [0] * n)]
        self.ended = [bool(x) for x in state.get("ended", [False] * n)]
        self.active = [bool(x) for x in state.get("active", [True] * n)]
        self.schedule = stage.schedule(ctx, state.get("schedule"))
        self.extra: dict[tuple[int, int], Node] = {}  # other passes' nodes, for item_at only
        self.nodes: list[Node | None] = []
        self._it = iter(())
        try:
            for i in range(n):
                own = saved[i] if saved is not None else None
                self.nodes.append(stage.source_node(i, self.passes[i], ctx, own) if self.active[i] else None)
        except BaseException:
            self.close()
            raise
        live = [node for node in self.nodes if node is not None]
        self.stateful = all(node.stateful for node in live)
        self.block: list[int] = []
        self.cursor: Iterator[int] = iter(())
        if all(node.tell is not None for node in live):
            self.tell = self._tell
        self._it = self._run()

    def _run(self) -> Iterator[Any]:
        # The generators' own __next__ (iter(node) is the node's generator): a C call per item.
        nexts = [iter(node).__next__ if node is not None else None for node in self.nodes]
        schedule = self.schedule
        while True:
            block = schedule.plan(self.active)
            if not block:
                return
            # Where the block is: its iterator's length hint (no counter kept per item).
            self.block, self.cursor = block, iter(block)
            for i in self.cursor:
                try:
                    item = nexts[i]()  # type: ignore[misc]
                except StopIteration:
                    item = self._ran_out(i, nexts)
                    if item is _STOP or item is _LEFT:
                        # the failed pick is spent when the source leaves (a draw, a turn)
                        schedule.commit(self._yielded() - (item is _STOP))
                        self.block, self.cursor = [], iter(())
                        if item is _STOP:
                            return
                        break
                yield item
            else:
                schedule.commit(len(block))
                self.block, self.cursor = [], iter(())

    def _yielded(self) -> int:
        """Picks of the block taken so far (each one yielded, but a failed last one)."""
        return len(self.block) - length_hint(self.cursor)

    def _ran_out(self, i: int, nexts: list[Any]) -> Any:
        """Source ``i`` ended its pass: the next item from its next pass, ``_STOP`` or ``_LEFT``."""
        stop = self.stop
        self.ended[i] = True
        if stop == "first_exhausted" or (stop == "all_exhausted" and all(self.ended)):
            return _STOP
        if stop != "longest":
            old = self.nodes[i]
            if old is not None:
                old.close()
            self.passes[i] += 1
            node = self.nodes[i] = self.stage.source_node(i, self.passes[i], self.ctx, None)
            nexts[i] = iter(node).__next__
            try:
                return nexts[i]()
            except StopIteration:
                log.warning(
                    "mixture source %d yielded nothing in its pass %d (epoch %d): it leaves the mixture",
                    i,
                    self.passes[i],
                    self.ctx.epoch,
                )
        self._leave(i, nexts)
        return _LEFT if any(self.active) else _STOP

    def _leave(self, i: int, nexts: list[Any]) -> None:
        node, self.nodes[i], nexts[i] = self.nodes[i], None, None
        self.active[i] = False
        if node is not None:
            node.close()

    def state_dict(self) -> StateDict:
        state: StateDict = {
            "schedule": self.schedule.state(self._yielded()),
            "passes": list(self.passes),
            "ended": list(self.ended),
            "active": list(self.active),
            "sources": [node.state_dict() if node is not None else None for node in self.nodes],
        }
        if self.stop != self.stage.stop:
            state["stop"] = self.stop
        if self.dealt is not None:
            state["dealt"] = self.dealt
        return state

    def _tell(self) -> Any:
        i = self.block[self._yielded() - 1]
        node = self.nodes[i]
        assert node is not None and node.tell is not None
        return [i, self.passes[i], node.tell()]

    def _node_at(self, i: int, passes: int) -> Node:
        node = self.nodes[i]
        if node is not None and self.passes[i] == passes:
            return node
        other = self.extra.get((i, passes))
        if other is None:  # an item of an earlier pass (or of a source that left) still downstream
            dealt = self.dealt[i] if self.dealt is not None else None
            own = dealt[1] if dealt is not None and int(dealt[0]) == passes else None
            other = self.extra[(i, passes)] = self.stage.source_node(i, passes, self.ctx, own)
        return other

    def item_at(self, token: Any) -> Any:
        i, passes, own = token
        return self._node_at(int(i), int(passes)).item_at(own)

    def items_at(self, tokens: list[Any]) -> list[Any]:
        groups: dict[tuple[int, int], list[int]] = {}
        for k, (i, passes, _) in enumerate(tokens):
            groups.setdefault((int(i), int(passes)), []).append(k)
        out: list[Any] = [None] * len(tokens)
        for (i, passes), ks in groups.items():
            items = self._node_at(i, passes).items_at([tokens[k][2] for k in ks])
            for k, item in zip(ks, items, strict=True):
                out[k] = item
        return out

    def close(self) -> None:
        close_iterator(self._it)
        for node in [*self.nodes, *self.extra.values()]:
            if node is not None:
                node.close()
        self.extra = {}
