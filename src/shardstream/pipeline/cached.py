"""``Cached``: keep the samples of the first pass in memory and replay them on later passes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import Node, RunContext, Stage, StateDict

__all__ = ["Cached"]


class _CachedNode(Node):
    stateful = False  # the first pass's samples live in memory only

    def __init__(self, stage: Cached, upstream: Node) -> None:
        super().__init__(upstream)
        self._it = self._run(stage)

    def _run(self, stage: Cached) -> Iterator[Any]:
        if stage.cached is not None:
            yield from stage.cached
            return
        assert self.upstream is not None
        collected: list[Any] = []
        for sample in self.upstream:
            collected.append(sample)
            yield sample
        stage.cached = collected


class Cached(Stage):
    """Keep the samples of the first pass in memory and replay them on later passes."""

    def __init__(self) -> None:
        self.cached: list[Any] | None = None

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("Cached needs an upstream stage")
        return _CachedNode(self, upstream)
