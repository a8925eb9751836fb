"""Per-sample transformation stages: map, map_dict, map_tuple, select, transform_with.

Each is a :class:`~shardstream.pipeline.base.MapStage`: it provides the per-item function, and
the one guarded loop of the base applies it under the stage's error policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..handlers import Handler, reraise_exception
from .base import MapStage

__all__ = ["Map", "MapDict", "MapTuple", "Select", "map", "map_dict", "map_tuple", "select", "transform_with"]


class Map(MapStage):
    """Apply ``f`` to every sample; a ``None`` result drops the sample."""

    drop_none = True

    def __init__(self, f: Callable[[Any], Any], handler: Handler = reraise_exception) -> None:
        self.f = f
        self.handler = handler

    def function(self) -> Callable[[Any], Any]:
        f = self.f

        def apply(sample: Any) -> Any:
            result = f(sample)
            if isinstance(sample, dict) and isinstance(result, dict) and "__key__" in sample:
                result.setdefault("__key__", sample["__key__"])
            return result

        return apply


class MapDict(MapStage):
    """Apply ``kw[field]`` to ``sample[field]`` for each named field of dict samples."""

    def __init__(self, handler: Handler = reraise_exception, **kw: Callable[[Any], Any]) -> None:
        self.handler = handler
        self.fields = kw

    def function(self) -> Callable[[Any], Any]:
        items = list(self.fields.items())

        def apply(sample: Any) -> Any:
            sample = dict(sample)
            for field, f in items:
                if field in sample:
                    sample[field] = f(sample[field])
            return sample

        return apply


class MapTuple(MapStage):
    """Apply the i-th function to the i-th element of tuple samples (``None`` = identity)."""

    def __init__(self, *fs: Callable[[Any], Any] | None, handler: Handler = reraise_exception) -> None:
        self.fs = fs
        self.handler = handler

    def function(self) -> Callable[[Any], Any]:
        fs = self.fs

        def apply(sample: Any) -> Any:
            if len(sample) != len(fs):
                raise ValueError(
                    f"map_tuple got {len(fs)} functions for a sample of {len(sample)} elements; "
                    "pass one function (or None) per element"
                )
            return tuple(x if f is None else f(x) for f, x in zip(fs, sample, strict=True))

        return apply


class Select(MapStage):
    """Keep only samples for which ``predicate(sample)`` is true (its errors propagate)."""

    drop_none = True

    def __init__(self, predicate: Callable[[Any], bool]) -> None:
        self.predicate = predicate
        self.handler = reraise_exception

    def function(self) -> Callable[[Any], Any]:
        predicate = self.predicate
        return lambda sample: sample if predicate(sample) else None


def map(f: Callable[[Any], Any], handler: Handler = reraise_exception) -> Map:  # noqa: A001
    return Map(f, handler)


def map_dict(handler: Handler = reraise_exception, **kw: Callable[[Any], Any]) -> MapDict:
    return MapDict(handler, **kw)


def map_tuple(*fs: Callable[[Any], Any] | None, handler: Handler = reraise_exception) -> MapTuple:
    return MapTuple(*fs, handler=handler)


def select(predicate: Callable[[Any], bool]) -> Select:
    return Select(predicate)


def transform_with(
    sample: Sequence[Any], transformers: Sequence[Callable[[Any], Any] | None] | None
) -> list[Any]:
    """Apply transformers element-wise to a tuple/list sample (WebDataset helper)."""
    if transformers is None or len(transformers) == 0:
        return list(sample)
    result = list(sample)
    for i, f in enumerate(transformers):
        if f is not None:
            result[i] = f(sample[i % len(sample)]) if len(transformers) > len(sample) else f(sample[i])
    return result
