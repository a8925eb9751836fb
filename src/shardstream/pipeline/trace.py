"""A pass's item trace: every node reports each item it yields, with that item's position.

A loader that loses the same worker twice at one position runs the worker's share once more in a
sacrificial process with a trace (``loader/_diagnose.py``): the last item reported before that
process died (or stalled) is the one the next stage was making. Positions are the nodes' ``tell``
tokens (a reader's ``[shard number, byte offset]``; a shuffle buffer and the one-to-one stages
forward their input's; a mixture's wraps its source's), so an item that has lost its key (after
``to_tuple``) is still named by the raw sample it came from.

Nothing is traced unless a run asks (``RunOptions.trace``): a pass without a trace builds exactly
the nodes it builds otherwise, so the normal path pays nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from ._epochs import EpochOwner
from .base import Node
from .labels import stage_kind, stage_label

__all__ = ["BUILT", "Trace", "trace_node"]

#: Called for each item a traced node yields: ``(node number in build order, the stage's label,
#: the stage's kind, the item's position or None, the item)``; and once when the node is built,
#: with :data:`BUILT` as the item (so a stage that never yielded is known by its label).
Trace = Callable[[int, str, str, Any, Any], None]
#: The item a :data:`Trace` is called with when a node is built.
BUILT: Any = object()


_numbers = itertools.count()  # the traced nodes of this process, in the order they are built


def trace_node(trace: Trace, node: Node, stage: Any) -> None:
    """Report each item ``node`` (just built from ``stage``) yields to ``trace``."""
    if isinstance(stage, EpochOwner):
        return  # a nested pipeline: its own nodes were traced as they were built
    number, label, kind = next(_numbers), stage_label(stage), stage_kind(stage)
    trace(number, label, kind, None, BUILT)
    node._it = _traced(node._it, node, trace, number, label, kind)


def _traced(it: Iterator[Any], node: Node, trace: Trace, number: int, label: str, kind: str) -> Iterator[Any]:
    try:
        for item in it:
            tell = node.tell
            trace(number, label, kind, tell() if tell is not None else None, item)
            yield item
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
