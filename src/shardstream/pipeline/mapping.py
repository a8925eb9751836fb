"""Per-sample transformation stages: map, map_dict, map_tuple, select, transform_with."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .base import Stage
from ..handlers import Handler, reraise_exception

__all__ = ["Map", "MapDict", "MapTuple", "Select", "map", "map_dict", "map_tuple", "select", "transform_with"]


class Map(Stage):
    """Apply ``f`` to every sample; a ``None`` result drops the sample."""

    def __init__(self, f: Callable[[Any], Any], handler: Handler = reraise_exception) -> None:
        self.f = f
        self.handler = handler

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        f = self.f
        for sample in src:
            try:
                result = f(sample)
            except Exception as exn:
                if self.handle(self.handler, exn):
                    continue
                break
            if result is None:
                continue
            if isinstance(sample, dict) and isinstance(result, dict) and "__key__" in sample:
                result.setdefault("__key__", sample["__key__"])
            yield result


class MapDict(Stage):
    """Apply ``kw[field]`` to ``sample[field]`` for each named field of dict samples."""

    def __init__(self, handler: Handler = reraise_exception, **kw: Callable[[Any], Any]) -> None:
        self.handler = handler
        self.fields = kw

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        items = list(self.fields.items())
        for sample in src:
            try:
                sample = dict(sample)
                for field, f in items:
                    if field in sample:
                        sample[field] = f(sample[field])
            except Exception as exn:
                if self.handle(self.handler, exn):
                    continue
                break
            yield sample


class MapTuple(Stage):
    """Apply the i-th function to the i-th element of tuple samples (``None`` = identity)."""

    def __init__(self, *fs: Callable[[Any], Any] | None, handler: Handler = reraise_exception) -> None:
        self.fs = fs
        self.handler = handler

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        fs = self.fs
        for sample in src:
            try:
                if len(sample) != len(fs):
                    raise ValueError(
                        f"map_tuple got {len(fs)} functions for a sample of {len(sample)} elements; "
                        "pass one function (or None) per element"
                    )
                result = tuple(x if f is None else f(x) for f, x in zip(fs, sample, strict=True))
            except Exception as exn:
                if self.handle(self.handler, exn):
                    continue
                break
            yield result


class Select(Stage):
    """Keep only samples for which ``predicate(sample)`` is true."""

    def __init__(self, predicate: Callable[[Any], bool]) -> None:
        self.predicate = predicate

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        return filter(self.predicate, src)


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
