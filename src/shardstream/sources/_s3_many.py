"""``S3Source.get_many``: whole objects many at a time on one thread's ``epoll`` loop, with typed outcomes.

The consumer's own thread writes each object's signed GET on a connection of the source's
whole-body pool and reads the answers that ``epoll`` reports (:mod:`shardstream.net.multiplex`),
so no thread is woken per request. Each answer becomes an :class:`~.many.Outcome` here, the one
place where the fetch path's HTTP statuses are read:

- a 2xx with the whole body: ``OK``;
- 503 SlowDown or 429: ``THROTTLED`` (the caller lowers its requests in flight and retries);
- a transport error, an answer the loop does not read (chunked, a cut, a timeout), 408 or a 5xx:
  ``RETRY`` (the caller retries through ``get_into``, which handles every case);
- any other status (403, 404, a redirect): ``FAILED``, with the same error ``get_into`` raises.

The loop is borrowed from the pool on first use and parked there again by :meth:`S3Gets.pause`,
with its connections still registered, so a map-style dataset's next batch starts without
setting them up again.
"""

from __future__ import annotations

import time
from typing import Protocol

from ..errors import SourceError, TransientSourceError
from ..net.idle import Key
from ..net.multiplex import Answer, Multiplexer, borrow
from ..net.whole import WholeBodyPool
from ._s3_errors import code_in, s3_error
from ._status import THROTTLE_STATUSES, TRANSIENT_STATUSES
from .many import FAILED, OK, RETRY, THROTTLED, Outcome

__all__ = ["S3Gets", "outcome_of"]


class WholeGets(Protocol):
    """What :class:`S3Gets` needs of its source (an :class:`~.s3.S3Source`)."""

    whole: WholeBodyPool
    endpoint_url: str

    def get_request(self, url: str) -> tuple[Key, bytes]: ...

    def translate(self, exc: BaseException, url: str, action: str = "open") -> SourceError: ...


class S3Gets:
    """A :class:`~.many.ManyGets` over a multiplexer of ``source``'s whole-body pool."""

    def __init__(self, source: WholeGets) -> None:
        self._source = source
        self._multi: Multiplexer | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, token: object, url: str) -> Outcome | None:
        multi = self._multi
        if multi is None:  # the loop parked by the last session, with its connections
            multi = self._multi = borrow(self._source.whole)
        try:
            address, request = self._source.get_request(url)
        except SourceError as exc:  # (a bad key or credentials, already translated)
            kind = RETRY if isinstance(exc, TransientSourceError) else FAILED
            return Outcome(token, kind, b"", exc, time.monotonic())
        failed = multi.submit((token, url), address, request)
        if failed is None:
            return None
        return outcome_of(failed, self._source)

    def wait(self) -> list[Outcome]:
        multi = self._multi
        if multi is None:  # (nothing submitted yet: block on a loop, as for requests in flight)
            multi = self._multi = borrow(self._source.whole)
        source = self._source
        found = []
        for answer in multi.wait(None):
            status = answer.status
            if answer.error is None and 200 <= status < 300:
                found.append(Outcome(answer.token[0], OK, answer.body, None, answer.sent))
            else:
                found.append(outcome_of(answer, source))
        return found

    def wake(self) -> None:
        multi = self._multi
        if multi is not None:
            multi.wake()

    def pause(self) -> None:
        multi, self._multi = self._multi, None
        if multi is not None:
            multi.park()

    def close(self) -> None:
        self._closed = True
        multi, self._multi = self._multi, None
        if multi is not None:
            multi.close()


def outcome_of(answer: Answer, source: WholeGets) -> Outcome:
    """The outcome of an answer that is not a plain success (see the module doc)."""
    token, url = answer.token
    if answer.error is not None:
        return Outcome(token, RETRY, b"", source.translate(answer.error, url), answer.sent)
    status = answer.status
    error = s3_error(status, code_in(answer.body), url, endpoint=source.endpoint_url)
    if status in THROTTLE_STATUSES:
        kind = THROTTLED
    elif status in TRANSIENT_STATUSES or status >= 500:
        kind = RETRY
    else:
        kind = FAILED
    return Outcome(token, kind, b"", error, answer.sent)
