"""One walk over a batch's structure, for the loaders' passes over the tensors in a batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["map_leaves"]


def map_leaves(data: Any, is_leaf: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """``data`` with every part for which ``is_leaf`` holds replaced by ``fn(part)``.

    Dicts, lists, tuples and namedtuples are rebuilt with their types (a dict as a plain dict);
    anything else is kept as it is. Serves the device copy, the shared-memory hand-off in a worker
    and the main side's turning of buffer references back into tensors.
    """
    if is_leaf(data):
        return fn(data)
    if isinstance(data, dict):
        return {k: map_leaves(v, is_leaf, fn) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        items = [map_leaves(v, is_leaf, fn) for v in data]
        if isinstance(data, tuple):
            return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)  # namedtuple
        return items
    return data
