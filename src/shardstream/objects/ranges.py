"""Batches of byte ranges through the fetch engine: one ``get_many`` session per process and scheme.

:class:`RangeFetcher` is what ``shardstream.ShardDataset`` reads its runs of samples with: a
batch of ``(url, offset, length)`` requests goes to :func:`~.fetch_loop.loop_fetch` as one job
per request, over the source's ``get_many`` session (for ``s3://`` one ``epoll`` loop on the
calling thread, a ranged GET costing what an object GET costs; for other sources the source's
ranged ``open`` on threads of the session). Faults take the objects' rules
(:class:`~._get.ObjectGetter`): ``THROTTLED`` halves the requests in flight
(:class:`~._aimd.Concurrency`) and retries, ``RETRY`` retries and resumes within the range,
``FAILED`` is delivered in the request's place.

Sessions are kept between batches (a paused S3 session keeps its loop and connections parked on
the pool), one per scheme; a second thread that fetches while the first one's session is busy
gets a session of its own (a session is driven by one thread). A forked or unpickled copy starts
with none: the parent's loops and threads are not its own.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from ..sources import ManyGets, Source, scheme_of
from ._aimd import Concurrency
from ._get import ObjectGetter
from .fetch import DEFAULT_MAX_BYTES, DEFAULT_WINDOW
from .fetch_loop import DEFAULT_GATHER, FetchRun, Request, loop_fetch

__all__ = ["RangeFetcher"]


#: A byte range to fetch: ``(url, offset, length)`` (to the object's end when ``length`` is ``None``).
Range = tuple[str, int, int | None]


class _Batch:
    """A batch of ranges as :class:`~.fetch_loop.Jobs`: job ``i`` is range ``i``, field ``""``
    (its answer bounded by its length, or by ``max_body`` when it runs to the object's end)."""

    __slots__ = ("requests",)

    def __init__(self, requests: Sequence[Range]) -> None:
        self.requests = requests

    def job(self, i: int) -> tuple[dict[str, Any], Sequence[tuple[str, Request]], int]:
        url, offset, length = self.requests[i]
        return {}, (("", (url, offset, length, None)),), length if length is not None else 0


class RangeFetcher:
    """Fetches batches of byte ranges for the process it is used in (see the module doc).

    Args:
        source: what the URLs are read with (a :class:`~shardstream.sources.SchemeRouter` routes
            each scheme to its own source, and so to its own ``get_many``).
        window: requests in flight at most (default 32); halved while the store throttles.
        gather: the fetch loop's longest pause to gather answers under load, in seconds
            (default 0.002; see :mod:`.fetch_loop`).
    """

    def __init__(
        self, source: Source, *, window: int = DEFAULT_WINDOW, gather: float = DEFAULT_GATHER
    ) -> None:
        self.source = source
        self.window = window
        self.gather = gather
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._stop = threading.Event()
        self.concurrency = Concurrency(self.window)
        self.getter = ObjectGetter(None, self.concurrency, self._stop, source=self.source)
        self._free: dict[str, list[ManyGets]] = collections.defaultdict(list)  # idle sessions
        self._lock = threading.Lock()
        # A fetcher dropped without close() (its dataset was collected) still closes its sessions:
        # their threads end and their sockets close instead of lingering until exit.
        weakref.finalize(self, _close_sessions, self._free, self._pid)

    def __getstate__(self) -> dict[str, Any]:
        return {"source": self.source, "window": self.window, "gather": self.gather}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    @property
    def requests(self) -> int:
        """GETs sent by this process (retries included)."""
        return self.getter.requests

    @property
    def throttles(self) -> int:
        """503 SlowDown / 429 answers seen by this process (each one retried)."""
        return self.concurrency.throttles

    def fetch(self, requests: Sequence[Range]) -> list[bytes | BaseException]:
        """The bytes of each ``(url, offset, length)``, in order (fewer where the object ends
        first); a request that failed gets its exception (a SourceError naming the URL)."""
        if self._pid != os.getpid():  # a forked copy: the parent's sessions are not ours
            self._reset()
        out: list[bytes | BaseException] = [b""] * len(requests)
        by_scheme: dict[str, list[int]] = collections.defaultdict(list)
        for k, (url, _, _) in enumerate(requests):
            by_scheme[scheme_of(url)].append(k)
        for scheme, positions in by_scheme.items():
            batch = [requests[k] for k in positions]
            gets = self._take(scheme, batch[0][0])
            run = FetchRun(
                _Batch(batch),
                self.getter,
                self.concurrency,
                self._stop,
                self.window,
                DEFAULT_MAX_BYTES,
                False,
                self.gather,
            )
            for j, got in loop_fetch(run, gets, range(len(batch))):
                out[positions[j]] = got if isinstance(got, BaseException) else got[""]
            if not gets.closed:
                with self._lock:
                    self._free[scheme].append(gets)
        return out

    def _take(self, scheme: str, url: str) -> ManyGets:
        """An idle session for ``scheme`` (the one kept from the last batch), or a new one."""
        with self._lock:
            free = self._free[scheme]
            while free:
                gets = free.pop()
                if not gets.closed:
                    return gets
        return self.getter.source_for(url).get_many(window=self.window)

    def close(self) -> None:
        """Close this process's sessions (their threads and connections; a later fetch opens
        others)."""
        with self._lock:
            sessions = [gets for free in self._free.values() for gets in free]
            self._free.clear()
        if self._pid == os.getpid():
            for gets in sessions:
                gets.close()

    def __repr__(self) -> str:
        return f"RangeFetcher(window={self.window}, source={self.source!r})"


def _close_sessions(free: dict[str, list[ManyGets]], pid: int) -> None:
    """Close the idle sessions of a collected fetcher (in the process that opened them)."""
    if pid != os.getpid():
        return
    for sessions in list(free.values()):
        for gets in sessions:
            gets.close()
    free.clear()
