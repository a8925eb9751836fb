"""shardstream: fast, robust shard streaming for PyTorch, with WebDataset's API on top.

The native API (typed, documented in the README)::

    import shardstream as ss
    ds = ss.Dataset(urls, split=ss.SplitPolicy("equal", batch_size=64), cache=ss.CachePolicy("/cache"))

``import shardstream as wds`` works for code written against WebDataset 1.0.2: its names are
thin re-exports from :mod:`shardstream.compat` (see the README for deliberate differences).

Names are imported on first access (PEP 562), so ``import shardstream`` and the inspection
commands of the CLI stay fast and never import torch; what needs torch (``WebLoader``, the
pipelines' torch base class, torch decoders) pulls it in when used.
"""

import importlib as _importlib
import importlib.abc as _abc
import importlib.machinery as _machinery
import sys as _sys
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

__version__ = "0.1.0"

if _TYPE_CHECKING:
    from . import cache, compat, pipeline, tenbin
    from .cache import CachedSource, LRUCleanup, ShardCache, cached_source, pipe_cleaner
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
    from .compat.filters import xdecode
    from .compat.gopen import gopen, gopen_schemes
    from .compat.mix import RandomMix, RoundRobin
    from .compat.tariterators import tarfile_samples, tarfile_to_samples
    from .compat.utils import repeatedly
    from .compat.webdataset import WebDataset, check_empty
    from .decoders import AudioWindows, VideoClips, register_decoder, video_info
    from .errors import (
        AccessDeniedError,
        CacheError,
        CacheLockTimeout,
        ConfigurationError,
        DecodingError,
        MissingFieldError,
        ObjectChangedError,
        PipeCommandError,
        ShardFormatError,
        ShardNotFoundError,
        ShardStreamError,
        SourceError,
        SplitError,
        StateError,
        TransientSourceError,
        UnsafeOperationError,
    )
    from .handlers import (
        ignore_and_continue,
        ignore_and_stop,
        reraise_exception,
        warn_and_continue,
        warn_and_stop,
    )
    from .loader.loader import WebLoader
    from .pipeline.base import (
        FunctionStage,
        MapStage,
        Node,
        PipelineStage,
        RunContext,
        Stage,
        Stateful,
        pipelinefilter,
    )
    from .pipeline.batch import Expand, batched, default_collation_fn, listed, unbatched, unlisted
    from .pipeline.dataset import Dataset
    from .pipeline.decode import decode
    from .pipeline.extra import Cached, associate, info, non_empty
    from .pipeline.fields import extract_keys, getfirst, rename, rename_keys, to_tuple
    from .pipeline.fluent import FluidInterface, FluidWrapper
    from .pipeline.mapping import map, map_dict, map_tuple, select, transform_with
    from .pipeline.pipeline import DataPipeline
    from .pipeline.planned import PlannedSamples
    from .pipeline.policy import CachePolicy, SplitPolicy
    from .pipeline.read import ReadShards
    from .pipeline.sampling import resampled, rsample
    from .pipeline.shardlists import (
        ResampledShards,
        SimpleShardList,
        shardspec,
        single_node_only,
        split_by_node,
        split_by_worker,
    )
    from .pipeline.shuffle import detshuffle, shuffle
    from .pipeline.window import MockDataset, slice, with_epoch, with_length
    from .shards.plan import EpochPlan, plan_epoch
    from .shards.spec import expand_urls
    from .shards.world import World
    from .sources import SchemeRouter, Source, register_source
    from .tar.encoders import numpy_dumps, torch_dumps
    from .tar.samples import TarFormat
    from .tar.sharded_writer import ShardWriter
    from .tar.writer import TarWriter

