"""How a pipeline builds one epoch: nodes from stages, a nested pipeline as one node, the live pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import StateError
from .base import FunctionStage, IterNode, MapStage, Node, RunContext, Stage, StateDict
from .instrument import instrument, instrument_run
from .parallel import build_parallel
from .trace import trace_node

__all__ = ["ChainNode", "Pass", "build_nodes", "build_one"]


class ChainNode(Node):
    """A nested pipeline's nodes, built with the outer pipeline's context, as one node."""

    def __init__(self, nodes: list[Node]) -> None:
        super().__init__(nodes[0].upstream if nodes else None)
        self.nodes = nodes
        last = nodes[-1]
        self.stateful = all(n.stateful for n in nodes)
        self.tell = last.tell
        self.indexable = last.indexable
        self.item = last.item  # type: ignore[method-assign]
        self.item_at = last.item_at  # type: ignore[method-assign]
        self.items_at = last.items_at  # type: ignore[method-assign]
        self._it = iter(last)

    def state_dict(self) -> StateDict:
        return {"nodes": [n.state_dict() for n in self.nodes]}

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.close()


class Pass:
    """The nodes of the running pass, for :meth:`DataPipeline.state_dict`."""

    __slots__ = ("epoch", "nodes", "stateful", "count", "done")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.nodes: list[Node] | None = None
        self.stateful = True
        self.count = 0
        self.done = False


def build_one(f: Any, upstream: Node | None, ctx: RunContext, state: StateDict | None) -> Node:
    if isinstance(f, Stage) or hasattr(f, "_build_nodes"):  # a stage, or a nested pipeline
        return f.build(upstream, ctx, state)  # type: ignore[no-any-return]
    if upstream is None:
        if isinstance(f, Iterable):
            return IterNode(f, state)
        if callable(f):
            return IterNode(f())
        raise TypeError(f"{f!r} cannot start a pipeline: pass an iterable or a callable returning one")
    if callable(f):
        return FunctionStage(f).build(upstream, ctx, state)
    raise TypeError(f"{f!r} is not a pipeline stage: stages are callables taking an iterator")


def _contexts(stages: Sequence[Any], ctx: RunContext) -> list[RunContext]:
    """Each stage's context: ``fills`` stays on only for the stages after which every stage
    passes values through unread (``Stage.passes_values``), so only a decode whose output
    reaches the loader's collation untouched may defer it (``decoders/deferred.py``)."""
    if not ctx.fills:
        return [ctx] * len(stages)
    first = len(stages)  # the first stage from which every later one passes values
    while first > 0 and isinstance(stages[first - 1], Stage) and stages[first - 1].passes_values:
        first -= 1
    plain = dataclasses.replace(ctx, fills=False)
    return [ctx if i >= first - 1 else plain for i in range(len(stages))]


def build_nodes(
    stages: Sequence[Any], upstream: Node | None, ctx: RunContext, states: list[StateDict] | None
) -> list[Node]:
    """One node per stage for one pass (``states``: the saved ones, one per stage), timed when
    telemetry is on, traced when ``ctx.trace`` is set; with ``ctx.threads``, each run of map
    stages is one node on those threads."""
    if states is not None and len(states) != len(stages):
        raise StateError(
            f"the saved state has {len(states)} stages but this pipeline has {len(stages)}; "
            "restore it into the pipeline it was saved from"
        )
    contexts = _contexts(stages, ctx)
    nodes: list[Node] = []
    node, i = upstream, 0
    while i < len(stages):
        f, state = stages[i], states[i] if states is not None else None
        try:
            if ctx.threads is not None and node is not None and isinstance(f, MapStage):
                # A run of per-sample stages: one node on the loader's threads (parallel.py).
                j = i + 1
                while j < len(stages) and isinstance(stages[j], MapStage):
                    j += 1
                run = build_parallel(stages[i:j], node, ctx, state, contexts[i:j])
                node = run[-1]
                nodes.extend(run[:-1])
                if ctx.telemetry is not None:
                    instrument_run(ctx.telemetry, node, stages[i:j], contexts[i:j])
                f, i = stages[j - 1], j  # the run's node yields its last stage's items
            else:
                node = build_one(f, node, contexts[i], state)
                if ctx.telemetry is not None:
                    instrument(ctx.telemetry, node, f, contexts[i])
                i += 1
            if ctx.trace is not None:
                trace_node(ctx.trace, node, f)
        except BaseException:
            for built in reversed(nodes):
                built.close()
            raise
        nodes.append(node)
    if not nodes:
        raise ValueError("an empty DataPipeline has no source; pass a shard list or dataset first")
    return nodes
