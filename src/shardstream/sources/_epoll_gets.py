"""``get_many`` of the stores we sign requests for ourselves (``s3://``, ``gs://``, ``az://``):
objects or byte ranges many at a time on one thread's ``epoll`` loop.

The consumer's own thread writes each object's authorized GET (built by the source's
``get_request``: SigV4, a bearer token, Shared Key or a SAS) on a connection of the source's
whole-body pool and reads the answers that ``epoll`` reports (:mod:`shardstream.net.multiplex`),
so no thread is woken per request. Each answer becomes an :class:`~.many.Outcome` here, the one
place where the fetch path's HTTP statuses are read (the source only words the error of a
status, :meth:`EpollSource.answer_error`):

- a 2xx with the whole body: ``OK``;
- for a byte range (a ``Range`` header, unsigned: see :meth:`~._s3_signing.S3Addressing.get_request`):
  a 206 whose ``Content-Range`` starts at the asked offset and whose body holds the asked bytes
  (fewer only where the object ends): ``OK``; a 206 with other bytes: ``RETRY``; a 416 (the range
  starts at or past the object's end): ``OK`` with no bytes, as ``Source.open`` reads there;
  a 200 (the server ignored ``Range`` and sent the whole object): ``OK`` with the range cut out
  of it. A 200 is the object itself, so its bytes are right, and they are already here;
  ``RETRY`` would ask the same server the same way and get the same whole object again;
- 503 SlowDown or 429: ``THROTTLED`` (the caller lowers its requests in flight and retries);
- a transport error, an answer the loop does not read (chunked, a cut, a timeout), 408, a 5xx,
  or a status the source calls transient (a ``TransientSourceError``, e.g. GCS's 401 to a
  bearer token that ``get_into`` refreshes): ``RETRY`` (the caller retries through ``get_into``,
  which handles every case);
- any other status (403, 404, a redirect): ``FAILED``, with the same error ``get_into`` raises;
  so is an answer larger than the request may take (:func:`expect`: the range's length, the
  object's size, else ``max_body``), refused before it is allocated: asked again, the server
  would say the same.

The loop is borrowed from the pool on first use and parked there again by :meth:`EpollGets.pause`,
with its connections still registered, so a map-style dataset's next batch starts without
setting them up again.
"""

from __future__ import annotations

import time
from typing import Protocol

from ..errors import ResponseTooLargeError, SourceError, TransientSourceError, redact_url
from ..net.idle import Key
from ..net.multiplex import Answer, Multiplexer, borrow
from ..net.whole import Expect, WholeBodyPool
from ._status import THROTTLE_STATUSES, TRANSIENT_STATUSES
from .many import FAILED, OK, RETRY, THROTTLED, Outcome

__all__ = [
    "EpollGets",
    "EpollSource",
    "content_range",
    "expect",
    "header_value",
    "outcome_of",
    "settle_range",
]


class EpollSource(Protocol):
    """What :class:`EpollGets` needs of its source (``S3Source``, ``GCSSource``, ``AzureSource``)."""

    whole: WholeBodyPool

    def get_request(self, url: str, offset: int = 0, length: int | None = None) -> tuple[Key, bytes]:
        """``(address, request bytes)`` of one authorized GET of ``url``: the whole object, or
        bytes ``[offset, offset + length)`` with a ``Range`` header (to the end when ``length``
        is ``None``). Raises SourceError (a bad URL, missing credentials)."""
        ...

    def translate(self, exc: BaseException, url: str) -> SourceError:
        """The error for a network exception on ``url``."""
        ...

    def answer_error(self, status: int, head: bytes, body: bytes, url: str) -> SourceError:
        """The error for an error ``status`` of a GET of ``url`` (``head``: the answer's header
        block, lower-cased; ``body``: its body, empty when the loop could not read it); a
        TransientSourceError makes the GET a ``RETRY``."""
        ...


class EpollGets:
    """A :class:`~.many.ManyGets` over a multiplexer of ``source``'s whole-body pool."""

    def __init__(self, source: EpollSource) -> None:
        self._source = source
        self._multi: Multiplexer | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(
        self, token: object, url: str, offset: int = 0, length: int | None = None, size: int | None = None
    ) -> Outcome | None:
        multi = self._multi
        if multi is None:  # the loop parked by the last session, with its connections
            multi = self._multi = borrow(self._source.whole)
        try:
            address, request = self._source.get_request(url, offset, length)
        except SourceError as exc:  # (a bad key or credentials, already translated)
            kind = RETRY if isinstance(exc, TransientSourceError) else FAILED
            return Outcome(token, kind, b"", exc, time.monotonic())
        bound = expect(offset, None if length is None else offset + length, size)
        failed = multi.submit((token, url, offset, length), address, request, bound)
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
            _, _, offset, length = answer.token
            if offset or length is not None:
                found.append(range_outcome(answer, source))
            elif answer.error is None and 200 <= status < 300:
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


