"""One object's bytes, or a byte range's, with retries, resume and throttling feedback.

A source whose ``get_into`` makes one attempt (``retries_in_get_into = False``: S3, one signed
GET on a pooled connection, the whole body in one call) gets every attempt made here, so each
throttling answer (``shardstream.sources.is_throttle``) lowers the requests in flight
(:class:`~._aimd.Concurrency`); a transfer cut half-way resumes from the bytes it has, with
``If-Match`` on the first response's ETag; a range resumes within the range (from the byte after
the last one it has, never past the range's end). Other sources (local files, ``http(s)://``, memory)
retry and resume inside their own ``get_into``, so it is called once.

Throttling never fails a fetch by itself: throttled attempts do not use up ``retries``; only
``throttle_deadline`` seconds of uninterrupted throttling on one object does (default 600 s).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from ..errors import SourceError, TransientSourceError, redact_url
from ..faults import FAULTS
from ..sources import RetryPolicy, Source, SourceBase, get_source, is_throttle, with_defaults
from ._aimd import Concurrency

__all__ = ["ObjectGetter"]

log = logging.getLogger("shardstream.objects")


class ObjectGetter:
    """Gets whole objects or byte ranges for one process; shared by the fetch threads.

    Args:
        storage_options: options for the sources (unless ``source`` is given).
        concurrency: the gate every request passes (its limit drops on throttling).
        stop: set when the consumer stops: backoff sleeps end and no new request starts.
        policy: retries for faults other than throttling (default: the sources' settings).
        throttle_deadline: seconds one object may stay throttled before it fails.
        source: read with this source (its ``route`` per URL) instead of the sources that
            ``storage_options`` select.
    """

    def __init__(
        self,
        storage_options: Mapping[str, Any] | None,
        concurrency: Concurrency,
        stop: threading.Event,
        *,
        policy: RetryPolicy | None = None,
        throttle_deadline: float = 600.0,
        source: Source | None = None,
    ) -> None:
        self.storage_options = dict(storage_options or {})
        self._given = None if source is None else with_defaults(source)
        self.concurrency = concurrency
        self.stop = stop
        self.policy = policy if policy is not None else RetryPolicy.from_options()
        self.throttle_deadline = throttle_deadline
        self.retries = 0
        self.requests = 0
        # (pid, scheme, source) of the last object: get_source costs microseconds per call
        self._source: tuple[int, str, SourceBase | None] = (-1, "", None)

    def source_for(self, url: str) -> SourceBase:
        """The source of ``url`` in this process (kept for the next object of the same scheme)."""
        head, sep, _ = url.partition("://")
        scheme = head if sep else ""  # the same for every object, usually ("": a local path)
        source = self._source[2]
        if source is None or self._source[:2] != (os.getpid(), scheme):
            given = self._given
            if given is not None:
                source = given.route(url)
            else:
                source = with_defaults(get_source(url, self.storage_options))
            self._source = (os.getpid(), scheme, source)
        return source

    def get(self, url: str, size: int = -1, *, offset: int = 0, length: int | None = None) -> bytes:
        """The bytes of ``url``, or of its range ``[offset, offset + length)`` (to its end when
        ``length`` is ``None``; fewer where the object ends first); raises a SourceError when
        they cannot be had (or when stopped). ``size``: the object's size from its manifest
        (negative: unknown); an object that turns out larger raises ResponseTooLargeError, as
        one larger than ``max_body`` does when the size is unknown."""
        source = self.source_for(url)
        known = size if size >= 0 else None
        if source.retries_in_get_into:
            return self._once(source, url, offset, length, known)
        buf = bytearray()
        etag: str | None = None
        failures = 0
        started = time.monotonic()
        throttled_since: float | None = None
        while True:
            if not self.concurrency.acquire(self.stop):
                raise _stopped(url)
            ok = False
            try:
                self.requests += 1
                etag = source.get_into(url, buf, etag=etag, offset=offset, length=length, size=known)
                ok = True
                return bytes(buf)
            except TransientSourceError as exc:
                error: TransientSourceError = exc
            finally:
                self.concurrency.release(ok=ok)
            now = time.monotonic()
            if is_throttle(error):
                self.concurrency.throttled()
                throttled_since = throttled_since if throttled_since is not None else now
                if now - throttled_since > self.throttle_deadline:
                    raise TransientSourceError(
                        f"{redact_url(url)}{_range(offset, length)} stayed throttled for "
                        f"{now - throttled_since:.0f}s "
                        f"(throttle_deadline={self.throttle_deadline:g}); last answer: {error}. Lower "
                        "the request rate (fewer workers or a smaller window) or ask for a higher limit",
                        url=url,
                        status=error.status,
                    ) from error
                delay = self.policy.rng.uniform(0.0, min(self.policy.max_delay, 0.05 * 2 ** min(failures, 8)))
                failures = min(failures + 1, 8)
            else:
                throttled_since = None
                failures += 1
                next_delay = self.policy.next_delay(failures, started)
                if next_delay is None:
                    raise TransientSourceError(
                        f"giving up on {redact_url(url)}{_range(offset, length)} at byte "
                        f"{offset + len(buf)} after {failures} failed "
                        f"attempts; last error: {error}. Check the endpoint, or raise retries= / "
                        "retry_deadline= in storage_options",
                        url=url,
                        status=error.status,
                    ) from error
                delay = next_delay
            self.retries += 1
            FAULTS.retry(throttled=is_throttle(error))
            log.debug(
                "retry %d for %s at byte %d in %.2fs: %s",
                failures,
                redact_url(url),
                offset + len(buf),
                delay,
                error,
            )
            if self.stop.wait(delay):
                raise _stopped(url)

    def _once(self, source: SourceBase, url: str, offset: int, length: int | None, size: int | None) -> bytes:
        """One call of a ``get_into`` that retries on its own."""
        if not self.concurrency.acquire(self.stop):
            raise _stopped(url)
        ok = False
        try:
            self.requests += 1
            buf = bytearray()
            source.get_into(url, buf, offset=offset, length=length, size=size)
            ok = True
            return bytes(buf)
        finally:
            self.concurrency.release(ok=ok)


def _range(offset: int, length: int | None) -> str:
    """`` (bytes a-b)`` of a ranged request, for messages; nothing for a whole object."""
    if not offset and length is None:
        return ""
    return f" (bytes {offset}-{'' if length is None else offset + length - 1})"


def _stopped(url: str) -> SourceError:
    return SourceError(f"fetching {redact_url(url)} was stopped (the consumer closed the stream)", url=url)
