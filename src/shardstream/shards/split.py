"""Splitting shards over ranks and DataLoader workers.

The arithmetic (:func:`take_every`) is a pure function; :func:`split_by_node`,
:func:`split_by_worker` and :func:`single_node_only` keep WebDataset's meaning and signatures
and read the current :class:`World` only to choose their slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from ..errors import SplitError
from .world import World

__all__ = ["single_node_only", "split_by_node", "split_by_worker", "take_every"]

T = TypeVar("T")


def take_every(src: Iterable[T], index: int, count: int, *, what: str = "reader") -> Iterator[T]:
    """Items ``index, index + count, ...`` of ``src``, lazily (works on endless streams).

    Raises:
        SplitError: when this reader gets nothing because ``src`` has fewer items than ``count``.
    """
    seen = 0
    taken = 0
    for i, item in enumerate(src):
        seen = i + 1
        if i % count == index:
            taken += 1
            yield item
    if taken == 0 and 0 < seen < count:
        raise SplitError(
            f"{what} {index} of {count} got no shards: the dataset has {seen} shards for {count} "
            f"{what}s. Use at most {seen} {what}s (e.g. fewer DataLoader workers), more shards, "
            "or resampled=True."
        )


def split_by_node(src: Iterable[dict[str, Any]], group: Any = None) -> Iterator[dict[str, Any]]:
    """This rank's share of the shards: every ``world_size``-th shard starting at ``rank``."""
    world = World.current(group)
    if world.world_size == 1:
        return iter(src)
    return take_every(src, world.rank, world.world_size, what="rank")


def split_by_worker(src: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """This DataLoader worker's share of the shards (all of them in the main process)."""
    world = World.current()
    if world.num_workers == 1:
        return iter(src)
    return take_every(src, world.worker, world.num_workers, what="worker")


def single_node_only(src: Iterable[dict[str, Any]], group: Any = None) -> Iterator[dict[str, Any]]:
    """Pass shards through in a single process; raise under multi-rank training.

    Reading the same shards on every rank silently duplicates data, so this refuses.
    """
    world = World.current(group)
    if world.world_size > 1:
        raise SplitError(
            f"this pipeline reads every shard on each of {world.world_size} ranks (nodesplitter="
            "single_node_only). Pass nodesplitter=split_by_node to give each rank its own shards, "
            "or resampled=True to draw shards at random on every rank."
        )
    return iter(src)
