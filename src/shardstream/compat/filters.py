"""WebDataset-compatible ``filters`` namespace: the curried stage functions (thin re-exports)."""

from ..handlers import reraise_exception
from ..pipeline.base import pipelinefilter
from ..pipeline.batch import batched, default_collation_fn, listed, unbatched, unlisted
from ..pipeline.decode import decode
from ..pipeline.extra import associate, info
from ..pipeline.fields import extract_keys, getfirst, rename, rename_keys, to_tuple
from ..pipeline.mapping import map, map_dict, map_tuple, select, transform_with
from ..pipeline.sampling import rsample
from ..pipeline.shuffle import detshuffle, shuffle
from ..pipeline.window import slice

__all__ = [
    "associate",
    "batched",
    "decode",
    "default_collation_fn",
    "detshuffle",
    "extract_keys",
    "getfirst",
    "info",
    "listed",
    "map",
    "map_dict",
    "map_tuple",
    "pipelinefilter",
    "rename",
    "rename_keys",
    "reraise_exception",
    "rsample",
    "select",
    "shuffle",
    "slice",
    "to_tuple",
    "transform_with",
    "unbatched",
    "unlisted",
]
