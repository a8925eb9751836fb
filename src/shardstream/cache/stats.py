"""Cache counters: what the cache did in this process."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..sources._forksafe import ForkSafeLock

__all__ = ["CacheStats"]


@dataclass
class CacheStats:
    """Counters of one :class:`~shardstream.cache.ShardCache` in one process.

    DataLoader workers are separate processes, so each keeps its own counters; sum the
    ``stats`` of each worker's cache for the total.

    Attributes:
        hits: shards opened from a complete cached file.
        misses: shards this process downloaded into the cache.
        bytes_fetched: bytes downloaded into the cache.
        lock_waits: opens that waited for another process's download.
        stale_takeovers: locks taken over from dead owners.
        evictions / evicted_bytes: entries removed to stay under the size limit.
        corrupt: cached files found truncated or of the wrong size, removed and fetched again.
        temp_cleaned: leftover temporary files of dead processes removed.
        local_reads: local files read in place (never copied into the cache).
        uncached: remote shards read directly because they are larger than the whole cache.
    """

    hits: int = 0
    misses: int = 0
    bytes_fetched: int = 0
    lock_waits: int = 0
    stale_takeovers: int = 0
    evictions: int = 0
    evicted_bytes: int = 0
    corrupt: int = 0
    temp_cleaned: int = 0
    local_reads: int = 0
    uncached: int = 0

    def __post_init__(self) -> None:
        # Fork-safe: a DataLoader worker inherits this object while a parent fill may hold the lock.
        self._lock = ForkSafeLock()

    def add(self, **counts: int) -> None:
        """Increment counters by name (thread-safe)."""
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def snapshot(self) -> CacheStats:
        """A copy that no longer changes."""
        with self._lock:
            return CacheStats(**self.as_dict())

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __getstate__(self) -> dict[str, int]:
        return self.as_dict()

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__dict__.update(state)
        self._lock = ForkSafeLock()
