"""The front doors: the datasets users construct.

* :class:`ShardStream` (:mod:`.shard_stream`): shards from a spec, with a split and a cache policy;
* :class:`ObjectStream` (:mod:`.object_stream`): an iterable dataset over single-sample objects;
* :class:`ObjectDataset` (:mod:`.object_dataset`): the map-style dataset over the same objects;
* :class:`Mix` (:mod:`.mix`): several datasets interleaved in set proportions, resumably;
* :class:`ShardDataset` (:mod:`.shard_dataset`): the map-style dataset over tar shards, by byte range;
* :class:`SplitPolicy`, :class:`CachePolicy` (:mod:`.policy`): validated, frozen options;
* :func:`resolve_shards` (:mod:`.specs`): the one grammar of shard specs every front door (and
  the command line) resolves with, checked before the first sample;
* :mod:`.options`: the one translation of both spellings of the options (shardstream's and
  WebDataset's) that ``ShardStream`` and ``WebDataset`` share.

Layering: builds on everything below (readers, stages, cache, sources, formats); used by the
loader's users and the facades. Names are imported on first access (PEP 562): the command line
resolves specs with :mod:`.specs`, which needs no torch, and importing this package must not pull
torch in through the datasets' pipelines.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .mix import Mix
    from .object_dataset import ObjectDataset
    from .object_stream import ObjectStream
    from .policy import CachePolicy, SplitPolicy
    from .shard_dataset import ShardDataset
    from .shard_stream import ShardStream, make_source
    from .specs import resolve_shards

__all__ = [
    "CachePolicy",
    "ShardStream",
    "Mix",
    "ObjectDataset",
    "ObjectStream",
    "ShardDataset",
    "SplitPolicy",
    "make_source",
    "resolve_shards",
]

#: name -> the module of this package that defines it.
_MODULES = {
    "CachePolicy": "policy",
    "ShardStream": "shard_stream",
    "Mix": "mix",
    "ObjectDataset": "object_dataset",
    "ObjectStream": "object_stream",
    "ShardDataset": "shard_dataset",
    "SplitPolicy": "policy",
    "make_source": "shard_stream",
    "resolve_shards": "specs",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
