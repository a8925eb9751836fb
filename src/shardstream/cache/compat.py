"""WebDataset-compatible cache names (``wds.cache.FileCache`` etc.), built on :class:`ShardCache`.

Signatures match ``webdataset.cache`` 1.0.2. Behaviour differs where WebDataset is unsafe:
downloads are locked and atomic, cache names keep the whole URL unless ``url_to_name`` is given,
cleanup deletes only the cache's own idle entries, and defaults are read from the environment
when used, not at import.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..config import read_settings
from ..errors import CacheError, ConfigurationError, SourceError, redact_url
from ..handlers import reraise_exception
from ..sources import open_url, scheme_of
from ..sources.file import local_path
from .owner import Owner, remove_quietly
from .store import ShardCache

__all__ = [
    "FileCache",
    "InvalidCachedFile",
    "LRUCleanup",
    "StreamingOpen",
    "check_tar_format",
    "default_cache_dir",
    "default_cache_size",
    "download",
    "get_filetype",
    "islocal",
    "magic_filetype",
]

log = logging.getLogger("shardstream.cache")


class InvalidCachedFile(CacheError, ValueError):
    """A downloaded file failed ``FileCache``'s validator (a ``ValueError``, as in WebDataset)."""


Handler = Callable[[BaseException], bool]


def default_cache_dir() -> str:
    """``SHARDSTREAM_CACHE_DIR`` / ``WDS_CACHE``, else ``./_cache`` (WebDataset's default)."""
    return read_settings().cache_dir or "./_cache"


def default_cache_size() -> float:
    """``SHARDSTREAM_CACHE_SIZE`` / ``WDS_CACHE_SIZE``, else 1e18 (WebDataset's default)."""
    size = read_settings().cache_size
    return float(size) if size is not None else 1e18


def islocal(url: str) -> bool:
    """True for plain paths and ``file:`` URLs."""
    return scheme_of(url) == "file"


def magic_filetype(fname: str) -> str:
    """Describe ``fname`` by its magic bytes: tar, gzip, or data (``file``-command style)."""
    with open(fname, "rb") as f:
        header = f.read(512)
    if header[:2] == b"\x1f\x8b":
        return f"{fname}: gzip compressed data"
    if header[257:262] == b"ustar":
        return f"{fname}: POSIX tar archive"
    return f"{fname}: data"


def get_filetype(fname: str) -> str:
    """Same as :func:`magic_filetype` (WebDataset runs the ``file`` command; this does not)."""
    return magic_filetype(fname)


def check_tar_format(fname: str) -> bool:
    """True if ``fname`` looks like a tar archive or a gzip file."""
    kind = magic_filetype(fname).lower()
    return "tar archive" in kind or "gzip compressed" in kind


def download(url: str, dest: str, chunk_size: int = 1024**2, verbose: bool = False) -> None:
    """Download ``url`` to ``dest`` atomically: a uniquely named temp file, then a rename."""
    temp = f"{dest}.{Owner.current().tag()}.temp"
    try:
        with open_url(url) as stream, open(temp, "wb") as out:
            while data := stream.read(chunk_size):
                out.write(data)
        os.replace(temp, dest)
    except BaseException:
        remove_quietly(temp)
        raise
    if verbose:
        log.info("downloaded %s to %s", redact_url(url), redact_url(dest))  # (a name may hold the URL)


