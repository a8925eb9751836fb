"""WebDataset-compatible ``cache`` module for ``install_as_webdataset()`` (``webdataset.cache``).

The names are those of :mod:`shardstream.cache` (which ``wds.cache`` is), plus what
``webdataset.cache`` imports besides: ``urlparse`` and the ``gopen`` module.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse as urlparse

from .. import cache as native
from ..cache import (
    FileCache,
    LRUCleanup,
    StreamingOpen,
    check_tar_format,
    download,
    get_filetype,
    islocal,
    magic_filetype,
    obsolete,
    pipe_cleaner,
    reraise_exception,
    url_to_cache_name,
)
from . import gopen as gopen

__all__ = [
    "FileCache",
    "LRUCleanup",
    "StreamingOpen",
    "check_tar_format",
    "download",
    "get_filetype",
    "islocal",
    "magic_filetype",
    "obsolete",
    "pipe_cleaner",
    "reraise_exception",
    "url_to_cache_name",
]


def __getattr__(name: str) -> Any:
    # default_cache_dir / default_cache_size / verbose_cache: read when accessed (see shardstream.cache).
    return getattr(native, name)