#: Public name -> the module that defines it (modules themselves map to their parent package).
_EXPORTS: dict[str, str] = {
    "cache": "shardstream",
    "compat": "shardstream",
    "pipeline": "shardstream",
    "tenbin": "shardstream",
    "CachedSource": "shardstream.cache",
    "LRUCleanup": "shardstream.cache",
    "ShardCache": "shardstream.cache",
    "cached_source": "shardstream.cache",
    "pipe_cleaner": "shardstream.cache",
    "autodecode": "shardstream.compat",
    "extradatasets": "shardstream.compat",
    "filters": "shardstream.compat",
    "handlers": "shardstream.compat",
    "mix": "shardstream.compat",
    "pytorch": "shardstream.compat",
    "shardlists": "shardstream.compat",
    "tariterators": "shardstream.compat",
    "utils": "shardstream.compat",
    "writer": "shardstream.compat",
    "Continue": "shardstream.compat.autodecode",
    "Decoder": "shardstream.compat.autodecode",
    "gzfilter": "shardstream.compat.autodecode",
    "handle_extension": "shardstream.compat.autodecode",
    "imagehandler": "shardstream.compat.autodecode",
    "pytorch_weights_only": "shardstream.compat.autodecode",
    "torch_audio": "shardstream.compat.autodecode",
    "torch_loads": "shardstream.compat.autodecode",
    "torch_video": "shardstream.compat.autodecode",
    "gopen": "shardstream.compat.gopen",
    "gopen_schemes": "shardstream.compat.gopen",
    "RandomMix": "shardstream.compat.mix",
    "RoundRobin": "shardstream.compat.mix",
    "tarfile_samples": "shardstream.compat.tariterators",
    "tarfile_to_samples": "shardstream.compat.tariterators",
    "WebDataset": "shardstream.compat.webdataset",
    "check_empty": "shardstream.compat.webdataset",
    "register_decoder": "shardstream.decoders",
    "AudioWindows": "shardstream.decoders",
    "VideoClips": "shardstream.decoders",
    "video_info": "shardstream.decoders",
    "AccessDeniedError": "shardstream.errors",
    "CacheError": "shardstream.errors",
    "CacheLockTimeout": "shardstream.errors",
    "ConfigurationError": "shardstream.errors",
    "DecodingError": "shardstream.errors",
    "MissingFieldError": "shardstream.errors",
    "ObjectChangedError": "shardstream.errors",
    "PipeCommandError": "shardstream.errors",
    "ShardFormatError": "shardstream.errors",
    "ShardNotFoundError": "shardstream.errors",
    "ShardStreamError": "shardstream.errors",
    "SourceError": "shardstream.errors",
    "SplitError": "shardstream.errors",
    "StateError": "shardstream.errors",
    "TransientSourceError": "shardstream.errors",
    "UnsafeOperationError": "shardstream.errors",
    "ignore_and_continue": "shardstream.handlers",
    "ignore_and_stop": "shardstream.handlers",
    "reraise_exception": "shardstream.handlers",
    "warn_and_continue": "shardstream.handlers",
    "warn_and_stop": "shardstream.handlers",
    "WebLoader": "shardstream.loader.loader",
    "FunctionStage": "shardstream.pipeline.base",
    "MapStage": "shardstream.pipeline.base",
    "Node": "shardstream.pipeline.base",
    "PipelineStage": "shardstream.pipeline.base",
    "RunContext": "shardstream.pipeline.base",
    "Stage": "shardstream.pipeline.base",
    "Stateful": "shardstream.pipeline.base",
    "pipelinefilter": "shardstream.pipeline.base",
    "Expand": "shardstream.pipeline.batch",
    "batched": "shardstream.pipeline.batch",
    "default_collation_fn": "shardstream.pipeline.batch",
    "listed": "shardstream.pipeline.batch",
    "unbatched": "shardstream.pipeline.batch",
    "unlisted": "shardstream.pipeline.batch",
    "Dataset": "shardstream.pipeline.dataset",
    "decode": "shardstream.pipeline.decode",
    "Cached": "shardstream.pipeline.extra",
    "MockDataset": "shardstream.pipeline.window",
    "associate": "shardstream.pipeline.extra",
    "info": "shardstream.pipeline.extra",
    "non_empty": "shardstream.pipeline.extra",
    "repeatedly": "shardstream.compat.utils",
    "resampled": "shardstream.pipeline.sampling",
    "rsample": "shardstream.pipeline.sampling",
    "slice": "shardstream.pipeline.window",
    "with_epoch": "shardstream.pipeline.window",
    "with_length": "shardstream.pipeline.window",
    "xdecode": "shardstream.compat.filters",
    "extract_keys": "shardstream.pipeline.fields",
    "getfirst": "shardstream.pipeline.fields",
    "rename": "shardstream.pipeline.fields",
    "rename_keys": "shardstream.pipeline.fields",
    "to_tuple": "shardstream.pipeline.fields",
    "FluidInterface": "shardstream.pipeline.fluent",
    "FluidWrapper": "shardstream.pipeline.fluent",
    "map": "shardstream.pipeline.mapping",
    "map_dict": "shardstream.pipeline.mapping",
    "map_tuple": "shardstream.pipeline.mapping",
    "select": "shardstream.pipeline.mapping",
    "transform_with": "shardstream.pipeline.mapping",
    "DataPipeline": "shardstream.pipeline.pipeline",
    "PlannedSamples": "shardstream.pipeline.planned",
    "CachePolicy": "shardstream.pipeline.policy",
    "SplitPolicy": "shardstream.pipeline.policy",
    "ReadShards": "shardstream.pipeline.read",
    "ResampledShards": "shardstream.pipeline.shardlists",
    "SimpleShardList": "shardstream.pipeline.shardlists",
    "shardspec": "shardstream.pipeline.shardlists",
    "single_node_only": "shardstream.pipeline.shardlists",
    "split_by_node": "shardstream.pipeline.shardlists",
    "split_by_worker": "shardstream.pipeline.shardlists",
    "detshuffle": "shardstream.pipeline.shuffle",
    "shuffle": "shardstream.pipeline.shuffle",
    "EpochPlan": "shardstream.shards.plan",
    "plan_epoch": "shardstream.shards.plan",
    "expand_urls": "shardstream.shards.spec",
    "World": "shardstream.shards.world",
    "SchemeRouter": "shardstream.sources",
    "Source": "shardstream.sources",
    "register_source": "shardstream.sources",
    "numpy_dumps": "shardstream.tar.encoders",
    "torch_dumps": "shardstream.tar.encoders",
    "TarFormat": "shardstream.tar.samples",
    "ShardWriter": "shardstream.tar.sharded_writer",
    "TarWriter": "shardstream.tar.writer",
}

