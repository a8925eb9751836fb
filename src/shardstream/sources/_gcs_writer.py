"""Writing ``gs://`` objects: a streamed resumable upload that publishes on ``close()`` only.

The upload session is opened when the first chunk is full (``POST .../o?uploadType=resumable``;
its URI comes back in ``Location``). Chunks are ``chunk_size`` bytes (a multiple of 256 KiB) sent
with ``Content-Range: bytes a-b/*``; the last one carries the total, and only then does GCS create
the object. An object smaller than one chunk is sent whole in one request at ``close()``
(``uploadType=media``). :meth:`GCSWriter.abort` cancels the session (``DELETE``, answered 499), so
no object appears.

Faults: when a chunk's request fails (a cut connection, a timeout, 408/429/5xx), the session is
asked how much it has (an empty ``PUT`` with ``Content-Range: bytes */*``, answered 308 with
``Range: bytes=0-N``) and the chunk is sent again from there, as Google's documentation and
client libraries do; the upload is never restarted. The chunk is kept until the server has
acknowledged it. GCS may also persist fewer bytes than a chunk held (its 308 says so): the rest
is sent again with the next chunk.

fake-gcs-server (1.x, issues #1362 and #2354) does not answer that status query: it completes
the upload instead. A writer that sees a session complete before its last chunk raises a
SourceError saying so; nothing is silently truncated.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import quote

from ..errors import SourceError, TransientSourceError, redact_url
from ..net.pool import PooledBody
from ._gcs_errors import error_detail
from ._retry import RetryPolicy
from ._status import TRANSIENT_STATUSES
from .base import PartedWriter

__all__ = ["GCSWriter", "UploadTarget"]

_Bytes = bytes | bytearray | memoryview


class UploadTarget(Protocol):
    """What a :class:`GCSWriter` needs of its source (a :class:`~.gcs.GCSSource`)."""

    chunk_size: int
    policy: RetryPolicy

    def object_url(self, bucket: str, key: str = "", *, media: bool = False, upload: bool = False) -> str: ...

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> PooledBody: ...

    def error(self, status: int, url: str, detail: str, *, action: str = "open") -> SourceError: ...

    def translate(self, exc: BaseException, url: str) -> SourceError: ...

    def body_limit(self) -> int: ...


class _Answer:
    """Status, headers and body of one finished response."""

    def __init__(self, body: PooledBody, limit: int) -> None:
        resp = body.response
        self.status = resp.status
        self.location = resp.getheader("Location")
        self.range = resp.getheader("Range")
        try:
            self.data = body.read_all(limit)
        finally:
            body.close()


def _committed(range_value: str | None) -> int:
    """Bytes a session holds, from a 308's ``Range: bytes=0-N`` (none: nothing yet)."""
    if not range_value:
        return 0
    last = range_value.rpartition("-")[2].strip()
    if not last.isdigit():
        raise TransientSourceError(f"unreadable Range {range_value!r} in a resumable upload's answer")
    return int(last) + 1


