"""Composable stages and the explicit DataPipeline (the fluent WebDataset is in ``fluent``)."""

from .base import FunctionStage, PipelineStage, Stage, StageStats, pipelinefilter
from .batch import batched, default_collation_fn, listed, unbatched, unlisted
from .decode import decode
from .fields import extract_keys, getfirst, rename, rename_keys, to_tuple
from ..handlers import (
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from .mapping import map, map_dict, map_tuple, select, transform_with
from .pipeline import DataPipeline
from .shuffle import detshuffle, shuffle

__all__ = [
    "DataPipeline",
    "FunctionStage",
    "PipelineStage",
    "Stage",
    "StageStats",
    "batched",
    "decode",
    "default_collation_fn",
    "detshuffle",
    "extract_keys",
    "getfirst",
    "ignore_and_continue",
    "ignore_and_stop",
    "listed",
    "map",
    "map_dict",
    "map_tuple",
    "pipelinefilter",
    "rename",
    "rename_keys",
    "reraise_exception",
    "select",
    "shuffle",
    "to_tuple",
    "transform_with",
    "unbatched",
    "unlisted",
    "warn_and_continue",
    "warn_and_stop",
]
