"""WebDataset-compatible ``filters`` namespace: the curried stage functions (thin re-exports).

Also WebDataset's ``_``-prefixed function forms (``_batched(data, 3)``) and helpers (``pick``,
``compose``, ...) from :mod:`._curried`, and ``LMDBCached``, deliberately not provided.

WebDataset's module also binds what it imports (``fnmatch``, ``reduce`` and the ``autodecode`` and
``utils`` modules); so does this one, for code that reaches them through it.
"""

from __future__ import annotations

from fnmatch import fnmatch as fnmatch
from functools import reduce as reduce

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
from . import autodecode as autodecode
from . import utils as utils
from ._curried import (
    FilterFunction,
    RestCurried,
    _associate,
    _batched,
    _decode,
    _extract_keys,
    _info,
    _log_keys,
    _map,
    _map_dict,
    _map_tuple,
    _rename,
    _rename_keys,
    _rsample,
    _select,
    _shuffle,
    _to_tuple,
    _unbatched,
    _unlisted,
    _xdecode,
    combine_values,
    compose,
    compose2,
    dict2tuple,
    find_decoder,
    parse_field_spec,
    pick,
    pipeline,
    tuple2dict,
)
from ._omitted import omitted
from ._xdecode import decode_bin, decode_pickle, decode_text, default_decoders, xdecode
from .pytorch import torch_names
from .utils import identity

LMDBCached = omitted(
    "LMDBCached",
    "an LMDB cache of pickled samples (pickle runs code on read); use .mcached() for an in-memory "
    "cache, or cache_dir= to keep the shards on local disk",
)

_PRIVATE = (  # WebDataset's function forms, importable by name; not in __all__
    _associate, _batched, _decode, _extract_keys, _info, _log_keys, _map, _map_dict, _map_tuple,
    _rename, _rename_keys, _rsample, _select, _shuffle, _to_tuple, _unbatched, _unlisted, _xdecode,
)  # fmt: skip

__all__ = [  # noqa: F822 - TorchTensor is resolved by __getattr__
    "Cached",
    "FilterFunction",
    "LMDBCached",
    "PipelineStage",
    "RestCurried",
    "TorchTensor",
    "associate",
    "batched",
    "combine_values",
    "compose",
    "compose2",
    "decode",
    "decode_bin",
    "decode_pickle",
    "decode_text",
    "default_collation_fn",
    "default_decoders",
    "detshuffle",
    "dict2tuple",
    "extract_keys",
    "find_decoder",
    "getfirst",
    "identity",
    "info",
    "listed",
    "log_keys",
    "map",
    "map_dict",
    "map_tuple",
    "parse_field_spec",
    "pick",
    "pipeline",
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
    "tuple2dict",
    "unbatched",
    "unlisted",
    "xdecode",
]


__getattr__ = torch_names(__name__, "TorchTensor")
