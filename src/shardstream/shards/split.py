"""Splitting shards over ranks and DataLoader workers: pure functions of (shards, world).

The stages that apply these per epoch are in :mod:`shardstream.readers.shardlists`
(``split_by_node``, ``split_by_worker``, ``single_node_only``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from ..errors import SplitError
from .world import World

__all__ = ["split_slice", "take_every"]

T = TypeVar("T")


def split_slice(world: World, by: str) -> tuple[int, int]:
    """``(index, count)`` of this reader: by ``"node"`` (rank) or by ``"worker"`` (DataLoader worker)."""
    if by == "node":
        return world.rank, world.world_size
    if by == "worker":
        return world.worker, world.num_workers
    raise ValueError(f"by={by!r} must be 'node' or 'worker'")


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
