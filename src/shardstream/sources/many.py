"""Many GETs in flight for one consumer: the session a source hands out, and its outcomes.

``Source.get_many(window=)`` returns a :class:`ManyGets`: the consumer (the fetch loop of
:mod:`shardstream.objects`) submits URLs, each with a token of its own and optionally a byte range
(``offset``, ``length``; the whole object by default), waits, and gets back one :class:`Outcome`
per request, in the order they complete. An outcome is one of four kinds, so the consumer needs
no HTTP:

- ``OK``: ``body`` holds the object's bytes, or exactly the range's (fewer only where the
  object ends first, as for ``Source.open``; none for a range that starts at or past the end).
- ``THROTTLED``: the store asked to slow down (S3 503 SlowDown, 429); retry later, with fewer
  requests in flight.
- ``RETRY``: a transient fault (a timeout, a reset, a 5xx, an answer the fast path does not read);
  retry it through ``get_into``, which handles every case.
- ``FAILED``: final; ``error`` is the SourceError (or the exception) that names the URL and the
  fix, delivered in the object's place.

:class:`ThreadedGets` is the default, built from the source's ``get_into`` on a few threads of
its own (started lazily, up to ``window``); the stores whose requests we sign ourselves (S3,
GCS, Azure) override it with one thread on ``epoll`` (:mod:`._epoll_gets`). A session is driven
by one thread; only :meth:`ManyGets.wake` may be called from others.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from functools import partial
from typing import Any, Final, Protocol

from ..errors import TransientSourceError
from ..forks import gate
from ._status import is_throttle

__all__ = ["FAILED", "OK", "RETRY", "THROTTLED", "GetInto", "ManyGets", "Outcome", "ThreadedGets"]

OK: Final = "ok"
THROTTLED: Final = "throttled"
RETRY: Final = "retry"
FAILED: Final = "failed"


class GetInto(Protocol):
    """``get_into(url, sink, offset=, length=, size=)``: append bytes ``[offset, offset + length)``
    of ``url`` (to its end when ``length`` is ``None``) to ``sink``, bounded by ``size`` (the
    object's, when known) or the source's ``max_body`` (see ``SourceBase.get_into``)."""

    def __call__(
        self,
        url: str,
        sink: bytearray,
        *,
        offset: int = 0,
        length: int | None = None,
        size: int | None = None,
    ) -> object: ...


#: A request waiting for a thread of :class:`ThreadedGets`: token, URL, offset, length, size, when.
_Todo = tuple[object, str, int, int | None, int | None, float]


class Outcome:
    """What one GET of a :class:`ManyGets` came to.

    Attributes:
        token: what the consumer submitted with the URL.
        kind: ``OK``, ``THROTTLED``, ``RETRY`` or ``FAILED`` (see the module doc).
        body: the object's bytes, or the requested range's (``OK`` only).
        error: why it is not ``OK`` (a SourceError naming the URL, or the exception raised).
        started: when the request was sent (``time.monotonic()``), for latency estimates.
    """

    __slots__ = ("token", "kind", "body", "error", "started")

    def __init__(
        self, token: Any, kind: str, body: bytes, error: BaseException | None, started: float
    ) -> None:
        self.token: Any = token
        self.kind = kind
        self.body = body
        self.error = error
        self.started = started

    def __repr__(self) -> str:
        return f"Outcome(kind={self.kind!r}, bytes={len(self.body)}, error={self.error!r})"


class ManyGets(Protocol):
    """GETs of whole objects or byte ranges in flight, driven by one thread (``wake`` excepted)."""

    def submit(
        self, token: object, url: str, offset: int = 0, length: int | None = None, size: int | None = None
    ) -> Outcome | None:
        """Start fetching bytes ``[offset, offset + length)`` of ``url`` (the whole object by
        default; to its end when ``length`` is ``None``); its outcome comes from a later
        :meth:`wait`, or at once (returned here) when the request could not start or needs none
        (``length=0``). ``size``: the object's size when the caller knows it (a manifest's); an
        answer larger than the range, the size or, with neither, the source's ``max_body`` is
        ``FAILED`` with a ResponseTooLargeError, never allocated."""
        ...

    def wait(self) -> list[Outcome]:
        """Outcomes completed since the last call; blocks until there is one or :meth:`wake`."""
        ...

    def wake(self) -> None:
        """Make a :meth:`wait` in another thread return (thread-safe)."""
        ...

    def pause(self) -> None:
        """Nothing is in flight: keep connections and threads for the next use of this session."""
        ...

    def close(self) -> None:
        """Drop what is in flight and release connections and threads; the session is done."""
        ...

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        ...


class ThreadedGets:
    """The default :class:`ManyGets`: ``get_into`` on up to ``window`` threads of its own.

    Args:
        get_into: the source's single-object GET (a range through the source's ranged ``open``
            unless the source does better).
        window: threads at most (one per request in flight).
        retries_itself: ``get_into`` retries transient faults on its own (then every failure is
            ``FAILED``); otherwise a transient one is ``THROTTLED`` or ``RETRY`` for the caller.
    """

    def __init__(self, get_into: GetInto, *, window: int, retries_itself: bool) -> None:
        self._get_into = get_into
        self._window = window
        self._retries_itself = retries_itself
        # Two C-level queues, as in objects.FetchAhead: a cheap C call per hand-over, where a
        # Future and its condition variables cost many times more.
        self._todo: queue.SimpleQueue[_Todo | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._in_flight = 0
        self._closed = False
        # A session dropped without close() (its owner was collected) still ends its threads.
        weakref.finalize(self, _end_threads, self._todo, self._threads)

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(
        self, token: object, url: str, offset: int = 0, length: int | None = None, size: int | None = None
    ) -> Outcome | None:
        self._in_flight += 1
        self._todo.put((token, url, offset, length, size, time.monotonic()))
        if len(self._threads) < min(self._in_flight, self._window):
            work = partial(_work, self._get_into, self._retries_itself, self._todo, self._done)
            self._threads.append(gate.start(work, name=f"shardstream-get-many_{len(self._threads)}"))
        return None

    def wait(self) -> list[Outcome]:
        first = self._done.get()
        found = [] if first is None else [first]
        while True:
            try:
                more = self._done.get_nowait()
            except queue.Empty:
                break
            if more is not None:
                found.append(more)
        self._in_flight -= len(found)
        return found

    def wake(self) -> None:
        self._done.put(None)

    def pause(self) -> None:
        """Keep the threads (idle on the queue) for the next use."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while True:  # drop requests no thread has taken
            try:
                self._todo.get_nowait()
            except queue.Empty:
                break
        _end_threads(self._todo, self._threads)
        for thread in self._threads:
            thread.join()
        self._threads.clear()


def _end_threads(todo: queue.SimpleQueue[_Todo | None], threads: list[threading.Thread]) -> None:
    """Tell each of ``threads`` to end once it has taken what is before it in ``todo``."""
    for _ in threads:
        todo.put(None)


def _work(
    get_into: GetInto,
    retries_itself: bool,
    todo: queue.SimpleQueue[_Todo | None],
    done: queue.SimpleQueue[Outcome | None],
) -> None:
    """A thread of :class:`ThreadedGets`: requests from ``todo`` until None, outcomes to ``done``."""
    while True:
        item = todo.get()
        if item is None:
            return
        token, url, offset, length, size, started = item
        sink = bytearray()
        with gate.busy():  # a fork waits for a GET in flight (see shardstream.forks)
            try:
                get_into(url, sink, offset=offset, length=length, size=size)
            except TransientSourceError as exc:
                kind = FAILED if retries_itself else THROTTLED if is_throttle(exc) else RETRY
                done.put(Outcome(token, kind, b"", exc, started))
            except BaseException as exc:  # delivered in the object's place
                done.put(Outcome(token, FAILED, b"", exc, started))
            else:
                done.put(Outcome(token, OK, bytes(sink), None, started))
