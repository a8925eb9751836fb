"""How a pipeline builds one epoch: nodes from stages, a nested pipeline as one node, the live pass."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import FunctionStage, IterNode, Node, RunContext, Stage, StateDict

__all__ = ["ChainNode", "Pass", "build_one"]


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
