"""shardstream: fast, robust WebDataset-compatible shard streaming for PyTorch.

``import shardstream as wds`` works for code written against WebDataset 1.0.2; see the README
for where behaviour deliberately differs (safer defaults, per-epoch shard order).
"""

import sys as _sys

from . import (  # noqa: E402  (namespaces: wds.compat.WebDataset, wds.pipeline.DataPipeline)
    cache,  # noqa: E402
    compat,
    pipeline,
    tenbin,
)
from .cache import LRUCleanup, pipe_cleaner
from .compat import (
    autodecode,
    extradatasets,
    filters,
    handlers,
    mix,
    pytorch,
    shardlists,
    tariterators,
    utils,
    writer,
)
from .compat import gopen as _gopen_module
from .compat.autodecode import (
    Continue,
    Decoder,
    gzfilter,
    handle_extension,
    imagehandler,
    pytorch_weights_only,
    torch_audio,
    torch_loads,
    torch_video,
)
from .compat.gopen import gopen, gopen_schemes
from .compat.mix import RandomMix, RoundRobin
from .errors import (
    AccessDeniedError,
    CacheError,
    CacheLockTimeout,
    ConfigurationError,
    DecodingError,
    ObjectChangedError,
    PipeCommandError,
    ShardFormatError,
    ShardNotFoundError,
    ShardStreamError,
    SourceError,
    SplitError,
    TransientSourceError,
    UnsafeOperationError,
)
from .loader.loader import WebLoader
from .pipeline.base import FunctionStage, PipelineStage, Stage, pipelinefilter
from .pipeline.batch import batched, default_collation_fn, listed, unbatched, unlisted
from .pipeline.decode import decode
from .pipeline.extra import (
    Cached,
    MockDataset,
    associate,
    info,
    non_empty,
    repeatedly,
    resampled,
    rsample,
    slice,
    with_epoch,
    with_length,
    xdecode,
)
from .pipeline.fields import extract_keys, getfirst, rename, rename_keys, to_tuple
from .pipeline.fluent import FluidInterface, FluidWrapper, WebDataset, check_empty
from .handlers import (
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from .pipeline.mapping import map, map_dict, map_tuple, select, transform_with
from .pipeline.pipeline import DataPipeline
from .pipeline.shuffle import detshuffle, shuffle
from .shards.spec import ResampledShards, SimpleShardList, expand_urls, shardspec
from .shards.split import single_node_only, split_by_node, split_by_worker
from .shards.world import World
from .tar.encoders import numpy_dumps, torch_dumps
from .tar.samples import tarfile_samples, tarfile_to_samples
from .tar.sharded_writer import ShardWriter
from .tar.writer import TarWriter

__version__ = "0.1.0"

# WebDataset users also write ``from webdataset.handlers import ...``: make the compatibility
# namespaces importable under our name too (they are thin re-export modules).
for _name, _module in {
    "handlers": handlers,
    "shardlists": shardlists,
    "filters": filters,
    "tariterators": tariterators,
    "utils": utils,
    "gopen": _gopen_module,
    "mix": mix,
    "autodecode": autodecode,
    "writer": writer,
    "extradatasets": extradatasets,
    "pytorch": pytorch,
}.items():
    _sys.modules.setdefault(f"{__name__}.{_name}", _module)
del _name, _module
gopen = gopen  # the function shadows the module name, as in WebDataset

__all__ = [
    "AccessDeniedError",
    "CacheError",
    "CacheLockTimeout",
    "Cached",
    "ConfigurationError",
    "Continue",
    "DataPipeline",
    "Decoder",
    "DecodingError",
    "FluidInterface",
    "FluidWrapper",
    "FunctionStage",
    "LRUCleanup",
    "MockDataset",
    "ObjectChangedError",
    "PipeCommandError",
    "PipelineStage",
    "RandomMix",
    "ResampledShards",
    "RoundRobin",
    "ShardFormatError",
    "ShardNotFoundError",
    "ShardStreamError",
    "ShardWriter",
    "SimpleShardList",
    "SourceError",
    "SplitError",
    "Stage",
    "TarWriter",
    "TransientSourceError",
    "UnsafeOperationError",
    "WebDataset",
    "WebLoader",
    "World",
    "associate",
    "autodecode",
    "batched",
    "cache",
    "check_empty",
    "compat",
    "decode",
    "default_collation_fn",
    "detshuffle",
    "expand_urls",
    "extract_keys",
    "extradatasets",
    "filters",
    "getfirst",
    "gopen",
    "gopen_schemes",
    "gzfilter",
    "handle_extension",
    "handlers",
    "ignore_and_continue",
    "ignore_and_stop",
    "imagehandler",
    "info",
    "listed",
    "map",
    "map_dict",
    "map_tuple",
    "mix",
    "non_empty",
    "numpy_dumps",
    "pipe_cleaner",
    "pipeline",
    "pipelinefilter",
    "pytorch",
    "pytorch_weights_only",
    "rename",
    "rename_keys",
    "repeatedly",
    "reraise_exception",
    "resampled",
    "rsample",
    "select",
    "shardlists",
    "shardspec",
    "shuffle",
    "single_node_only",
    "slice",
    "split_by_node",
    "split_by_worker",
    "tarfile_samples",
    "tarfile_to_samples",
    "tariterators",
    "tenbin",
    "to_tuple",
    "torch_audio",
    "torch_dumps",
    "torch_loads",
    "torch_video",
    "transform_with",
    "unbatched",
    "unlisted",
    "utils",
    "warn_and_continue",
    "warn_and_stop",
    "with_epoch",
    "with_length",
    "writer",
    "xdecode",
]
