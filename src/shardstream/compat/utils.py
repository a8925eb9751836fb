"""WebDataset-compatible ``utils`` namespace."""

from __future__ import annotations

from typing import Any

from ..pipeline.base import PipelineStage
from ..pipeline.window import repeatedly
from ..shards.world import World, derive_seed

__all__ = [
    "PipelineStage",
    "identity",
    "is_iterable",
    "make_seed",
    "pytorch_worker_info",
    "pytorch_worker_seed",
    "repeatedly",
]


def pytorch_worker_info(group: Any = None) -> tuple[int, int, int, int]:
    """``(rank, world_size, worker, num_workers)`` of the calling process."""
    world = World.current(group)
    return world.rank, world.world_size, world.worker, world.num_workers


def pytorch_worker_seed(group: Any = None) -> int:
    """A seed that differs per rank and worker (stable across runs)."""
    world = World.current(group)
    return derive_seed(None, "worker", world.rank, world.worker) & 0x7FFFFFFF


def make_seed(*args: Any) -> int:
    """A 31-bit seed from arbitrary values."""
    return derive_seed(0, *args) & 0x7FFFFFFF


def identity(x: Any) -> Any:
    return x


def is_iterable(obj: Any) -> bool:
    if isinstance(obj, (str, bytes)):
        return False
    try:
        iter(obj)
    except TypeError:
        return False
    return True
