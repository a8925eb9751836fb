"""Cache counters: what the cache did in this process, and their copy on disk for ``cache stats``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from dataclasses import dataclass

from ..forks import ForkSafeLock

__all__ = ["CacheStats", "CounterFile", "read_counter_files"]


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


class CounterFile:
    """One process's counters on disk, so ``shardstream cache stats DIR`` can sum every process.

    The file ``<directory>/<host>~<pid>~<start>.json`` is rewritten atomically (temp + rename) at
    most once per ``interval`` seconds when counters change, and once more at exit or when the
    cache is collected. A forked DataLoader worker inherits its parent's counts: ``baseline``
    (the counts at the fork) is subtracted so no event is counted twice.
    """

    def __init__(self, directory: str, tag: str, baseline: CacheStats, *, interval: float = 1.0) -> None:
        self.path = os.path.join(directory, f"{tag}.json")
        self.baseline = baseline.as_dict()
        self.interval = interval
        # The first write waits an interval too: short-lived caches write once, when they go.
        self._written = time.monotonic()

    def record(self, stats: CacheStats, *, force: bool = False) -> None:
        """Write ``stats`` (less the baseline) if ``interval`` has passed, or ``force``."""
        now = time.monotonic()
        if not force and now - self._written < self.interval:
            return
        self._written = now
        counts = {k: v - self.baseline.get(k, 0) for k, v in stats.as_dict().items()}
        tmp = f"{self.path}.{os.getpid()}.tmp"
        # Best effort: never fail a read for counters, and never re-create a removed cache.
        with contextlib.suppress(OSError):
            with open(tmp, "w") as f:
                json.dump({"updated": time.time(), "counters": counts}, f)
            os.replace(tmp, self.path)


def read_counter_files(directory: str) -> dict[str, dict[str, int]]:
    """``{process tag: counters}`` of every counter file in ``directory`` (unreadable ones skipped)."""
    result: dict[str, dict[str, int]] = {}
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(directory, name)) as f:
                    data = json.load(f)
                result[name[: -len(".json")]] = {str(k): int(v) for k, v in data["counters"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
    return result
