"""The base of the nodes that read samples through their stage's source (shards, planned runs)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import StateError, redact_url
from ..pipeline.base import Node, StateDict
from ..sources import Source
from ..tar.grouping import Cursor

__all__ = ["Pin", "ReadingNode", "pin_of", "pinned", "verified"]

#: A saved position's proof of what the shard held: (key of the sample before it, its offset).
Pin = tuple[str, int]


def pinned(state: StateDict, cursor: Cursor) -> StateDict:
    """``state`` (which saves ``cursor.next`` as ``"offset"``) plus the key and offset of the
    sample just yielded, so a restore can check the shard still holds it there."""
    if cursor.next >= 0 and cursor.key is not None:
        state["key"], state["at"] = cursor.key, cursor.start
    return state


def pin_of(state: StateDict) -> Pin | None:
    """The pin saved by :func:`pinned`, or ``None`` (a state from before pins: not checked)."""
    key, at = state.get("key"), state.get("at")
    return (str(key), int(at)) if key is not None and at is not None else None


def verified(
    samples: Iterator[dict[str, Any]], cursor: Cursor, url: str, pin: Pin, offset: int
) -> Iterator[dict[str, Any]]:
    """``samples`` read from the pin's offset, less the first, after checking that the first is
    the pinned sample and that the next one starts at ``offset``: a shard rewritten under the same
    name since the state was saved is refused instead of read from a stale offset.

    Raises:
        StateError: naming the shard, the offset, the key expected and the key found.
    """
    key, at = pin
    try:
        first = next(samples, None)
    except Exception as exc:  # no sample boundary at the saved offset any more
        found = f"no readable sample ({exc})"
    else:
        if first is not None and first["__key__"] == key and cursor.next == offset:
            yield from samples
            return
        found = "the end of the shard" if first is None else f"key {first['__key__']!r}"
    raise StateError(
        f"shard {redact_url(url)} changed since the state was saved: at byte {at} it held sample "
        f"{key!r} (the next one at byte {offset}), now {found}. Restore with the shards the state "
        "was saved with, or call .if_shards_changed('restart') on the pipeline to start that "
        "epoch afresh when its shards were rewritten."
    )


class ReadingNode(Node):
    """A node whose ``stage`` reads through ``stage.source``: it provides
    :class:`~shardstream.pipeline.seams.ReadsSource`, so telemetry can time its I/O."""

    stage: Any

    def read_through(self, wrap: Callable[[Source], Source]) -> Source:
        stage = self.stage
        stage.stats  # noqa: B018 - create the skip counters now, so that the copy shares them
        timed = copy.copy(stage)
        timed.source = wrap(stage.source)
        self.stage = timed
        source: Source = stage.source
        return source
