"""``shardstream cache ls | stats | clean DIR``: look at a shard cache and tidy it safely.

``ls`` and ``stats`` only look (they judge locks, leases and temp files as the cache does, by PID
on this host and by heartbeat age elsewhere, and remove nothing). ``clean`` removes only what no
live process uses, through the cache's own rules: temp files and locks of dead writers, leases of
dead readers, entries whose size no longer matches their record, and, with ``--all`` or
``--max-size``, idle entries least recently used first. An entry with a live reader lease or a
fill lock is never removed, so cleaning while jobs run is safe. ``clean`` also rolls the
per-process counter files up into totals (those of finished processes, of dead ones on this
host, and any unchanged for ``--counters-age``), so a cache shared by many jobs keeps a handful
of them; ``stats`` sums live and rolled-up counters alike.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from ..cache.stats import CounterTotals

__all__ = ["DESCRIPTION", "add_arguments", "inventory", "run"]

DESCRIPTION = (
    "Inspect or tidy a shard cache directory: 'ls' lists the cached shards with size, last use and "
    "state; 'stats' sums them with the hit/miss counters of every process that used the cache; "
    "'clean' removes what no live process uses (never an entry being read or filled)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("ls", "stats", "clean"), help="what to do")
    parser.add_argument(
        "directories",
        metavar="DIR",
        nargs="+",
        help="the cache directory (cache_dir=); several: the tiers of a tiered cache, each on its own",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--all", action="store_true", help="clean: also remove every idle cached shard")
    parser.add_argument(
        "--max-size", metavar="SIZE", help="clean: evict idle shards, LRU first, down to SIZE (e.g. 500G)"
    )
    parser.add_argument("--dry-run", action="store_true", help="clean: only say what would be removed")
    parser.add_argument(
        "--stale-after",
        type=float,
        default=60.0,
        help="seconds without heartbeat after which a holder on another host is dead (default 60)",
    )
    parser.add_argument(
        "--counters-age",
        type=float,
        default=None,
        metavar="SECONDS",
        help="clean: roll up counter files unchanged for this long (default one day)",
    )


@dataclass
class CachedShard:
    """One entry as ``cache ls`` shows it."""

    name: str
    url: str | None
    size: int
    last_used: float
    readers: int
    filling: bool
    corrupt: bool


@dataclass
class Inventory:
    """Everything under a cache root, judged without changing anything."""

    entries: list[CachedShard]
    foreign_files: int
    fills: int  # temp files of live writers
    dead_temps: list[str]
    locks: int
    stale_locks: list[str]
    dead_leases: int
    counters: CounterTotals


def _walk(top: str) -> list[str]:
    out: list[str] = []
    for dirpath, _dirs, files in os.walk(top):
        out.extend(os.path.join(dirpath, f) for f in files)
    return out


def inventory(root: str, *, stale_after: float = 60.0) -> Inventory:
    """Look at the cache at ``root`` (read-only)."""
    from ..cache import LockTiming, ShardLock
    from ..cache.eviction import stale_temps
    from ..cache.hit import read_meta
    from ..cache.layout import BOOK, Layout
    from ..cache.lease import live_leases
    from ..cache.lock import read_lock
    from ..cache.owner import Owner, is_alive
    from ..cache.stats import read_counters
    from ._errors import UsageError

    layout = Layout(root)
    if not os.path.isdir(layout.book):
        raise UsageError(f"{root!r} is not a shardstream cache (no {BOOK}/ directory in it)")
    me = Owner.current()
    timing = LockTiming(stale_after=stale_after, heartbeat=min(5.0, stale_after / 2))
    entries: list[CachedShard] = []
    foreign = 0
    for dirpath, dirnames, filenames in os.walk(layout.root):
        if dirpath == layout.root and BOOK in dirnames:
            dirnames.remove(BOOK)
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            name = os.path.relpath(path, layout.root).replace(os.sep, "/")
            meta = read_meta(layout, name)
            if meta is None:
                foreign += 1
                continue
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            readers = live_leases(layout.leases(name), owner=me, stale_after=stale_after, prune=False)
            info = read_lock(layout.lock(name))
            filling = info is not None and not ShardLock(layout.lock(name), owner=me, timing=timing).is_stale(
                info
            )
            expected = meta.get("size")
            entries.append(
                CachedShard(
                    name, meta.get("url"), st.st_size, st.st_mtime, readers, filling, expected != st.st_size
                )
            )
    temps = _walk(layout.tmp_root) if os.path.isdir(layout.tmp_root) else []
    dead = stale_temps(layout, temps, owner=me, stale_after=stale_after)
    lock_root = os.path.join(layout.book, "lock")
    lock_files = [p for p in _walk(lock_root) if p.endswith(".lock")] if os.path.isdir(lock_root) else []
    if os.path.exists(layout.evict_lock):
        lock_files.append(layout.evict_lock)
    stale_locks = []
    for path in lock_files:
        info = read_lock(path)
        if info is not None and ShardLock(path, owner=me, timing=timing).is_stale(info):
            stale_locks.append(path)
    dead_leases = 0
    lease_root = os.path.join(layout.book, "lease")
    for path in _walk(lease_root) if os.path.isdir(lease_root) else []:
        holder = Owner.from_tag(os.path.basename(path))
        alive = is_alive(holder, me.host) if holder is not None else None
        if alive is None:
            alive = time.time() - os.stat(path).st_mtime <= stale_after
        dead_leases += not alive
    return Inventory(
        entries=sorted(entries, key=lambda e: e.name),
        foreign_files=foreign,
        fills=len(temps) - len(dead),
        dead_temps=dead,
        locks=len(lock_files),
        stale_locks=stale_locks,
        dead_leases=dead_leases,
        counters=read_counters(layout.counters),
    )


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _state(e: CachedShard) -> str:
    if e.corrupt:
        return "corrupt"
    if e.filling:
        return "filling"
    return f"reading:{e.readers}" if e.readers else "idle"


def _ls(inv: Inventory, args: argparse.Namespace) -> int:
    if args.json:
        json.dump([asdict(e) | {"state": _state(e)} for e in inv.entries], sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    now = time.time()
    sys.stdout.write(f"{'SIZE':>15} {'LAST USED':>10} {'STATE':<10} NAME (URL)\n")
    for e in inv.entries:
        url = f" ({e.url})" if e.url else ""
        sys.stdout.write(f"{e.size:>15,} {_age(now - e.last_used):>10} {_state(e):<10} {e.name}{url}\n")
    return 0


def _stats(inv: Inventory, args: argparse.Namespace) -> int:
    totals: collections.Counter[str] = collections.Counter(inv.counters.total())
    opened = totals["hits"] + totals["misses"]
    report: dict[str, Any] = {
        "entries": len(inv.entries),
        "bytes": sum(e.size for e in inv.entries),
        "in_use": sum(1 for e in inv.entries if e.readers or e.filling),
        "readers": sum(e.readers for e in inv.entries),
        "fills_in_progress": inv.fills,
        "corrupt": sum(e.corrupt for e in inv.entries),
        "foreign_files": inv.foreign_files,
        "locks": inv.locks,
        "stale_locks": len(inv.stale_locks),
        "dead_temp_files": len(inv.dead_temps),
        "dead_leases": inv.dead_leases,
        "processes_counted": inv.counters.process_count,
        "counter_files": len(inv.counters.processes),
        "counters": dict(sorted(totals.items())),
        "hit_rate": totals["hits"] / opened if opened else None,
    }
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    c = report["counters"]
    rate = f"{report['hit_rate']:.1%}" if report["hit_rate"] is not None else "n/a"
    sys.stdout.write(
        f"entries:      {report['entries']} ({report['bytes']:,} bytes), {report['in_use']} in use "
        f"({report['readers']} readers, {report['fills_in_progress']} fills in progress)\n"
        f"hits:         {c.get('hits', 0)}   misses: {c.get('misses', 0)}   hit rate: {rate}   "
        f"fetched: {c.get('bytes_fetched', 0):,} bytes   "
        f"(counters of {report['processes_counted']} processes)\n"
        f"evictions:    {c.get('evictions', 0)} ({c.get('evicted_bytes', 0):,} bytes)   lock waits: "
        f"{c.get('lock_waits', 0)}   stale takeovers: {c.get('stale_takeovers', 0)}\n"
        f"garbage:      {report['stale_locks']} stale locks, {report['dead_temp_files']} dead temp files, "
        f"{report['dead_leases']} dead leases, {report['corrupt']} corrupt entries "
        "(`shardstream cache clean` removes them)\n"
        f"not managed:  {report['foreign_files']} files without a cache record (never removed)\n"
    )
    return 0


def _clean(inv: Inventory, args: argparse.Namespace) -> int:
    from ..cache import ShardCache
    from ._options import parse_size

    limit = 0 if args.all else (parse_size(args.max_size) if args.max_size else None)
    corrupt = [e for e in inv.entries if e.corrupt and not e.readers and not e.filling]
    if args.dry_run:
        idle = sorted((e for e in inv.entries if not (e.readers or e.filling)), key=lambda e: e.last_used)
        evict, total = [], sum(e.size for e in inv.entries)
        for e in idle if limit is not None else []:
            if limit is not None and total <= limit:
                break
            evict.append(e)
            total -= e.size
        report = {
            "stale_locks": len(inv.stale_locks),
            "dead_temp_files": len(inv.dead_temps),
            "dead_leases": inv.dead_leases,
            "corrupt_entries": len(corrupt),
            "evicted": [e.name for e in evict],
            "evicted_bytes": sum(e.size for e in evict),
        }
        return _report("would remove", report, args)
    cache = ShardCache(
        args.directory,
        cache_size=limit,
        stale_after=args.stale_after,
        heartbeat=min(5.0, args.stale_after / 2),
    )
    from ..cache import ShardLock
    from ..cache.eviction import scan
    from ..cache.owner import remove_quietly

    broken = 0
    for path in inv.stale_locks:  # acquire() breaks a dead owner's lock (and only that), then we let go
        lock = ShardLock(path, owner=cache.owner, timing=cache.timing)
        try:
            if lock.acquire(timeout=0.0):
                lock.release()
                broken += 1
        except TimeoutError:
            continue  # alive after all
    entries, _reserved = scan(
        cache.layout, owner=cache.owner, stale_after=args.stale_after
    )  # prunes dead temps and leases
    removed_corrupt = 0
    for e in corrupt:
        lock = ShardLock(cache.layout.lock(e.name), owner=cache.owner, timing=cache.timing)
        if lock.try_acquire():
            try:
                remove_quietly(cache.layout.data(e.name))
                remove_quietly(cache.layout.meta(e.name))
                removed_corrupt += 1
            finally:
                lock.release()
    before = {e.name: e.size for e in entries}
    evicted = cache.evict() if limit is not None else []
    rolled = _roll_up(cache.layout.counters, cache.owner.tag(), args)
    report = {
        "stale_locks": broken,
        "dead_temp_files": len(inv.dead_temps),
        "dead_leases": inv.dead_leases,
        "corrupt_entries": removed_corrupt,
        "evicted": evicted,
        "evicted_bytes": sum(before.get(n, 0) for n in evicted),
        "kept_in_use": sum(1 for e in entries if e.busy),
        "counter_files_rolled_up": rolled,
    }
    return _report("removed", report, args)


def _roll_up(directory: str, claimer: str, args: argparse.Namespace) -> int:
    from ..cache.owner import Owner, is_alive
    from ..cache.stats import DEFAULT_MAX_AGE, roll_up

    me = Owner.current()

    def is_dead(tag: str) -> bool:  # tag: host~pid~start[~token]
        parts = tag.split("~")
        try:
            start = None if len(parts) < 3 or parts[2] in ("", "-", "None") else int(parts[2])
            owner = Owner(parts[0], int(parts[1]), start, "")
        except (ValueError, IndexError):
            return False
        return is_alive(owner, me.host) is False

    age = args.counters_age if args.counters_age is not None else DEFAULT_MAX_AGE
    return roll_up(directory, claimer=claimer, max_age=age, is_dead=is_dead)


def _report(verb: str, report: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(
        f"{verb}: {len(report['evicted'])} cached shards ({report['evicted_bytes']:,} bytes), "
        f"{report['corrupt_entries']} corrupt entries, {report['stale_locks']} stale locks, "
        f"{report['dead_temp_files']} dead temp files, {report['dead_leases']} dead leases"
        + (f"; kept {report['kept_in_use']} in use" if report.get("kept_in_use") else "")
        + (
            f"; rolled up {report['counter_files_rolled_up']} counter files"
            if report.get("counter_files_rolled_up")
            else ""
        )
        + "\n"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from ._errors import UsageError

    if args.action != "clean" and (
        args.all or args.max_size or args.dry_run or args.counters_age is not None
    ):
        raise UsageError("--all, --max-size, --dry-run and --counters-age apply to `cache clean` only")
    action = {"ls": _ls, "stats": _stats, "clean": _clean}[args.action]
    if len(args.directories) == 1:
        args.directory = args.directories[0]
        return action(inventory(args.directory, stale_after=args.stale_after), args)
    # Tiers: each directory on its own (JSON: one object keyed by directory).
    code, reports = 0, {}
    for tier, directory in enumerate(args.directories):
        args.directory = directory
        inv = inventory(directory, stale_after=args.stale_after)
        if args.json:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = max(code, action(inv, args))
            reports[directory] = json.loads(out.getvalue())
        else:
            sys.stdout.write(f"tier {tier + 1}: {directory}\n")
            code = max(code, action(inv, args))
    if args.json:
        json.dump(reports, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return code
