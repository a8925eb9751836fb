"""WebDataset-compatible ``filters`` namespace: the curried stage functions (thin re-exports)."""

from ..handlers import reraise_exception
from ..pipeline.annotate import associate, info
from ..pipeline.base import PipelineStage, pipelinefilter
from ..pipeline.batch import batched, default_collation_fn, listed, unbatched, unlisted
from ..pipeline.cached import Cached
from ..pipeline.decode import decode
from ..pipeline.fields import extract_keys, getfirst, rename, rename_keys, to_tuple
from ..pipeline.log_keys import log_keys
from ..pipeline.mapping import map, map_dict, map_tuple, select, transform_with
from ..pipeline.sampling import rsample
from ..pipeline.shuffle import detshuffle, shuffle
from ..pipeline.window import slice
from ._xdecode import decode_bin, decode_pickle, decode_text, default_decoders, xdecode
from .utils import identity

__all__ = [
    "Cached",
    "PipelineStage",
    "associate",
    "batched",
    "decode",
    "decode_bin",
    "decode_pickle",
    "decode_text",
    "default_collation_fn",
    "default_decoders",
    "detshuffle",
    "extract_keys",
    "getfirst",
    "identity",
    "info",
    "listed",
    "log_keys",
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
    "xdecode",
]
