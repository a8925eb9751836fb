"""Per-sample transformation stages: map, map_dict, map_tuple, select, transform_with.

Each is a :class:`~shardstream.pipeline.base.MapStage`: it provides the per-item function, and
the one guarded loop of the base applies it under the stage's error policy. What each does with
odd input follows WebDataset 1.0.2: ``map_dict`` on a missing field raises (a KeyError, here
:class:`~shardstream.errors.MissingFieldError`) into its handler; ``map_tuple`` applies as many
functions as both the tuple and the list have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import MissingFieldError
from ..handlers import Handler, reraise_exception
from .base import MapStage, RunContext

__all__ = ["Map", "MapDict", "MapTuple", "Select", "map", "map_dict", "map_tuple", "select", "transform_with"]


class Map(MapStage):
    """Apply ``f`` to every sample; a ``None`` result drops the sample.

    A dict result of a dict sample gets the sample's ``__key__`` (as in WebDataset).
    """

    kind = "map"
    drop_none = True

    def __init__(self, f: Callable[[Any], Any], handler: Handler = reraise_exception) -> None:
        self.f = f
        self.handler = handler

    def describe(self) -> str:
        return f"map {getattr(self.f, '__name__', None) or type(self.f).__name__}"

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        f = self.f

        def apply(sample: Any) -> Any:
            result = f(sample)
            if isinstance(sample, dict) and isinstance(result, dict):
                result["__key__"] = sample.get("__key__")
            return result

        return apply


class MapDict(MapStage):
    """Apply ``kw[field]`` to ``sample[field]`` for each named field of dict samples.

    A sample without one of the fields raises :class:`~shardstream.errors.MissingFieldError`
    into ``handler`` (WebDataset raises ``KeyError`` there).
    """

    kind = "map"
    label = "map_dict"

    def __init__(self, handler: Handler = reraise_exception, **kw: Callable[[Any], Any]) -> None:
        if not kw:
            raise ValueError("map_dict() needs at least one field=function argument")
        for field, f in kw.items():
            if not callable(f):
                raise TypeError(f"map_dict({field}=...) needs a function, got {type(f).__name__}")
        self.handler = handler
        self.fields = kw

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        items = list(self.fields.items())

        def apply(sample: Any) -> Any:
            sample = dict(sample)
            for field, f in items:
                try:
                    value = sample[field]
                except KeyError:
                    fields = sorted(k for k in sample if not k.startswith("__"))
                    raise MissingFieldError(
                        f"map_dict: sample {sample.get('__key__')!r} has no field {field!r} (it has "
                        f"{fields}); check the extensions in the shards"
                    ) from None
                sample[field] = f(value)
            return sample

        return apply


class MapTuple(MapStage):
    """Apply the i-th function to the i-th element of tuple samples (``None`` = identity).

    As in WebDataset, elements without a function are passed through and functions without an
    element are not called (``map_tuple(f)`` on ``(image, label)`` maps the image only).
    """

    kind = "map"
    label = "map_tuple"

    def __init__(self, *fs: Callable[[Any], Any] | None, handler: Handler = reraise_exception) -> None:
        for i, f in enumerate(fs):
            if f is not None and not callable(f):
                raise TypeError(f"map_tuple argument {i} must be a function or None, got {type(f).__name__}")
        self.fs = fs
        self.handler = handler

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        fs = self.fs

        def apply(sample: Any) -> Any:
            if not isinstance(sample, (list, tuple)):
                raise TypeError(
                    f"map_tuple needs tuple (or list) samples, got {type(sample).__name__}; "
                    "use to_tuple(...) before it, or map_dict for dict samples"
                )
            n = min(len(fs), len(sample))
            head = [x if f is None else f(x) for f, x in zip(fs[:n], sample[:n], strict=True)]
            return tuple(head) + tuple(sample[n:])

        return apply


class Select(MapStage):
    """Keep only samples for which ``predicate(sample)`` is true (its errors propagate)."""

    kind = "map"
    label = "select"

    drop_none = True

    def __init__(self, predicate: Callable[[Any], bool]) -> None:
        self.predicate = predicate
        self.handler = reraise_exception

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
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
    """Apply transformers element-wise to a tuple/list sample (WebDataset helper).

    Elements without a transformer (or with ``None``) are kept; more transformers than elements
    is an error.
    """
    if transformers is None or len(transformers) == 0:
        return list(sample)
    if len(transformers) > len(sample):
        raise ValueError(
            f"transform_with got {len(transformers)} transformers for a sample of {len(sample)} elements"
        )
    result = list(sample)
    for i, f in enumerate(transformers):
        if f is not None:
            result[i] = f(sample[i])
    return result
