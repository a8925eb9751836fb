"""The stage contract and the sample stages.

:mod:`.base` holds the contract (a :class:`Stage` is configuration, a :class:`Node` its running
iterator, a :class:`RunContext` the epoch, world and seed they share); :class:`DataPipeline`
chains stages; the other modules are one family of sample stages each (batch, fields, mapping,
decode, shuffle, window, sampling, annotate, cached). The stages that *start* a pipeline (shard
lists, shard and object readers) are in :mod:`shardstream.readers`; the front doors (``ShardStream``,
``ObjectStream``, ``ObjectDataset``) in :mod:`shardstream.datasets`.

Layering: builds on planning (:mod:`shardstream.shards`), telemetry, the sources (types only)
and the decoders; used by the readers, the datasets, the loader and the facades.
"""

from typing import Any

from .annotate import associate, info
from .base import (
    FunctionStage,
    IterNode,
    MapStage,
    Node,
    PipelineStage,
    RunContext,
    Stage,
    StageStats,
    StateDict,
    guarded,
    pipelinefilter,
)
from .batch import Batched, Expand, batched, default_collation_fn, listed, unbatched, unlisted
from .cached import Cached
from .decode import Decode, decode
from .fields import Rename, ToTuple, extract_keys, getfirst, rename, rename_keys, to_tuple
from .fluent import FluidInterface, FluidWrapper
from .iterable import IterableDatasetBase, require_torch
from .mapping import Map, MapDict, MapTuple, Select, map, map_dict, map_tuple, select, transform_with
from .pipeline import DataPipeline
from .sampling import resampled, rsample
from .seams import LoaderDataset, ReadsSource, Stateful
from .shuffle import Shuffle, detshuffle, shuffle
from .window import MockDataset, add_length_method, repeatedly, slice, with_epoch, with_length

__all__ = [
    "Batched",
    "Cached",
    "DataPipeline",
    "Decode",
    "Expand",
    "FluidInterface",
    "FluidWrapper",
    "FunctionStage",
    "IterNode",
    "LoaderDataset",
    "Map",
    "MapDict",
    "MapStage",
    "MapTuple",
    "MockDataset",
    "Node",
    "PipelineStage",
    "ReadsSource",
    "Rename",
    "RunContext",
    "Select",
    "Shuffle",
    "Stage",
    "StageStats",
    "StateDict",
    "Stateful",
    "ToTuple",
    "add_length_method",
    "associate",
    "batched",
    "decode",
    "default_collation_fn",
    "detshuffle",
    "extract_keys",
    "getfirst",
    "guarded",
    "info",
    "listed",
    "map",
    "map_dict",
    "map_tuple",
    "pipelinefilter",
    "rename",
    "rename_keys",
    "repeatedly",
    "resampled",
    "rsample",
    "select",
    "shuffle",
    "slice",
    "to_tuple",
    "transform_with",
    "unbatched",
    "unlisted",
    "with_epoch",
    "with_length",
]
assert sorted(__all__) == __all__


def __getattr__(name: str) -> Any:
    # WebDataset's ``pipeline`` module re-exports torch's DataLoader and IterableDataset, and
    # ``wds.pipeline`` is this package; resolved on first use, so that importing needs no torch.
    if name == "IterableDataset":
        return IterableDatasetBase
    if name == "DataLoader":
        require_torch("shardstream.pipeline.DataLoader")
        import torch.utils.data

        return torch.utils.data.DataLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
