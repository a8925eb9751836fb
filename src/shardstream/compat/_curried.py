"""WebDataset's function forms of its stages and the small helpers ``webdataset.filters`` defines.

WebDataset writes each stage as a generator function ``_name(data, *args, **kw)`` and curries
it (``name = pipelinefilter(_name)``). Code written for it calls the ``_``-prefixed function
forms directly (``_batched(iter(data), batchsize=3)``); here each one applies shardstream's
stage to ``data``, so it behaves as the stage does (seeded shuffles, named missing fields).
"""

from __future__ import annotations

import fnmatch
import functools
import random
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..errors import redact_url
from ..pipeline.annotate import associate, info
from ..pipeline.batch import batched, unbatched, unlisted
from ..pipeline.decode import decode
from ..pipeline.fields import extract_keys, rename, rename_keys, to_tuple
from ..pipeline.log_keys import log_keys
from ..pipeline.mapping import map, map_dict, map_tuple, select
from ..pipeline.sampling import rsample
from ..pipeline.shuffle import shuffle
from ._xdecode import xdecode

__all__ = [
    "FilterFunction",
    "RestCurried",
    "combine_values",
    "compose",
    "compose2",
    "dict2tuple",
    "find_decoder",
    "parse_field_spec",
    "pick",
    "pipeline",
    "tuple2dict",
]


def _function_form(factory: Callable[..., Any], name: str) -> Callable[..., Iterator[Any]]:
    def apply(data: Iterable[Any], *args: Any, **kw: Any) -> Iterator[Any]:
        result: Iterator[Any] = factory(*args, **kw)(data)
        return result

    apply.__name__ = apply.__qualname__ = name
    apply.__doc__ = f"WebDataset's ``{name}(data, ...)``: ``{factory.__name__}(...)`` applied to data."
    return apply


_associate = _function_form(associate, "_associate")
_batched = _function_form(batched, "_batched")
_decode = _function_form(decode, "_decode")
_extract_keys = _function_form(extract_keys, "_extract_keys")
_info = _function_form(info, "_info")
_log_keys = _function_form(log_keys, "_log_keys")
_map = _function_form(map, "_map")
_map_dict = _function_form(map_dict, "_map_dict")
_map_tuple = _function_form(map_tuple, "_map_tuple")
_rename = _function_form(rename, "_rename")
_rename_keys = _function_form(rename_keys, "_rename_keys")
_rsample = _function_form(rsample, "_rsample")
_select = _function_form(select, "_select")
_shuffle = _function_form(shuffle, "_shuffle")
_to_tuple = _function_form(to_tuple, "_to_tuple")
_unbatched = _function_form(unbatched, "_unbatched")
_unlisted = _function_form(unlisted, "_unlisted")
_xdecode = _function_form(xdecode, "_xdecode")


class FilterFunction:
    """``f`` with all arguments but the first bound: ``FilterFunction(f, *a)(data) == f(data, *a)``."""

    def __init__(self, f: Callable[..., Any], *args: Any, **kw: Any) -> None:
        self.f = f
        self.args = args
        self.kw = kw

    def __call__(self, data: Any) -> Any:
        return self.f(data, *self.args, **self.kw)

    def __repr__(self) -> str:  # (its arguments may be URLs or storage options: redacted)
        return f"<{getattr(self.f, '__name__', self.f)} {redact_url(self.args)} {redact_url(self.kw)}>"

    __str__ = __repr__


class RestCurried:
    """WebDataset's curried stage factory: ``RestCurried(f)(*a, **k)`` is a :class:`FilterFunction`."""

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f

    def __call__(self, *args: Any, **kw: Any) -> FilterFunction:
        return FilterFunction(self.f, *args, **kw)


def compose2(f: Callable[[Any], Any], g: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``g(f(x))``."""
    return lambda x: g(f(x))


def compose(*args: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The functions composed left to right."""
    return functools.reduce(compose2, args)


def pipeline(source: Any, *args: Callable[[Any], Any]) -> Any:
    """``source`` passed through the filters ``args`` in order."""
    return compose(*args)(source) if args else source


def parse_field_spec(fields: str | list[str]) -> list[list[str]]:
    """``"jpg;png cls"`` -> ``[["jpg", "png"], ["cls"]]`` (keys split by spaces, alternatives by ``;``)."""
    if isinstance(fields, str):
        fields = fields.split()
    return [field.split(";") for field in fields]


def pick(buf: list[Any], rng: random.Random) -> Any:
    """Remove and return a random item of ``buf`` (the last item takes its place)."""
    k = rng.randint(0, len(buf) - 1)
    sample = buf[k]
    buf[k] = buf[-1]
    buf.pop()
    return sample


def combine_values(b: Any, combine_tensors: bool = True, combine_scalars: bool = True) -> Any:
    """One batch column: numbers -> a NumPy array, tensors/arrays of one shape -> stacked, else a list."""
    first = b[0]
    if isinstance(first, (int, float)):
        return np.array(list(b)) if combine_scalars else b
    if type(first).__module__.startswith("torch") and hasattr(first, "shape"):
        if not combine_tensors:
            return b
        import torch

        _one_shape(b)
        return torch.stack(list(b))
    if isinstance(first, np.ndarray):
        if not combine_tensors:
            return b
        _one_shape(b)
        return np.array(list(b))
    return list(b)


def _one_shape(values: Any) -> None:
    shapes = {tuple(x.shape) for x in values}
    if len(shapes) != 1:
        raise ValueError(f"all shapes must be equal in collation, got {shapes}")


def tuple2dict(items: Any) -> dict[Any, Any]:
    """A tuple as ``{index: value}`` (a dict is returned as it is)."""
    return items if isinstance(items, dict) else dict(enumerate(items))


def dict2tuple(d: dict[int, Any]) -> tuple[Any, ...]:
    """``{0: a, 1: b}`` -> ``(a, b)``."""
    return tuple(d[i] for i in range(1 + max(d.keys())))


def find_decoder(decoders: list[tuple[str, Any]], path: str) -> Any:
    """The decoder of the last ``(pattern, decoder)`` pair matching ``path``'s file name, or None."""
    fname = re.sub(r".*/", "", path)
    if fname.startswith("__"):
        return lambda x: x
    for pattern, fun in decoders[::-1]:
        if fnmatch.fnmatch(fname.lower(), pattern) or fnmatch.fnmatch("." + fname.lower(), pattern):
            return fun
    return None
