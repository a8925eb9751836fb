"""shardstream: fast, robust shard streaming for PyTorch, with WebDataset's API on top.

The native API (typed; the guide and the API reference are in ``docs/``)::

    import shardstream as ss
    ds = ss.ShardStream(urls, split=ss.SplitPolicy("equal", batch_size=64), cache=ss.CachePolicy("/cache"))

``import shardstream as wds`` works for code written against WebDataset 1.0.2: its names are
thin re-exports from :mod:`shardstream.compat` (``docs/migrating-from-webdataset.md`` lists the
deliberate differences).

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
        wids,
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
    from .compat.filters import LMDBCached, xdecode
    from .compat.gopen import gopen, gopen_schemes
    from .compat.install import install_as_webdataset
    from .compat.mix import RandomMix, RoundRobin
    from .compat.shardlists import MultiShardSample
    from .compat.tariterators import tarfile_samples, tarfile_to_samples
    from .compat.utils import repeatedly
    from .compat.webdataset import WebDataset, check_empty
    from .datasets.mix import Mix
    from .datasets.object_dataset import ObjectDataset
    from .datasets.object_stream import ObjectStream
    from .datasets.policy import CachePolicy, SplitPolicy
    from .datasets.shard_dataset import ShardDataset
    from .datasets.shard_stream import ShardStream
    from .decoders import AudioWindows, VideoClips, register_decoder, video_info
    from .errors import (
        AccessDeniedError,
        CacheError,
        CacheLockTimeout,
        ConfigurationError,
        DecodingError,
        IndexFormatError,
        MissingFieldError,
        ObjectChangedError,
        PipeCommandError,
        ResponseTooLargeError,
        ShardFormatError,
        ShardNotFoundError,
        ShardStreamError,
        SourceError,
        SplitError,
        StateError,
        TransientSourceError,
        UnsafeOperationError,
        UnsafePathError,
        WorkerDiedError,
        WorkerLostError,
        WorkerStuckError,
    )
    from .handlers import (
        ignore_and_continue,
        ignore_and_stop,
        reraise_exception,
        warn_and_continue,
        warn_and_stop,
    )
    from .loader import Loader, worker_context
    from .loader.loader import WebLoader
    from .pipeline.annotate import associate, info
    from .pipeline.base import (
        FunctionStage,
        MapStage,
        Node,
        PipelineStage,
        RunContext,
        Stage,
        pipelinefilter,
    )
    from .pipeline.batch import Expand, batched, default_collation_fn, listed, unbatched, unlisted
    from .pipeline.cached import Cached
    from .pipeline.decode import decode
    from .pipeline.fields import extract_keys, getfirst, rename, rename_keys, to_tuple
    from .pipeline.fluent import FluidInterface, FluidWrapper
    from .pipeline.mapping import map, map_dict, map_tuple, select, transform_with
    from .pipeline.pipeline import DataPipeline
    from .pipeline.sampling import resampled, rsample
    from .pipeline.seams import Stateful
    from .pipeline.shuffle import detshuffle, shuffle
    from .pipeline.window import MockDataset, slice, with_epoch, with_length
    from .readers.empty import non_empty
    from .readers.planned import PlannedSamples
    from .readers.read_shards import ReadShards
    from .readers.shardlists import (
        ResampledShards,
        SimpleShardList,
        shardspec,
        single_node_only,
        split_by_node,
        split_by_worker,
    )
    from .shards.plan import EpochPlan, plan_epoch
    from .shards.spec import expand_urls
    from .shards.world import World
    from .sources import SchemeRouter, Source, register_source
    from .tar.encoders import numpy_dumps, torch_dumps
    from .tar.samples import TarFormat
    from .tar.sharded_writer import ShardWriter
    from .tar.writer import TarWriter

#: Module -> the public names it defines, space-separated (a namespace module maps to its
#: parent package).
_MODULES: dict[str, str] = {
    "shardstream": "cache compat pipeline tenbin",
    "shardstream.cache": "CachedSource LRUCleanup ShardCache cached_source pipe_cleaner",
    "shardstream.compat": (
        "autodecode extradatasets filters handlers mix pytorch shardlists tariterators utils wids writer"
    ),
    "shardstream.compat.autodecode": (
        "Continue Decoder gzfilter handle_extension imagehandler pytorch_weights_only torch_audio "
        "torch_loads torch_video"
    ),
    "shardstream.compat.filters": "LMDBCached xdecode",
    "shardstream.compat.gopen": "gopen gopen_schemes",
    "shardstream.compat.install": "install_as_webdataset",
    "shardstream.compat.mix": "RandomMix RoundRobin",
    "shardstream.compat.shardlists": "MultiShardSample",
    "shardstream.compat.tariterators": "tarfile_samples tarfile_to_samples",
    "shardstream.compat.utils": "repeatedly",
    "shardstream.compat.webdataset": "WebDataset check_empty",
    "shardstream.decoders": "AudioWindows VideoClips register_decoder video_info",
    "shardstream.errors": (
        "AccessDeniedError CacheError CacheLockTimeout ConfigurationError DecodingError IndexFormatError "
        "MissingFieldError ObjectChangedError PipeCommandError ResponseTooLargeError ShardFormatError "
        "ShardNotFoundError "
        "ShardStreamError SourceError SplitError StateError TransientSourceError UnsafeOperationError "
        "UnsafePathError WorkerDiedError WorkerLostError WorkerStuckError"
    ),
    "shardstream.handlers": (
        "ignore_and_continue ignore_and_stop reraise_exception warn_and_continue warn_and_stop"
    ),
    "shardstream.loader": "Loader worker_context",
    "shardstream.loader.loader": "WebLoader",
    "shardstream.pipeline.base": (
        "FunctionStage MapStage Node PipelineStage RunContext Stage pipelinefilter"
    ),
    "shardstream.pipeline.seams": "Stateful",
    "shardstream.pipeline.batch": "Expand batched default_collation_fn listed unbatched unlisted",
    "shardstream.datasets.shard_stream": "ShardStream",
    "shardstream.datasets.mix": "Mix",
    "shardstream.pipeline.decode": "decode",
    "shardstream.pipeline.annotate": "associate info",
    "shardstream.pipeline.cached": "Cached",
    "shardstream.readers.empty": "non_empty",
    "shardstream.pipeline.fields": "extract_keys getfirst rename rename_keys to_tuple",
    "shardstream.pipeline.fluent": "FluidInterface FluidWrapper",
    "shardstream.datasets.object_stream": "ObjectStream",
    "shardstream.datasets.object_dataset": "ObjectDataset",
    "shardstream.datasets.shard_dataset": "ShardDataset",
    "shardstream.pipeline.mapping": "map map_dict map_tuple select transform_with",
    "shardstream.pipeline.pipeline": "DataPipeline",
    "shardstream.readers.planned": "PlannedSamples",
    "shardstream.datasets.policy": "CachePolicy SplitPolicy",
    "shardstream.readers.read_shards": "ReadShards",
    "shardstream.pipeline.sampling": "resampled rsample",
    "shardstream.readers.shardlists": (
        "ResampledShards SimpleShardList shardspec single_node_only split_by_node split_by_worker"
    ),
    "shardstream.pipeline.shuffle": "detshuffle shuffle",
    "shardstream.pipeline.window": "MockDataset slice with_epoch with_length",
    "shardstream.shards.plan": "EpochPlan plan_epoch",
    "shardstream.shards.spec": "expand_urls",
    "shardstream.shards.world": "World",
    "shardstream.sources": "SchemeRouter Source register_source",
    "shardstream.tar.encoders": "numpy_dumps torch_dumps",
    "shardstream.tar.samples": "TarFormat",
    "shardstream.tar.sharded_writer": "ShardWriter",
    "shardstream.tar.writer": "TarWriter",
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names.split()}

#: WebDataset's submodule names (``from webdataset.shardlists import ...``), importable under
#: ours: ``shardstream.shardlists`` is ``shardstream.compat.shardlists``.
_COMPAT_MODULES = frozenset(
    {"autodecode", "extradatasets", "filters", "gopen", "mix", "pytorch", "shardlists", "tariterators",
     "utils", "wids", "writer"}
)  # fmt: skip

# __all__ is grouped, native API first, each group sorted (``tests/unit/test_exports.py``).
# The front doors, the loader, sources, cache, writers, planning and decoders (docs/reference/).
__all__ = [
    "AudioWindows",
    "CachePolicy",
    "CachedSource",
    "EpochPlan",
    "Loader",
    "Mix",
    "ObjectDataset",
    "ObjectStream",
    "SchemeRouter",
    "ShardCache",
    "ShardDataset",
    "ShardStream",
    "ShardWriter",
    "Source",
    "SplitPolicy",
    "TarFormat",
    "TarWriter",
    "VideoClips",
    "WebLoader",
    "World",
    "cached_source",
    "expand_urls",
    "numpy_dumps",
    "plan_epoch",
    "register_decoder",
    "register_source",
    "torch_dumps",
    "video_info",
    "wids",
    "worker_context",
]
# The stage contract and the stages that start or shape a pipeline (``pipeline/``, ``readers/``).
__all__ += [
    "DataPipeline",
    "Expand",
    "FunctionStage",
    "MapStage",
    "Node",
    "PipelineStage",
    "PlannedSamples",
    "ReadShards",
    "ResampledShards",
    "RunContext",
    "SimpleShardList",
    "Stage",
    "Stateful",
    "check_empty",
    "default_collation_fn",
    "listed",
    "pipelinefilter",
    "unlisted",
]
# Every error (``shardstream.errors``): what a caller catches.
__all__ += [
    "AccessDeniedError",
    "CacheError",
    "CacheLockTimeout",
    "ConfigurationError",
    "DecodingError",
    "IndexFormatError",
    "MissingFieldError",
    "ObjectChangedError",
    "PipeCommandError",
    "ResponseTooLargeError",
    "ShardFormatError",
    "ShardNotFoundError",
    "ShardStreamError",
    "SourceError",
    "SplitError",
    "StateError",
    "TransientSourceError",
    "UnsafeOperationError",
    "UnsafePathError",
    "WorkerDiedError",
    "WorkerLostError",
    "WorkerStuckError",
]
# WebDataset 1.0.2's top-level names and submodules, for ``import shardstream as wds``: thin
# re-exports from ``compat/`` and the stage modules (docs/migrating-from-webdataset.md lists the
# deliberate differences).
__all__ += [
    "Cached",
    "Continue",
    "Decoder",
    "FluidInterface",
    "FluidWrapper",
    "LMDBCached",
    "LRUCleanup",
    "MockDataset",
    "MultiShardSample",
    "RandomMix",
    "RoundRobin",
    "WebDataset",
    "associate",
    "autodecode",
    "batched",
    "cache",
    "compat",
    "decode",
    "detshuffle",
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
    "install_as_webdataset",
    "map",
    "map_dict",
    "map_tuple",
    "mix",
    "non_empty",
    "pipe_cleaner",
    "pipeline",
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
    "torch_loads",
    "torch_video",
    "transform_with",
    "unbatched",
    "utils",
    "warn_and_continue",
    "warn_and_stop",
    "with_epoch",
    "with_length",
    "writer",
    "xdecode",
]


#: Names renamed, kept for a minor release with a DeprecationWarning (docs/versioning.md): old -> new.
#: ``Dataset`` became ``ShardStream`` so that the names of the front doors say how they are read:
#: ``ShardStream`` and ``ObjectStream`` iterate, ``ShardDataset`` and ``ObjectDataset`` are
#: map-style (any sampler), as torch's own ``Dataset`` is.
_RENAMED = {"Dataset": "ShardStream"}


def __getattr__(name: str) -> _Any:
    renamed = _RENAMED.get(name)
    if renamed is not None:
        import warnings

        warnings.warn(
            f"shardstream.{name} is deprecated; use shardstream.{renamed}, the same class under a "
            f"name that says it iterates (ShardDataset is the map-style one)",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(renamed)
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
        module = _importlib.import_module(f"{__name__}.compat.{spec.name.rpartition('.')[2]}")
        self.real_spec = module.__spec__  # importlib stamps the alias spec on it: restored below
        return module

    def exec_module(self, module: _ModuleType) -> None:
        module.__spec__ = self.real_spec


if not any(isinstance(f, _CompatAlias) for f in _sys.meta_path):
    _sys.meta_path.append(_CompatAlias())