class GCSWriter(PartedWriter):
    """A write-only stream that uploads to GCS in chunks of ``source.chunk_size`` bytes.

    At most one chunk (plus what the server has not acknowledged) is held in memory. Leaving a
    ``with`` block by an exception, or :meth:`abort`, cancels the upload: nothing is published.
    """

    def __init__(self, source: UploadTarget, url: str, bucket: str, key: str) -> None:
        super().__init__()
        self._source = source
        self.url = url
        self._bucket = bucket
        self._key = key
        self._buffer = bytearray()  # bytes from offset _sent on, not yet acknowledged
        self._sent = 0  # bytes the session holds
        self._session: str | None = None
        self.size = 0
        self.queries = 0  # status queries after faults, for tests and stats

    def _part_size(self) -> int:
        return self._source.chunk_size

    def _send_part(self, size: int) -> None:
        self._send(size, final=False)

    def _finish(self) -> None:
        """Send what is buffered and finish the upload; the object is visible afterwards."""
        if self._session is None:
            self._simple_upload()
        else:
            self._send(len(self._buffer), final=True)

    def abort(self) -> None:
        """Cancel the upload session; nothing becomes visible."""
        session, self._session = self._session, None
        self._buffer = bytearray()
        if session is not None:
            try:  # GCS answers 499; an unfinished session also expires after a week
                self._source.request("DELETE", session, {"Content-Length": "0"}).close()
            except Exception:
                pass
        if not self.closed:
            self._close_unpublished()

    # -- requests ---------------------------------------------------------------------------------

    def _call(self, method: str, target: str, headers: dict[str, str], body: bytes) -> _Answer:
        """One request; network errors and transient statuses become TransientSourceError."""
        try:
            answer = _Answer(self._source.request(method, target, headers, body), self._source.body_limit())
        except SourceError:
            raise
        except Exception as exc:
            raise self._source.translate(exc, self.url) from exc
        if answer.status in TRANSIENT_STATUSES or answer.status >= 500:
            raise self._failure(answer)
        return answer

    def _failure(self, answer: _Answer) -> SourceError:

        return self._source.error(answer.status, self.url, error_detail(None, answer.data), action="write")

    def _retrying(self, step: str, attempt: Callable[[], _Answer]) -> _Answer:
        """``attempt()`` until it returns, retrying TransientSourceError within the policy."""
        policy = self._source.policy
        started = time.monotonic()
        failures = 0
        while True:
            try:
                return attempt()
            except TransientSourceError as exc:
                failures += 1
                delay = policy.next_delay(failures, started)
                if delay is None:
                    raise TransientSourceError(
                        f"giving up writing {redact_url(self.url)} ({step}) after {failures} failed "
                        f"attempts; last error: {exc}. Check the endpoint, or raise retries=/retry_deadline=",
                        url=self.url,
                        status=exc.status,
                    ) from exc
                policy.sleep(delay)

    def _simple_upload(self) -> None:
        """The whole (small) object in one request."""
        target = (
            self._source.object_url(self._bucket, upload=True)
            + f"?uploadType=media&name={quote(self._key, safe='')}"
        )
        data = bytes(self._buffer)
        headers = {"Content-Type": "application/octet-stream"}

        def attempt() -> _Answer:
            return self._call("POST", target, headers, data)

        answer = self._retrying("upload", attempt)
        if answer.status >= 300:
            raise self._failure(answer)

    def _start(self) -> str:
        target = (
            self._source.object_url(self._bucket, upload=True)
            + f"?uploadType=resumable&name={quote(self._key, safe='')}"
        )
        headers = {"Content-Type": "application/json", "X-Upload-Content-Type": "application/octet-stream"}

        def attempt() -> _Answer:
            return self._call("POST", target, headers, b"{}")

        answer = self._retrying("start of the upload", attempt)
        if answer.status >= 300:
            raise self._failure(answer)
        if not answer.location:
            raise SourceError(
                f"cannot write {redact_url(self.url)}: the server started a resumable upload without "
                "a Location header (is endpoint_url a GCS JSON API?)",
                url=self.url,
            )
        return answer.location

    def _send(self, count: int, *, final: bool) -> None:
        """Send the first ``count`` buffered bytes (``final``: they end the object) until the
        session holds them, asking it where it stands after every fault."""
        if self._session is None:
            self._session = self._start()
        session = self._session
        policy = self._source.policy
        total = self._sent + len(self._buffer)
        goal = self._sent + count
        failures = 0
        started = time.monotonic()
        while True:
            start = self._sent
            part = bytes(self._buffer[: goal - start])
            end = f"{total}" if final else "*"
            spec = f"bytes {start}-{start + len(part) - 1}/{end}" if part else f"bytes */{end}"
            try:
                answer = self._call("PUT", session, {"Content-Range": spec}, part)
            except TransientSourceError as exc:
                failures += 1
                delay = policy.next_delay(failures, started)
                if delay is None:
                    raise TransientSourceError(
                        f"giving up writing {redact_url(self.url)} at byte {start} after {failures} "
                        f"failed attempts; last error: {exc}. Check the endpoint, or raise "
                        "retries=/retry_deadline=",
                        url=self.url,
                        status=exc.status,
                    ) from exc
                policy.sleep(delay)
                answer = self._retrying("status query", self._query)
            if answer.status in (200, 201):  # the object is complete
                size = _size_of(answer.data)
                if not final or (size is not None and size != total):
                    raise SourceError(
                        f"cannot write {redact_url(self.url)}: the server completed the upload with "
                        f"{size if size is not None else start} of {total if final else 'more'} bytes "
                        "(fake-gcs-server does so when a resumable upload's status is queried, "
                        "its issue #1362). The object there is incomplete: write it again",
                        url=self.url,
                    )
                self._sent = total
                del self._buffer[:]
                return
            if answer.status != 308:
                raise self._failure(answer)
            held = _committed(answer.range)
            if not start <= held <= start + len(part):
                raise SourceError(
                    f"cannot write {redact_url(self.url)}: the upload session holds {held} bytes, but "
                    f"{start} were acknowledged and {len(part)} more sent; write the object again",
                    url=self.url,
                )
            if held > start:
                failures = 0  # progress: a new fault gets the whole budget again
            del self._buffer[: held - start]
            self._sent = held
            if held >= goal and not final:
                return

    def _query(self) -> _Answer:
        """Ask the session how many bytes it holds (308 with ``Range``), or whether it is done."""
        self.queries += 1
        assert self._session is not None
        return self._call("PUT", self._session, {"Content-Range": "bytes */*"}, b"")


def _size_of(data: bytes) -> int | None:
    """The ``size`` of an object resource (the answer to the last chunk), if it says."""
    try:
        return int(json.loads(data)["size"])
    except (ValueError, KeyError, TypeError):
        return None
