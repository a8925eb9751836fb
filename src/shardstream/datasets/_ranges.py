"""Byte ranges of shards for one process: a batch at once, neighbours coalesced, recent ones kept.

:class:`RangeReader` takes a batch of ``(url, offset, size)`` requests and returns their bytes
in request order (or, in a request's place, the exception that stopped it):

1. **LRU**: a request read recently (by this process) is served from memory; the cache is
   bounded in bytes and evicts the least recently used range.
2. **Coalescing** (:func:`plan_runs`, pure): the other requests are grouped per shard, sorted by
   offset, and requests that touch (or whose gap is at most ``coalesce_gap`` bytes) become one
   run, read with one ranged request; each request's bytes are cut out of its run's.
3. **Concurrency**: runs of remote shards are fetched together through the fetch engine
   (:class:`~shardstream.objects.RangeFetcher`: the objects' fetch loop over the source's
   ``get_many`` session, up to ``window`` ranged GETs in flight). For ``s3://`` that is one
   ``epoll`` loop on the calling thread, so a DataLoader batch of 32 random samples is 32 (or
   fewer, coalesced) ranged GETs, each costing about what an object GET of ``ObjectDataset``
   costs; for other remote sources it is the source's ranged ``open`` on the session's threads.
   Throttling (503 SlowDown) halves the requests in flight and retries; a transfer cut
   mid-range resumes within the range. The session is kept between batches and made again in a
   forked or unpickled copy. Runs of local files are read on the calling thread.
4. **Shard cache**: with a :class:`~shardstream.cache.ShardCache`, a run of a shard that is
   completely cached is read from the cache entry (a ``pread``); other runs go to the origin as
   ranges and do *not* fill the cache. Random access touches a few samples per shard, so filling
   whole shards would download what is never read (the cost ``wids`` pays); the cache pays off
   when the same cache directory is also filled by streaming (``ss.ShardStream(cache=...)``) or by
   ``ShardCache.get_file``.

Rejected: a pool of threads, each calling the source's ranged ``open`` (what this module did
first): a ranged ``open`` is a streaming reader (retry and resume machinery, an ``http.client``
response, a thread woken per request and the GIL handed over several times), several times the
client CPU per sample of a GET on the ``epoll`` loop. The engine about doubled ShardDataset's
samples/s on the same samples; what keeps it under ObjectDataset's is the server reading a whole
stored chunk per range (``benchmarks/results/bench_random_access.md`` has the runs before and
after, with 4 MB and 1 MB chunks).
:class:`~shardstream.objects.FetchAhead`: it starts its threads for each run and joins them when
the run ends, once per DataLoader batch.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..cache import ShardCache
from ..errors import SourceError
from ..forks import ForkSafeLock
from ..objects import RangeFetcher
from ..sources import Source, scheme_of

__all__ = ["RangeReader", "RangeStats", "Run", "plan_runs"]

Request = tuple[str, int, int]


@dataclass(frozen=True)
class Run:
    """One ranged read: bytes ``[start, end)`` of ``url``, covering the requests ``members``
    (positions in the batch)."""

    url: str
    start: int
    end: int
    members: tuple[int, ...]


def plan_runs(requests: Sequence[Request], coalesce_gap: int = 0) -> list[Run]:
    """Group ``requests`` into runs: per shard, by offset, merging requests whose gap is at most
    ``coalesce_gap`` bytes (``0``: only ranges that touch or overlap). Pure."""
    by_url: dict[str, list[int]] = collections.defaultdict(list)
    for position, (url, _, _) in enumerate(requests):
        by_url[url].append(position)
    runs: list[Run] = []
    for url, positions in by_url.items():
        positions.sort(key=lambda p: requests[p][1])
        start = end = -1
        members: list[int] = []
        for p in positions:
            _, offset, size = requests[p]
            if members and offset <= end + coalesce_gap:
                end = max(end, offset + size)
                members.append(p)
                continue
            if members:
                runs.append(Run(url, start, end, tuple(members)))
            start, end, members = offset, offset + size, [p]
        runs.append(Run(url, start, end, tuple(members)))
    return runs


@dataclass
class RangeStats:
    """Counters of one process: ranged reads sent (retries included), bytes they returned, LRU
    hits, shard-cache hits, and throttled answers (503 SlowDown / 429, each one retried)."""

    requests: int = 0
    bytes_read: int = 0
    lru_hits: int = 0
    cache_hits: int = 0
    throttles: int = 0


class RangeReader:
    """Reads batches of byte ranges (see the module doc). Picklable: a copy starts with an empty
    LRU, no session and zero counters, and opens its connections on first use.

    Args:
        source: what the shards are read with (its ``get_many`` sessions, per scheme through
            ``route``; local files with its ranged ``open``).
        window: ranged requests in flight at most.
        coalesce_gap: largest gap, in bytes, read through to merge two requests into one.
        lru_bytes: bytes of recently read ranges kept in memory (``0``: none).
        cache: a shard cache whose complete entries are read in place of the origin.
    """

    def __init__(
        self,
        source: Source,
        *,
        window: int = 32,
        coalesce_gap: int = 0,
        lru_bytes: int = 64 << 20,
        cache: ShardCache | None = None,
    ) -> None:
        self.source = source
        self.window = window
        self.coalesce_gap = coalesce_gap
        self.lru_bytes = lru_bytes
        self.cache = cache
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._fetcher = RangeFetcher(self.source, window=self.window)
        self._lock = ForkSafeLock()
        self._lru: collections.OrderedDict[Request, bytes] = collections.OrderedDict()
        self._held = 0
        self.stats = RangeStats()

    def __getstate__(self) -> dict[str, Any]:
        keep = ("source", "window", "coalesce_gap", "lru_bytes", "cache")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def read(self, requests: Sequence[Request], *, keep: bool = True) -> list[bytes | BaseException]:
        """The bytes of each ``(url, offset, size)``, in order; fewer than ``size`` when the
        shard ends first; a request that failed gets its exception (a SourceError naming the URL).
        ``keep=False``: not kept in the LRU (offsets sidecars, which their index keeps)."""
        if self._pid != os.getpid():  # a forked copy: the parent's session is not its own
            self._reset()
        out: list[bytes | BaseException | None] = [None] * len(requests)
        todo: list[int] = []
        with self._lock:
            for i, request in enumerate(requests):
                hit = self._lru.get(request)
                if hit is None:
                    todo.append(i)
                else:
                    self._lru.move_to_end(request)
                    self.stats.lru_hits += 1
                    out[i] = hit
        if todo:
            runs = plan_runs([requests[i] for i in todo], self.coalesce_gap)
            for run, got in zip(runs, self._fetch_all(runs), strict=True):
                for member in run.members:
                    i = todo[member]
                    if isinstance(got, BaseException):
                        out[i] = got
                        continue
                    _, offset, size = requests[i]
                    out[i] = piece = bytes(memoryview(got)[offset - run.start : offset - run.start + size])
                    if keep:
                        self._remember(requests[i], piece)
        return [b if b is not None else SourceError("range not read") for b in out]

    def _fetch_all(self, runs: list[Run]) -> list[bytes | BaseException]:
        out: list[bytes | BaseException] = [b""] * len(runs)
        remote: list[int] = []
        for k, run in enumerate(runs):
            if scheme_of(run.url) == "file":
                out[k] = self._try(run)
                continue
            hit = self._cached(run)
            if hit is None:
                remote.append(k)
            else:
                out[k] = hit
        if remote:
            fetcher = self._fetcher
            before, throttled = fetcher.requests, fetcher.throttles
            got = fetcher.fetch([(runs[k].url, runs[k].start, runs[k].end - runs[k].start) for k in remote])
            with self._lock:
                self.stats.requests += fetcher.requests - before
                self.stats.throttles += fetcher.throttles - throttled
                for k, data in zip(remote, got, strict=True):
                    out[k] = data
                    if not isinstance(data, BaseException):
                        self.stats.bytes_read += len(data)
        return out

    def _try(self, run: Run) -> bytes | BaseException:
        """A run of a local file, read in place."""
        try:
            with self.source.open(run.url, offset=run.start, length=run.end - run.start) as stream:
                data = stream.read()
        except Exception as exc:  # delivered in the requests' place
            return exc
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_read += len(data)
        return data

    def _cached(self, run: Run) -> bytes | None:
        """The run's bytes from a complete shard-cache entry, or ``None`` (not cached, evicted)."""
        if self.cache is None:
            return None
        info = self.cache.info(run.url)
        if info is None or info.local_path is None:
            return None
        try:
            fd = os.open(info.local_path, os.O_RDONLY)
        except OSError:  # evicted since: read the origin
            return None
        try:
            data = os.pread(fd, run.end - run.start, run.start)
        finally:
            os.close(fd)
        with self._lock:
            self.stats.cache_hits += 1
        return data

    def _remember(self, request: Request, data: bytes) -> None:
        if len(data) > self.lru_bytes:
            return
        with self._lock:
            if request in self._lru:
                return
            self._lru[request] = data
            self._held += len(data)
            while self._held > self.lru_bytes:
                _, old = self._lru.popitem(last=False)
                self._held -= len(old)

    def close(self) -> None:
        """Close this process's fetch sessions and forget the kept ranges (a later read starts
        again)."""
        if self._pid == os.getpid():
            self._fetcher.close()
        with self._lock:
            self._lru.clear()
            self._held = 0

    def __repr__(self) -> str:
        return (
            f"RangeReader(window={self.window}, coalesce_gap={self.coalesce_gap}, "
            f"lru_bytes={self.lru_bytes}, cache={self.cache!r})"
        )
