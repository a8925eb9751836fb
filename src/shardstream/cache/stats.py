"""Cache counters: what the cache did in this process, and their copy on disk for ``cache stats``.

Every process writes its own counter file (``<host>~<pid>~<start>.json``) and renames it to
``done~<tag>.json`` when it exits. A shared cache used by thousands of jobs would pile such files
up, so they are *rolled up* into ``total~*.json`` files (:func:`roll_up`): by the exiting process
when the directory holds more than :data:`ROLL_AT` files, and by ``shardstream cache clean``.
Files of processes that died without saying so are rolled up when they are known dead (same
host) or have not changed for ``max_age`` seconds. Rolling up needs no lock: each file is first
claimed by a rename (only one roller wins it), the sum is published atomically, then the claimed
files are removed; a roller killed half-way loses at most what it had claimed, never counts twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..forks import ForkSafeLock

__all__ = [
    "DEFAULT_MAX_AGE",
    "ROLL_AT",
    "CacheStats",
    "CounterFile",
    "CounterTotals",
    "read_counter_files",
    "read_counters",
    "roll_up",
]

log = logging.getLogger("shardstream.cache")

#: A process's counter file unchanged for this long is rolled up even if its owner may live.
DEFAULT_MAX_AGE = 86_400.0
#: An exiting process rolls the directory up when it holds more files than this.
ROLL_AT = 64
_DONE, _TOTAL, _CLAIM = "done~", "total~", ".claim~"


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
    most once per ``interval`` seconds when counters change, and once more by :meth:`finish` at
    exit or when the cache is collected, which renames it ``done~<tag>.json``. A forked
    DataLoader worker inherits its parent's counts: ``baseline`` (the counts at the fork) is
    subtracted so no event is counted twice. If the file was rolled up while this process was
    idle (see :func:`roll_up`), what it held joins the baseline, so it is not counted again.
    """

    def __init__(self, directory: str, tag: str, baseline: CacheStats, *, interval: float = 1.0) -> None:
        self.directory, self.tag = directory, tag
        self.path = os.path.join(directory, f"{tag}.json")
        self.baseline = baseline.as_dict()
        self.interval = interval
        self._last: dict[str, int] | None = None  # what the file holds, once written
        # The first write waits an interval too: short-lived caches write once, when they go.
        self._written = time.monotonic()

    def record(self, stats: CacheStats, *, force: bool = False) -> None:
        """Write ``stats`` (less the baseline) if ``interval`` has passed, or ``force``."""
        now = time.monotonic()
        if not force and now - self._written < self.interval:
            return
        self._written = now
        if self._last is not None and not os.path.exists(self.path):
            # Rolled up while idle: those counts are in a total now.
            self.baseline = {k: self.baseline.get(k, 0) + v for k, v in self._last.items()}
        counts = {k: v - self.baseline.get(k, 0) for k, v in stats.as_dict().items()}
        if _write_json(self.path, {"updated": time.time(), "counters": counts}):
            self._last = counts

    def finish(self, stats: CacheStats) -> None:
        """The last write, at exit: the file becomes ``done~<tag>.json`` (safe to roll up at once);
        with more than :data:`ROLL_AT` files in the directory, roll them up."""
        self.record(stats, force=True)
        if self._last is None:
            return
        with contextlib.suppress(OSError):
            os.replace(self.path, os.path.join(self.directory, f"{_DONE}{self.tag}.json"))
            if len(os.listdir(self.directory)) > ROLL_AT:
                roll_up(self.directory, claimer=self.tag)


def _write_json(path: str, data: object) -> bool:
    tmp = f"{path}.{os.getpid()}.tmp"
    # Best effort: never fail a read for counters, and never re-create a removed cache.
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        return False


