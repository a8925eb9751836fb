"""A reader that survives connection faults: it retries and resumes from the exact byte offset.

Contract of an :data:`Opener`: ``opener(offset, etag)`` starts a fresh request for the object from
``offset`` (a byte-range request when ``offset > 0``) and, when ``etag`` is given, asks the server
to refuse if the object is no longer that version (``If-Match``). The opener of a ranged stream
has the range's end bound in and asks for ``bytes=offset-(end-1)``, so a resume never reads past
the range; a range that starts at or past the object's end (HTTP 416) gives an empty body. It
returns an :class:`Opened` holding the body stream and the object's *total* size and ETag, or
raises: a :class:`~shardstream.errors.SourceError` subclass, or any third-party exception, which
the source's ``translate`` function maps to one. Only
:class:`~shardstream.errors.TransientSourceError` is retried; everything else fails at once.

Logging (logger ``shardstream.sources``, stable formats): one INFO line per open,
``open <url> offset=<n> size=<n|None>`` (a ranged stream adds ``length=<n>``), and one WARNING
per retry, ``retry <k>/<max> for <url> at offset <n> in <delay>s: <error>``. URLs are redacted.

Rejected option: retrying inside each SDK (botocore/urllib3 retries). Those retry whole requests
but not a body that breaks half-way, which is exactly the fault that loses or duplicates samples.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..errors import ObjectChangedError, SourceError, TransientSourceError, redact_url
from ..faults import FAULTS
from ._retry import RetryPolicy
from ._status import is_throttle

__all__ = [
    "EmptyBody",
    "ObjectChangedError",
    "Opened",
    "Opener",
    "RawBody",
    "ResumableReader",
    "Translate",
    "range_header",
]

log = logging.getLogger("shardstream.sources")


class RawBody(Protocol):
    """The body of one response: filled with ``readinto``, released with ``close``."""

    def readinto(self, buffer: memoryview, /) -> int: ...

    def close(self) -> None: ...


class EmptyBody:
    """The body of a range that starts at or past the object's end (HTTP 416)."""

    def readinto(self, buffer: memoryview, /) -> int:
        return 0

    def close(self) -> None:
        pass


def range_header(offset: int, end: int | None) -> str | None:
    """The ``Range`` header for bytes ``[offset, end)`` (``end=None``: to the end), or ``None``.

    An empty range (``end == offset``) asks for one byte, which is never read: the request still
    checks that the object exists, as every ``open`` does.
    """
    if end is None:
        return f"bytes={offset}-" if offset else None
    return f"bytes={offset}-{max(end - 1, offset)}"


@dataclass
class Opened:
    """One successful request: its body and what it said about the whole object."""

    body: RawBody
    size: int | None
    etag: str | None


#: ``opener(offset, etag) -> Opened``; see the module docstring.
Opener = Callable[[int, "str | None"], Opened]
#: Maps a third-party exception to the matching shardstream error.
Translate = Callable[[BaseException], SourceError]