#: WebDataset's submodule names (``from webdataset.shardlists import ...``), importable under
#: ours: ``shardstream.shardlists`` is ``shardstream.compat.shardlists``.
_COMPAT_MODULES = frozenset(
    {"autodecode", "extradatasets", "filters", "gopen", "mix", "pytorch", "shardlists", "tariterators",
     "utils", "writer"}
)  # fmt: skip

__all__ = [
    "AccessDeniedError",
    "AudioWindows",
    "CacheError",
    "CacheLockTimeout",
    "CachePolicy",
    "Cached",
    "CachedSource",
    "ConfigurationError",
    "Continue",
    "DataPipeline",
    "Dataset",
    "Decoder",
    "DecodingError",
    "EpochPlan",
    "Expand",
    "FluidInterface",
    "FluidWrapper",
    "FunctionStage",
    "LRUCleanup",
    "MapStage",
    "MissingFieldError",
    "MockDataset",
    "Node",
    "ObjectChangedError",
    "PipeCommandError",
    "PipelineStage",
    "PlannedSamples",
    "RandomMix",
    "ReadShards",
    "ResampledShards",
    "RoundRobin",
    "RunContext",
    "SchemeRouter",
    "ShardCache",
    "ShardFormatError",
    "ShardNotFoundError",
    "ShardStreamError",
    "ShardWriter",
    "SimpleShardList",
    "Source",
    "SourceError",
    "SplitError",
    "SplitPolicy",
    "Stage",
    "StateError",
    "Stateful",
    "TarFormat",
    "TarWriter",
    "TransientSourceError",
    "UnsafeOperationError",
    "VideoClips",
    "WebDataset",
    "WebLoader",
    "World",
    "associate",
    "autodecode",
    "batched",
    "cache",
    "cached_source",
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
    "plan_epoch",
    "pytorch",
    "pytorch_weights_only",
    "register_decoder",
    "register_source",
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
    "video_info",
    "warn_and_continue",
    "warn_and_stop",
    "with_epoch",
    "with_length",
    "writer",
    "xdecode",
]


def __getattr__(name: str) -> _Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value: _Any = _importlib.import_module(f"{module_name}.{name}")  # a namespace module
    except ModuleNotFoundError as exc:
        if exc.name != f"{module_name}.{name}":
            raise  # a missing dependency inside the module: say so
        value = getattr(_importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _CompatAlias(_abc.MetaPathFinder, _abc.Loader):
    """Makes ``import shardstream.shardlists`` load ``shardstream.compat.shardlists`` (on demand)."""

    def find_spec(
        self, fullname: str, path: _Any = None, target: _Any = None
    ) -> _machinery.ModuleSpec | None:
        prefix, _, leaf = fullname.rpartition(".")
        if prefix != __name__ or leaf not in _COMPAT_MODULES:
            return None
        return _machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: _machinery.ModuleSpec) -> _ModuleType:
        return _importlib.import_module(f"{__name__}.compat.{spec.name.rpartition('.')[2]}")

    def exec_module(self, module: _ModuleType) -> None:
        pass


if not any(isinstance(f, _CompatAlias) for f in _sys.meta_path):
    _sys.meta_path.append(_CompatAlias())