def _load(path: str) -> tuple[dict[str, int], int, float] | None:
    """``(counters, processes, updated)`` of a counter or total file; ``None`` if unreadable."""
    try:
        with open(path) as f:
            data = json.load(f)
        counters = {str(k): int(v) for k, v in data["counters"].items()}
        return counters, int(data.get("processes", 1)), float(data.get("updated", 0.0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass
class CounterTotals:
    """Counters of a cache directory: per live (or not yet rolled up) process, and rolled up."""

    processes: dict[str, dict[str, int]]
    rolled_up: dict[str, int]
    rolled_up_processes: int

    def total(self) -> dict[str, int]:
        totals: Counter[str] = Counter(self.rolled_up)
        for counts in self.processes.values():
            totals.update(counts)
        return dict(totals)

    @property
    def process_count(self) -> int:
        return len(self.processes) + self.rolled_up_processes


def read_counters(directory: str) -> CounterTotals:
    """Every counter and total file in ``directory`` (unreadable ones skipped)."""
    processes: dict[str, dict[str, int]] = {}
    rolled: Counter[str] = Counter()
    rolled_processes = 0
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".json"):
                continue
            loaded = _load(os.path.join(directory, name))
            if loaded is None:
                continue
            counters, count, _ = loaded
            if name.startswith(_TOTAL):
                rolled.update(counters)
                rolled_processes += count
            else:
                processes[name[: -len(".json")].removeprefix(_DONE)] = counters
    return CounterTotals(processes, dict(rolled), rolled_processes)


def read_counter_files(directory: str) -> dict[str, dict[str, int]]:
    """``{process tag: counters}`` of every counter file in ``directory``, rolled-up totals under
    the tag ``"rolled-up"`` (unreadable files skipped)."""
    found = read_counters(directory)
    result = dict(found.processes)
    if found.rolled_up_processes:
        result["rolled-up"] = found.rolled_up
    return result


def roll_up(
    directory: str,
    *,
    claimer: str,
    max_age: float = DEFAULT_MAX_AGE,
    is_dead: Callable[[str], bool] | None = None,
) -> int:
    """Sum finished processes' counter files (and earlier totals) into one ``total~`` file.

    Rolled up: ``done~`` files, ``total~`` files, and a process's own file when ``is_dead(tag)``
    says its process is gone or it has not changed for ``max_age`` seconds. ``claimer`` (this
    process's tag) names the claims and the new total. Returns the number of files rolled up.
    """
    now = time.time()
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return 0
    claimed: list[str] = []
    counts: Counter[str] = Counter()
    processes = 0
    for name in names:
        path = os.path.join(directory, name)
        if _CLAIM in name:
            # A roller killed between claiming and publishing: its claims are lost counts.
            with contextlib.suppress(OSError):
                if now - os.stat(path).st_mtime > max_age:
                    os.remove(path)
            continue
        if not name.endswith(".json"):
            continue
        finished = name.startswith((_DONE, _TOTAL))
        if not finished:
            loaded = _load(path)
            tag = name[: -len(".json")]
            dead = is_dead(tag) if is_dead is not None else False
            if loaded is None or not (dead or now - loaded[2] > max_age):
                continue
        claim = f"{path}{_CLAIM}{claimer}"
        try:
            os.rename(path, claim)  # only one roller wins a file
        except OSError:
            continue
        loaded = _load(claim)
        claimed.append(claim)
        if loaded is not None:
            counts.update(loaded[0])
            processes += loaded[1]
    if not claimed:
        return 0
    total = os.path.join(directory, f"{_TOTAL}{claimer}~{time.time_ns()}.json")
    if not _write_json(total, {"updated": now, "counters": dict(counts), "processes": processes}):
        for claim in claimed:  # give the files back rather than lose them
            with contextlib.suppress(OSError):
                os.rename(claim, claim[: claim.index(_CLAIM)])
        return 0
    for claim in claimed:
        with contextlib.suppress(OSError):
            os.remove(claim)
    log.debug("cache counters: rolled %d files of %d processes up into %s", len(claimed), processes, total)
    return len(claimed)
