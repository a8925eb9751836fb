"""The cache as a Source layer: ``CachedSource(inner, cache)`` caches whatever ``inner`` opens.

Any reader that takes a :class:`~shardstream.sources.Source` (the tar reader, a single-object
reader) gets caching by being handed a ``CachedSource``; the cache knows nothing of formats.

Ranged reads, ``open(url, offset=o, length=n)``:

* **Local files** are read in place through ``inner`` (never copied).
* **Hit** (a complete, verified entry): the cached file is opened, seeked to ``o`` and capped at
  ``n`` bytes.
* **Miss**: the *whole* entry is filled, exactly as for an unranged open, and the range is
  served from the temp file as soon as the fill has written past ``o``; closing the stream early
  (after ``n`` bytes) does not stop the fill, which still completes and publishes the entry.
  Why fill rather than fetch only the range: the usual ranged open is a resume, which opens a
  shard at a byte offset and then reads it to its end, and the next epoch reads the shard whole
  from the start; filling makes that next read a hit, costs one request instead of two, and lets
  other processes waiting on the entry's lock get the complete file. The cost is latency for a
  small range far into a cold object (its preceding bytes are downloaded first) and the disk space
  of the whole object. Rejected: reading the range directly without filling (every epoch would
  refetch the head of a resumed shard, and concurrent workers would each fetch their own range
  of a cold shard). Callers that want single ranges of large cold objects should open ``inner``.
* **Too large** for the cache (bigger than ``cache_size``): read ranged from ``inner``, uncached.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from ..sources import ObjectInfo, Source, SourceBase, scheme_of
from .naming import NameFunction
from .stats import CacheStats
from .store import ShardCache

__all__ = ["CachedSource", "cached_source"]


class CachedSource(SourceBase):
    """A Source that reads remote objects through a :class:`ShardCache` filled from ``inner``.

    Streams it opens carry ``local_path`` (the cache entry's path, or the local file's) where the
    bytes are in a local file. It pickles when ``inner`` does (a
    :class:`~shardstream.sources.SchemeRouter` does), so DataLoader workers can receive a copy.

    Args:
        inner: the source that objects are fetched from on a miss (and local files read from).
        cache: the cache to use; if it was built for another source, a view of it (same
            directory, settings and counters) that fetches through ``inner`` is used.
    """

    def __init__(self, inner: Source, cache: ShardCache) -> None:
        self.inner = inner
        self.cache = cache if cache.source is inner else cache.with_source(inner)

    @classmethod
    def from_dir(
        cls,
        inner: Source,
        cache_dir: str,
        *,
        cache_size: int | None = None,
        url_to_name: NameFunction | None = None,
        **options: Any,
    ) -> CachedSource:
        """A cached source over a new :class:`ShardCache` at ``cache_dir`` (``options`` go to it)."""
        cache = ShardCache(cache_dir, cache_size=cache_size, url_to_name=url_to_name, source=inner, **options)
        return cls(inner, cache)

    def __repr__(self) -> str:
        return f"CachedSource({self.inner!r}, {self.cache!r})"

    @property
    def stats(self) -> CacheStats:
        """A snapshot of this process's cache counters."""
        return self.cache.stats

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``url`` through the cache (see the module
        docstring for hits, misses and local files)."""
        stream, _ = self.cache.open(url, offset=offset, length=length)
        return stream

    def stat(self, url: str) -> ObjectInfo:
        """From the cache record for a complete entry (no request), else from ``inner``."""
        if scheme_of(url) != "file":
            info = self.cache.info(url)
            if info is not None:
                return info
        return self.inner.stat(url)

    def close(self) -> None:
        """Close ``inner`` (a :class:`~shardstream.sources.SchemeRouter` has nothing to close)."""
        self.inner.close()


def cached_source(
    inner: Source,
    *,
    cache_dir: str | None,
    cache_size: int | None = None,
    url_to_name: NameFunction | None = None,
    **options: Any,
) -> Source:
    """``inner`` behind a shard cache, or ``inner`` itself when caching is off.

    Caching is off when ``cache_dir`` is ``None`` or ``cache_size == 0`` (as in WebDataset); a
    negative or ``None`` size means unlimited. Extra ``options`` go to :class:`ShardCache`
    (``lock_timeout``, ``verify_etag``, ...).
    """
    if cache_dir is None or cache_size == 0:
        return inner
    return CachedSource.from_dir(inner, cache_dir, cache_size=cache_size, url_to_name=url_to_name, **options)
