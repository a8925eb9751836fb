"""Stages that check an epoch is not empty: ``non_empty`` and ``CheckEmpty`` (with a message that
says what to check, and silence for a worker that simply got no shard)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import ConfigurationError
from ..pipeline.base import Node, RunContext, Stage, StateDict
from .shardlists import idle_worker

__all__ = ["CheckEmpty", "non_empty"]


class _NonEmptyNode(Node):
    def __init__(self, upstream: Node, state: StateDict | None) -> None:
        super().__init__(upstream)
        self.seen = bool((state or {}).get("seen", False))
        self.tell = upstream.tell
        self.item_at = upstream.item_at  # type: ignore[method-assign]
        self.items_at = upstream.items_at  # type: ignore[method-assign]
        self._it = self._run()

    def _run(self) -> Iterator[Any]:
        assert self.upstream is not None
        for item in self.upstream:
            self.seen = True
            yield item
        if not self.seen:
            raise ValueError("the shard list is empty; check the spec (pipeline stage non_empty)")

    def state_dict(self) -> StateDict:
        return {"seen": self.seen}


class _NonEmpty(Stage):
    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("non_empty needs an upstream stage")
        return _NonEmptyNode(upstream, state)


class _CheckEmptyNode(_NonEmptyNode):
    def __init__(self, upstream: Node, ctx: RunContext, nshards: int | None, state: StateDict | None) -> None:
        self.ctx, self.nshards = ctx, nshards
        super().__init__(upstream, state)

    def _run(self) -> Iterator[Any]:
        assert self.upstream is not None
        # Peek at the first item, then delegate with ``yield from`` (a C-level loop) instead of
        # counting every item in Python.
        src = iter(self.upstream)
        if not self.seen:
            first = next(src, _END)
            if first is _END:
                if idle_worker(self.upstream):  # no shard for this worker; the others hold the epoch
                    return
                world = self.ctx.world
                raise ConfigurationError(
                    f"no samples in this epoch for rank {world.rank}/{world.world_size}, worker "
                    f"{world.worker}/{world.num_workers} ({self.nshards} shards in the spec). Check that "
                    "the shards are non-empty tar files with dotted member names (key.ext), and that "
                    "there are at least as many shards as ranks x workers. Pass empty_check=False if "
                    "an empty epoch is expected."
                )
            self.seen = True
            yield first
        yield from src


class CheckEmpty(Stage):
    """Raise a clear error when an epoch yields nothing (``nshards``: for the message)."""

    kind = "shards"
    label = "check empty"

    def __init__(self, nshards: int | None = None) -> None:
        self.nshards = nshards

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("CheckEmpty needs an upstream stage")
        return _CheckEmptyNode(upstream, ctx, self.nshards, state)


_END = object()

non_empty = _NonEmpty()
"""Pass items through; raise if there were none (usable as ``non_empty(src)`` too)."""