class ResumableReader(io.RawIOBase):
    """A read-only binary stream over an :data:`Opener` that resumes after transient faults.

    Every byte is delivered exactly once: after a fault the reader re-requests the object from the
    offset it has already returned, checking that size and ETag are unchanged (and sending
    ``If-Match``), and raises :class:`ObjectChangedError` when they differ. The retry budget is
    ``policy.attempts`` consecutive failures (reset once bytes flow again) and
    ``policy.deadline`` seconds spent retrying over the life of the stream; until the first byte
    arrives, ``policy.first_byte_deadline`` seconds from the first request (a silent server fails
    fast, a transfer that is making progress keeps its long retries).

    Args:
        url: the URL, for messages and logs (credentials are stripped).
        opener: starts a request from an offset; see the module docstring.
        translate: maps exceptions raised by ``opener`` or a body to shardstream errors.
        offset: first byte to deliver (default 0).
        length: bytes to deliver at most (default ``None``: to the end of the object); the
            ``opener`` must have the range's end bound in (see the module docstring).
        policy: retry policy (default: from the ``SHARDSTREAM_*`` settings).
    """

    def __init__(
        self,
        url: str,
        opener: Opener,
        *,
        translate: Translate,
        offset: int = 0,
        length: int | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__()
        self.url = redact_url(url)
        self._opener = opener
        self._translate = translate
        self._policy = policy if policy is not None else RetryPolicy.from_options()
        self._pos = offset
        self._end = None if length is None else offset + length
        self._body: RawBody | None = None
        self.size: int | None = None
        self.etag: str | None = None
        self.retries = 0  # total retries over the stream's life, for tests and stats
        self._failures = 0  # consecutive failures since bytes last flowed
        self._born = time.monotonic()  # the first-byte budget counts from the first request
        self._flowed = False  # a byte has been delivered: the long retry budget applies
        self._retry_time = 0.0  # seconds spent in finished failure episodes
        self._episode: float | None = None  # monotonic time of the first failure of the current episode
        self._first = True
        self._open()

    # -- io.RawIOBase -----------------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError(f"read from a closed stream ({self.url})")
        view = memoryview(buffer).cast("B")
        stop = self._stop()
        if stop is not None:
            view = view[: max(0, stop - self._pos)]
        if not len(view):
            return 0
        while True:
            if self._body is None:
                self._open()
                assert self._body is not None
            try:
                n = self._body.readinto(view)
            except SourceError as exc:
                self._fail(exc, exc)
                continue
            except Exception as exc:
                self._fail(self._translate(exc), exc)
                continue
            if n == 0 and self.size is not None and stop is not None and self._pos < stop:
                # The object's size is known, so an early end is a cut connection, not the end.
                err = TransientSourceError(
                    f"connection to {self.url} closed at byte {self._pos} of {stop}", url=self.url
                )
                self._fail(err, None)
                continue
            if n:
                self._pos += n
                self._flowed = True
                if self._episode is not None:  # recovered: bytes flow again
                    self._retry_time += time.monotonic() - self._episode
                    self._episode = None
                    self._failures = 0
            return n

    def close(self) -> None:
        """Release the connection now (an unread body is dropped, not drained)."""
        if not self.closed:
            self._drop_body()
        super().close()

    # -- internals --------------------------------------------------------------------------------

    def _stop(self) -> int | None:
        """Where this stream ends: the range's end or the object's, whichever comes first."""
        if self._end is None:
            return self.size
        return self._end if self.size is None else min(self._end, self.size)

    def _drop_body(self) -> None:
        body, self._body = self._body, None
        if body is not None:
            try:
                body.close()
            except Exception:  # closing a broken connection may fail; it is gone either way
                log.debug("ignoring error while closing %s", self.url, exc_info=True)

    def _open(self) -> None:
        while True:
            try:
                opened = self._opener(self._pos, self.etag)
            except SourceError as exc:
                self._fail(exc, exc)
                continue
            except Exception as exc:
                self._fail(self._translate(exc), exc)
                continue
            break
        if self._first:
            self._first = False
            self.size, self.etag = opened.size, opened.etag
            if self._end is None:
                log.info("open %s offset=%d size=%s", self.url, self._pos, self.size)
            else:
                log.info(
                    "open %s offset=%d size=%s length=%d",
                    self.url,
                    self._pos,
                    self.size,
                    self._end - self._pos,
                )
        elif (opened.etag and self.etag and opened.etag != self.etag) or (
            opened.size is not None and self.size is not None and opened.size != self.size
        ):
            opened.body.close()
            raise ObjectChangedError(
                f"{self.url} changed while it was being read (size {self.size} -> {opened.size}, "
                f"ETag {self.etag} -> {opened.etag}); resuming at byte {self._pos} would mix two "
                "versions. Do not overwrite shards while they are being read; read the shard again.",
                url=self.url,
                status=412,
            )
        self._body = opened.body

    def _fail(self, error: SourceError, cause: BaseException | None) -> None:
        """Retry after ``error`` if it is transient and the budget allows, else raise it."""
        self._drop_body()
        if not isinstance(error, TransientSourceError):
            if cause is error:  # already a shardstream error: keep its own cause chain
                raise error
            raise error from cause
        self._failures += 1
        now = time.monotonic()
        if self._episode is None:
            self._episode = now
        if self._flowed:
            # Time already spent retrying, including failed connects and timeouts, over the stream's life.
            spent = self._retry_time + (now - self._episode)
            deadline = self._policy.deadline
        else:  # nothing received yet: the (shorter) first-byte budget, counted from the first request
            spent = now - self._born
            deadline = min(self._policy.deadline, self._policy.first_byte_deadline)
        delay = self._policy.next_delay(self._failures, now - spent, deadline)
        if delay is None:
            if self._flowed or spent < deadline:
                fix = (
                    "The server or network kept failing: check that the endpoint is reachable, or "
                    "raise retries=/retry_deadline= (SHARDSTREAM_RETRIES / SHARDSTREAM_RETRY_DEADLINE)."
                )
            else:
                fix = (
                    f"Nothing arrived within first_byte_deadline={self._policy.first_byte_deadline:g}s: "
                    "the server accepts connections but does not answer, or answers very slowly. "
                    "Check the server, or raise first_byte_deadline=/response_timeout= in "
                    "storage_options."
                )
            given_up = TransientSourceError(
                f"giving up on {self.url} at byte {self._pos} after {self._failures} failed attempts "
                f"and {spent:.1f}s of retrying; last error: {error}. {fix}",
                url=self.url,
                status=error.status,
            )
            raise given_up from (cause or error)
        self.retries += 1
        FAULTS.retry(throttled=is_throttle(error))
        log.warning(
            "retry %d/%d for %s at offset %d in %.2fs: %s",
            self._failures, self._policy.attempts - 1, self.url, self._pos, delay, error,
        )  # fmt: skip
        self._policy.sleep(delay)