def range_outcome(answer: Answer, source: EpollSource) -> Outcome:
    """The outcome of the answer to a ranged GET (see the module doc)."""
    token, url, offset, length = answer.token
    status = answer.status
    if status == 416:  # the range starts at or past the object's end: no bytes there (whether
        return Outcome(token, OK, b"", None, answer.sent)  # or not the loop read its error body)
    if answer.error is not None or not 200 <= status < 300:
        return outcome_of(answer, source)
    body = answer.body
    if status != 206:  # the whole object: the server ignored the Range
        end = len(body) if length is None else offset + length
        return Outcome(token, OK, body[offset:end], None, answer.sent)
    found = content_range(header_value(answer.head, b"content-range"))
    total = found[2] if found is not None else None
    size = total if total is not None else offset + len(body)
    want = max(0, (size if length is None else min(offset + length, size)) - offset)
    if found is None or found[0] != offset or len(body) < want:
        shown = "none" if found is None else f"bytes {found[0]}-{found[1]}/{'*' if total is None else total}"
        asked = f"{offset}-" if length is None else f"{offset}-{offset + length - 1}"
        error = TransientSourceError(
            f"{redact_url(url)}: a GET of bytes {asked} was answered with Content-Range {shown} "
            f"and {len(body)} bytes; retried (if it persists, the server or a proxy in front of it "
            "mishandles Range requests)",
            url=url,
        )
        return Outcome(token, RETRY, b"", error, answer.sent)
    return Outcome(token, OK, body if len(body) == want else body[:want], None, answer.sent)


def expect(at: int, end: int | None, size: int | None) -> Expect | None:
    """The body sizes a GET of bytes ``[at, end)`` (``end=None``: to the object's end) of an object
    of ``size`` bytes (``None``: unknown) may take (:class:`~shardstream.net.whole.Expect`), or
    ``None`` when nothing is known (the pool's ``max_body`` bounds it). An empty range asks for one
    byte (:func:`~._resume.range_header`), so a 206 may carry one."""
    if end is None and size is None:
        return None
    if end is not None:
        part: int | None = max(end - at, 1)
    else:
        part = None if size is None else max(size - at, 1)
    return Expect(whole=size, part=part)


def content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """``(first, last, total)`` of a ``Content-Range: bytes first-last/total`` value (``total``
    is ``None`` for ``*``), or ``None`` when there is none to read."""
    unit, _, spec = (value or "").strip().partition(" ")
    span, _, total = spec.partition("/")
    first, _, last = span.partition("-")
    if unit.lower() != "bytes" or not first.isdigit() or not last.isdigit():
        return None
    return int(first), int(last), int(total) if total.isdigit() else None


def settle_range(
    status: int, found: str | None, sink: bytearray, start: int, at: int, end: int | None, url: str
) -> None:
    """Leave in ``sink[start:]`` exactly bytes ``[at, end)`` of a 2xx answer to a GET from byte
    ``at`` (``found``: its ``Content-Range``), as :func:`range_outcome` reads answers: a 200 (the
    server ignored ``Range``) is the whole object, cut to the range; a 206 must start at ``at``,
    else the bytes are dropped and a TransientSourceError raised (the GET is retried); the
    ``get_into`` of every source on the whole-body client ends with this."""
    if status == 200 and at:  # the server ignored the Range: the body is the whole object
        del sink[start : start + at]
    elif status == 206:
        first = content_range(found)
        if first is None or first[0] != at:
            del sink[start:]
            raise TransientSourceError(
                f"{redact_url(url)}: a GET of bytes {at}-{'' if end is None else end - 1} was "
                f"answered with Content-Range {found!r}; retried (if it persists, the server or a "
                "proxy in front of it mishandles Range requests)",
                url=url,
            )
    if end is not None and len(sink) - start > end - at:  # (an empty range asked for one byte)
        del sink[start + end - at :]


def header_value(head: bytes, name: bytes) -> str | None:
    """The value of header ``name`` (lower case) in a lower-cased header block."""
    at = head.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    at += len(name) + 3
    stop = head.find(b"\r\n", at)
    return (head[at:] if stop < 0 else head[at:stop]).decode("latin-1").strip()


def outcome_of(answer: Answer, source: EpollSource) -> Outcome:
    """The outcome of an answer that is not a plain success (see the module doc). An error
    answer whose body the loop does not read (Azurite sends errors chunked) is still final when
    its status is: the status line and headers were read."""
    token, url = answer.token[:2]
    status = answer.status
    if answer.error is not None and (
        status < 300 or status in THROTTLE_STATUSES or status in TRANSIENT_STATUSES or status >= 500
    ):
        error = source.translate(answer.error, url)
        if isinstance(error, ResponseTooLargeError):  # refused as the blocking client would
            return Outcome(token, FAILED, b"", error, answer.sent)
        return Outcome(token, RETRY, b"", error, answer.sent)
    error = source.answer_error(status, answer.head, answer.body, url)
    if status in THROTTLE_STATUSES:
        kind = THROTTLED
    elif status in TRANSIENT_STATUSES or status >= 500 or isinstance(error, TransientSourceError):
        kind = RETRY
    else:
        kind = FAILED
    return Outcome(token, kind, b"", error, answer.sent)