class LRUCleanup:
    """Keep a cache directory under ``cache_size`` bytes (WebDataset-compatible).

    Unlike WebDataset's, it only deletes the cache's own idle entries, least recently used
    first and no more than needed; ``keyfn`` is accepted for compatibility but the order is by
    last use as recorded by the cache.
    """

    def __init__(
        self,
        cache_dir: str | None = None,
        cache_size: int = int(1e12),
        keyfn: Callable[[str], float] = os.path.getctime,
        verbose: bool = False,
        interval: float | None = 30,
    ) -> None:
        self.cache_dir = cache_dir
        self.cache_size = cache_size
        self.keyfn = keyfn
        self.verbose = verbose
        self.interval = interval
        self.last_run = 0.0

    def set_cache_dir(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir

    def cleanup(self) -> None:
        """Evict least recently used idle entries until the cache is under the limit."""
        if self.cache_dir is None or not os.path.isdir(self.cache_dir):
            return
        if self.interval is not None and time.time() - self.last_run < self.interval:
            return
        removed = ShardCache(self.cache_dir, cache_size=int(self.cache_size)).evict()
        if self.verbose and removed:
            log.info("cache cleanup removed %s", redact_url(", ".join(removed)))
        self.last_run = time.time()


class StreamingOpen:
    """Open each URL without caching: yields ``{"url", "stream"[, "local_path"]}`` dicts."""

    def __init__(self, verbose: bool = False, handler: Handler = reraise_exception) -> None:
        self.verbose = verbose
        self.handler = handler

    def __call__(self, urls: Iterable[Any]) -> Iterator[dict[str, Any]]:
        for url in urls:
            if isinstance(url, dict):
                url = url["url"]
            try:
                stream = open_url(url)
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            if islocal(url):
                yield {"url": url, "stream": stream, "local_path": local_path(url)}
            else:
                yield {"url": url, "stream": stream}


class FileCache:
    """Download shards into a cache directory and yield open files (WebDataset-compatible).

    Args:
        cache_dir: the directory (default ``SHARDSTREAM_CACHE_DIR`` / ``WDS_CACHE``, else ``./_cache``).
        url_to_name: URL -> relative cache name. Default: the collision-free naming of
            :func:`~shardstream.cache.naming.cache_name` (WebDataset's basename naming,
            :func:`url_to_cache_name`, can be passed explicitly).
        verbose: log each download at INFO.
        validator: called with the cached path; False means "not a shard" (the file is removed).
        handler: error policy for each URL.
        cache_size: limit in bytes (-1: unlimited).
        cache_cleanup_interval: WebDataset's cleanup period; eviction here runs before each
            download, so only the default (30) is accepted.
    """

    def __init__(
        self,
        cache_dir: str | None = None,
        *,
        url_to_name: Callable[[str], str] | None = None,
        verbose: bool = False,
        validator: Callable[[str], bool] | None = check_tar_format,
        handler: Handler = reraise_exception,
        cache_size: int = -1,
        cache_cleanup_interval: int = 30,
    ) -> None:
        if cache_cleanup_interval != 30:
            raise TypeError(
                f"FileCache(cache_cleanup_interval={cache_cleanup_interval}) has no effect: eviction "
                "runs before each download; drop the argument"
            )
        self.cache_dir = cache_dir if cache_dir is not None else default_cache_dir()
        self.url_to_name = url_to_name
        self.verbose = verbose
        self.validator = validator
        self.handler = handler
        self.cache = ShardCache(
            self.cache_dir, cache_size=cache_size if cache_size > 0 else None, url_to_name=url_to_name
        )

    def get_file(self, url: str) -> str:
        """Download ``url`` into the cache if needed; returns the local path."""
        if not isinstance(url, str):
            raise ConfigurationError(f"FileCache.get_file needs a str URL, got {type(url).__name__}")
        if islocal(url):
            return urllib.parse.urlparse(url).path if url.startswith("file:") else url
        dest = self.cache.get_file(url)
        if self.validator is not None and not self.validator(dest):
            kind = magic_filetype(dest)
            with open(dest, "rb") as f:
                head = f.read(200)
            remove_quietly(dest)
            remove_quietly(self.cache.layout.meta(self.cache.name_for(url)))
            raise InvalidCachedFile(
                f"{dest} ({redact_url(url)}) is not a tar archive but {kind.split(': ', 1)[-1]}; it "
                f"starts with {head[:64]!r}. The URL probably returned an error page or a different "
                "file; it was removed from the cache."
            )
        return dest

    def __call__(self, urls: Iterable[Any]) -> Iterator[dict[str, Any]]:
        for url in urls:
            if isinstance(url, dict):
                url = url["url"]
            try:
                dest = self.get_file(url)
                stream = open(dest, "rb")  # noqa: SIM115 - the consumer closes it
            except (SourceError, OSError, ValueError) as exn:
                if self.handler(exn):
                    continue
                break
            yield {"url": url, "stream": stream, "local_path": dest}
