"""Size limit: least-recently-used eviction as pure functions, plus the directory scan.

:func:`plan_eviction` decides; :func:`scan` reads the disk. Only the cache's own entries (files
with a metadata record, see ``layout``) are candidates, so files placed in the directory by
hand or by other tools, and local source files (never copied into the cache), are never deleted.
Busy entries (a live reader lease, or a fill lock) are never candidates. The plan removes the
shortest LRU prefix of idle entries that brings the total under the limit, and nothing more.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .layout import BOOK, Layout
from .lease import live_leases
from .lock import read_lock
from .owner import Owner, fs_now, is_alive

__all__ = ["Entry", "plan_eviction", "scan", "stale_temps"]


@dataclass(frozen=True)
class Entry:
    """A cached shard as eviction sees it.

    Attributes:
        name: the relative cache name.
        size: bytes on disk.
        last_used: time of the last open (the data file's mtime, touched on every hit).
        busy: being read or filled; never evicted.
    """

    name: str
    size: int
    last_used: float
    busy: bool = False


def plan_eviction(entries: Iterable[Entry], limit: int, incoming: int = 0) -> list[Entry]:
    """Entries to remove so that ``sum(sizes) + incoming <= limit``, least recently used first.

    Returns the shortest LRU-ordered prefix of the idle entries that reaches the limit; when even
    removing every idle entry is not enough (busy entries, or ``incoming`` alone exceeds the
    limit), all idle entries are returned and the caller stays over the limit.

    Args:
        entries: every entry of the cache (busy ones count towards the total).
        limit: size limit in bytes.
        incoming: bytes about to be added (shards being filled), default 0.
    """
    items = list(entries)
    total = sum(e.size for e in items) + incoming
    victims: list[Entry] = []
    for entry in sorted((e for e in items if not e.busy), key=lambda e: (e.last_used, e.name)):
        if total <= limit:
            break
        victims.append(entry)
        total -= entry.size
    return victims


def _walk_files(top: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top and BOOK in dirnames:
            dirnames.remove(BOOK)
        for filename in filenames:
            yield os.path.join(dirpath, filename)


def scan(layout: Layout, *, owner: Owner, stale_after: float) -> tuple[list[Entry], int]:
    """The cache's own entries, and the bytes reserved by temp files of fills in progress.

    Temp files of dead writers are removed on the way.
    """
    entries = []
    for path in _walk_files(layout.root):
        name = os.path.relpath(path, layout.root).replace(os.sep, "/")
        if not os.path.exists(layout.meta(name)):
            continue  # not ours: never a candidate, and not counted
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        busy = os.path.exists(layout.lock(name)) or (
            os.path.isdir(layout.leases(name))
            and live_leases(layout.leases(name), owner=owner, stale_after=stale_after) > 0
        )
        entries.append(Entry(name, st.st_size, st.st_mtime, busy))
    temps = list(_walk_files(layout.tmp_root)) if os.path.isdir(layout.tmp_root) else []
    dead = set(stale_temps(layout, temps, owner=owner, stale_after=stale_after))
    reserved = 0
    for path in temps:
        try:
            if path in dead:
                os.unlink(path)  # a dead writer's leftover: reclaim it
            else:
                reserved += os.stat(path).st_size
        except FileNotFoundError:
            continue
    return entries, reserved


def stale_temps(
    layout: Layout, paths: Iterable[str], *, owner: Owner, stale_after: float, lock_held: bool = False
) -> list[str]:
    """The temp files among ``paths`` whose writer is dead (PID check here, heartbeat age elsewhere).

    With ``lock_held`` (the caller holds the entry's lock, so no other writer may publish it),
    temps written on other hosts are orphans whatever their age: a writer that was judged dead
    but still runs would fail to publish and keeps serving its own reader from its open file.
    """
    dead = []
    now: float | None = None
    for path in paths:
        parsed = layout.name_of_tmp(path)
        holder = Owner.from_tag(parsed[1]) if parsed else None
        alive = is_alive(holder, owner.host) if holder is not None else None
        if alive is None and lock_held:
            alive = False
        if alive is None:
            if now is None:
                now = fs_now(layout.book, owner)
            try:
                beat = os.stat(path).st_mtime
            except FileNotFoundError:
                continue
            if parsed is not None and holder is not None:
                # A writer waiting on a slow network does not touch its temp file, but its lock
                # heartbeat still runs: count that too.
                info = read_lock(layout.lock(parsed[0]))
                if (
                    info is not None
                    and info.owner is not None
                    and (info.owner.host, info.owner.pid) == (holder.host, holder.pid)
                ):
                    beat = max(beat, info.mtime)
            alive = now - beat <= stale_after
        if not alive:
            dead.append(path)
    return dead
