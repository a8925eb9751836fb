"""Stages and pipelines: the stage contract, every built-in stage, the native Dataset.

Layering: this package builds on planning (:mod:`shardstream.shards`), sources, the cache,
formats (:mod:`shardstream.tar`) and decoders, and is used by the loader and the facades.
"""

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
from .dataset import Dataset, make_source
from .decode import Decode, decode
from .extra import Cached, CheckEmpty, associate, info, non_empty, xdecode
from .fields import Rename, ToTuple, extract_keys, getfirst, rename, rename_keys, to_tuple
from .fluent import FluidInterface, FluidWrapper
from .mapping import Map, MapDict, MapTuple, Select, map, map_dict, map_tuple, select, transform_with
from .pipeline import DataPipeline
from .planned import PlannedSamples
from .policy import CachePolicy, SplitPolicy
from .read import ReadShards, ShardFormat
from .sampling import resampled, rsample
from .shardlists import (
    ResampledShards,
    ShardShuffle,
    SimpleShardList,
    Splitter,
    shardspec,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from .shuffle import Shuffle, detshuffle, shuffle
from .window import MockDataset, repeatedly, slice, with_epoch, with_length

__all__ = [
    "Batched",
    "CachePolicy",
    "Cached",
    "CheckEmpty",
    "DataPipeline",
    "Dataset",
    "Decode",
    "Expand",
    "FluidInterface",
    "FluidWrapper",
    "FunctionStage",
    "IterNode",
    "Map",
    "MapDict",
    "MapStage",
    "MapTuple",
    "MockDataset",
    "Node",
    "PipelineStage",
    "PlannedSamples",
    "ReadShards",
    "Rename",
    "ResampledShards",
    "RunContext",
    "Select",
    "ShardFormat",
    "ShardShuffle",
    "Shuffle",
    "SimpleShardList",
    "SplitPolicy",
    "Splitter",
    "Stage",
    "StageStats",
    "StateDict",
    "ToTuple",
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
    "make_source",
    "map",
    "map_dict",
    "map_tuple",
    "non_empty",
    "pipelinefilter",
    "rename",
    "rename_keys",
    "repeatedly",
    "resampled",
    "rsample",
    "select",
    "shardspec",
    "shuffle",
    "single_node_only",
    "slice",
    "split_by_node",
    "split_by_worker",
    "to_tuple",
    "transform_with",
    "unbatched",
    "unlisted",
    "with_epoch",
    "with_length",
    "xdecode",
]
