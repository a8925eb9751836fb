"""Random sampling stages: rsample (keep each item with probability p) and resampled (draw with
replacement). Both are seeded per (seed, epoch, rank, worker) and save their draw counters."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from ..shards.world import derive_seed
from .base import DrawNode, Node, RunContext, Stage, StateDict
from .shuffle import _draws

__all__ = ["resampled", "rsample"]


class _RandomSampleNode(Node):
    def __init__(
        self, stage: _RandomSample, upstream: Node, ctx: RunContext, state: StateDict | None
    ) -> None:
        super().__init__(upstream)
        self.draws = int((state or {}).get("draws", 0))
        self.tell = upstream.tell
        self.item_at = upstream.item_at  # type: ignore[method-assign]
        self.items_at = upstream.items_at  # type: ignore[method-assign]
        self._it = self._run(stage.p, ctx.derive(None, "rsample"))

    def _run(self, p: float, seed: int) -> Iterator[Any]:
        assert self.upstream is not None
        draws = _draws(seed, self.draws)
        for item in self.upstream:
            self.draws += 1
            if next(draws) < p:
                yield item

    def state_dict(self) -> StateDict:
        return {"draws": self.draws}


class _RandomSample(Stage):
    passes_values = True

    def __init__(self, p: float) -> None:
        self.p = p

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("rsample needs an upstream stage")
        return _RandomSampleNode(self, upstream, ctx, state)


def rsample(p: float = 0.5) -> Stage:
    """Keep each sample with probability ``p`` (seeded per epoch, rank and worker)."""
    return _RandomSample(p)


class _Resampled(Stage):
    def __init__(self, n: int = sys.maxsize) -> None:
        self.n = n

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("resampled needs an upstream stage")
        listed = getattr(upstream, "items", None)
        items = list(listed if listed is not None else upstream)
        base = derive_seed(None, "resampled", ctx.world.rank, ctx.world.worker)
        return DrawNode(items, base, self.n, state, upstream=upstream)


def resampled(n: int = sys.maxsize) -> Stage:
    """Draw ``n`` items with replacement from the (finite) upstream list, seeded per rank/worker."""
    return _Resampled(n)
