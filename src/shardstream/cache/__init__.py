"""A local shard cache that is safe under many processes, shared filesystems and crashes.

``ShardCache`` is the implementation (see ``store``); ``CachedSource`` (and ``cached_source``)
present it as a :class:`~shardstream.sources.Source` layer over another source, ranged reads
included (see ``source``). The
WebDataset 1.0.2 names of ``webdataset.cache`` (``FileCache``, ``LRUCleanup``, ``pipe_cleaner``,
..., and the ``obsolete`` and ``reraise_exception`` it imports) are provided with the same
signatures. ``default_cache_dir`` / ``default_cache_size`` are
read from the environment when accessed, not at import.
"""

from __future__ import annotations

from typing import Any

from ..deprecation import obsolete
from ..handlers import reraise_exception
from .compat import (
    FileCache,
    LRUCleanup,
    StreamingOpen,
    check_tar_format,
    download,
    get_filetype,
    islocal,
    magic_filetype,
)
from .eviction import Entry, plan_eviction
from .lock import LockTiming, ShardLock
from .naming import cache_name, pipe_cleaner, url_to_cache_name
from .source import CachedSource, cached_source
from .stats import CacheStats
from .store import ShardCache

__all__ = [
    "CacheStats",
    "CachedSource",
    "Entry",
    "FileCache",
    "LRUCleanup",
    "LockTiming",
    "ShardCache",
    "ShardLock",
    "StreamingOpen",
    "cache_name",
    "cached_source",
    "check_tar_format",
    "download",
    "get_filetype",
    "islocal",
    "magic_filetype",
    "obsolete",
    "pipe_cleaner",
    "plan_eviction",
    "reraise_exception",
    "url_to_cache_name",
]


def __getattr__(name: str) -> Any:
    # WebDataset reads these at import time; here they reflect the environment when accessed.
    from . import compat

    if name == "default_cache_dir":
        return compat.default_cache_dir()
    if name == "default_cache_size":
        return compat.default_cache_size()
    if name == "verbose_cache":
        return 0
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
