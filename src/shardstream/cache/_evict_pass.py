"""An eviction pass on disk: serialised across processes, never over-evicting, with reservations.

:mod:`.eviction` plans which entries to remove; an :class:`Evictor` carries the plan out. Passes
are serialised by a global eviction lock (``.shardstream/evict.lock``). A fill reserves its size
inside that lock, as a sparse temp file that other processes' passes count as in use, so
concurrent fills cannot evict each other's room. Each victim is removed only under its entry
lock and only without live reader leases; one that became busy since the scan is kept and the
plan is made again.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from . import eviction
from .layout import Layout
from .lease import live_leases
from .lock import LockTiming, ShardLock
from .owner import Owner, remove_quietly
from .stats import CacheStats

__all__ = ["Evictor"]

log = logging.getLogger("shardstream.cache")


@dataclass(frozen=True)
class Evictor:
    """Keeps the cache at ``layout`` under ``limit`` bytes, acting as ``owner``."""

    layout: Layout
    limit: int
    owner: Owner
    timing: LockTiming
    stats: CacheStats

    def run(self, incoming: int = 0) -> list[str]:
        """One pass under the global eviction lock; returns the names removed."""
        lock = self._global_lock()
        lock.acquire()
        try:
            return self._evict_locked(incoming)
        finally:
            lock.release()

    def reserve(self, tmp: str, expected: int | None) -> int:
        """Evict room for ``expected`` bytes, then create ``tmp`` holding them; returns its fd."""
        lock = self._global_lock()
        lock.acquire()
        try:
            self._evict_locked(expected or 0)
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            if expected:
                # A sparse reservation: other processes' eviction passes count it as in use.
                os.ftruncate(fd, expected)
            return fd
        finally:
            lock.release()

    def _global_lock(self) -> ShardLock:
        return ShardLock(self.layout.evict_lock, owner=self.owner, timing=self.timing)

    def _evict_locked(self, incoming: int) -> list[str]:
        owner, stale = self.owner, self.timing.stale_after
        entries, reserved = eviction.scan(self.layout, owner=owner, stale_after=stale)
        removed: list[str] = []
        while True:
            victims = eviction.plan_eviction(entries, self.limit, incoming + reserved)
            if not victims:
                return removed
            for victim in victims:
                if not self._evict_one(victim):
                    # Became busy since the scan: mark it and plan again (never over-evict).
                    entries = [
                        e if e.name != victim.name else eviction.Entry(e.name, e.size, e.last_used, True)
                        for e in entries
                    ]
                    break
                removed.append(victim.name)
                entries = [e for e in entries if e.name != victim.name]
            else:
                total = sum(e.size for e in entries) + incoming + reserved
                if total > self.limit:
                    log.warning(
                        "cache %s stays over cache_size=%d (%d bytes): the remaining entries are in use",
                        self.layout.root,
                        self.limit,
                        total,
                    )
                return removed

    def _evict_one(self, entry: eviction.Entry) -> bool:
        lock = ShardLock(self.layout.lock(entry.name), owner=self.owner, timing=self.timing)
        if not lock.try_acquire():
            return False
        try:
            leases = self.layout.leases(entry.name)
            if live_leases(leases, owner=self.owner, stale_after=self.timing.stale_after):
                return False
            remove_quietly(self.layout.data(entry.name))
            remove_quietly(self.layout.meta(entry.name))
        finally:
            lock.release()
        self.stats.add(evictions=1, evicted_bytes=entry.size)
        log.debug(
            "cache evicted %s (%d bytes, last used %.0fs ago)",
            entry.name,
            entry.size,
            time.time() - entry.last_used,
        )
        return True
