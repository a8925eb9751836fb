"""HTTP statuses and socket errors of the ``http(s)://`` and ``s3://`` sources as shardstream errors.

The only place above :mod:`shardstream.net` that reads an HTTP status: the sources translate
every answer here (S3's error codes refine it in :mod:`._s3_errors`), so code above ``sources/``
sees :class:`~shardstream.errors.SourceError` subclasses and never a status.
"""

from __future__ import annotations

import http.client
import socket
import ssl

from ..errors import (
    AccessDeniedError,
    ObjectChangedError,
    ResponseTooLargeError,
    ShardNotFoundError,
    SourceError,
    TransientSourceError,
    redact_url,
)
from ..net.proxy import ProxyError
from ..net.whole import BodyTooLarge

__all__ = [
    "THROTTLE_STATUSES",
    "TRANSIENT_STATUSES",
    "is_throttle",
    "network_error",
    "status_error",
    "too_large",
]

#: Statuses worth retrying: timeouts, throttling and server-side failures.
TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 509, 598, 599})
#: Statuses that ask the client to slow down (503 SlowDown, 429 Too Many Requests).
THROTTLE_STATUSES = frozenset({429, 503})


def is_throttle(exc: BaseException) -> bool:
    """Whether ``exc`` is a throttling answer (a client should lower its request rate)."""
    return isinstance(exc, TransientSourceError) and exc.status in THROTTLE_STATUSES


def status_error(
    status: int, url: str, *, action: str = "open", detail: str = "", fix: str = ""
) -> SourceError:
    """The shardstream error for an HTTP error ``status``, with a message naming URL, status and fix."""
    url = redact_url(url)
    what = f"cannot {action} {url}: HTTP {status}" + (f" ({detail})" if detail else "")
    cls: type[SourceError]
    if status in (404, 410):
        cls, default_fix = ShardNotFoundError, "the object does not exist; check the URL and the shard spec"
    elif status in (401, 403):
        cls, default_fix = (
            AccessDeniedError,
            "access was refused; check the credentials and their permissions",
        )
    elif status == 407:  # an HTTP proxy's answer to a request in absolute form
        cls, default_fix = (
            AccessDeniedError,
            "the proxy wants credentials; check the user and password in the proxy URL "
            "(HTTP_PROXY or ALL_PROXY)",
        )
    elif status == 412:
        cls, default_fix = (
            ObjectChangedError,
            "the object changed while it was being read; read the shard again",
        )
    elif status in TRANSIENT_STATUSES or status >= 500:
        cls, default_fix = TransientSourceError, "the server is busy or failing; it is retried"
    elif status == 416:
        cls, default_fix = SourceError, "the requested byte range is beyond the object's end"
    elif 300 <= status < 400:
        cls, default_fix = (
            SourceError,
            "a redirect that was not followed (no Location header, or max_redirects=0 in storage_options)",
        )
    else:
        cls, default_fix = SourceError, "unexpected response from the server"
    return cls(f"{what}. {fix or default_fix}.", url=url, status=status)


def too_large(
    url: str, size: int, limit: int, *, announced: bool, expected: bool, where: str = ""
) -> ResponseTooLargeError:
    """The error for a body of ``size`` bytes (``announced`` by the server: ``Content-Length`` or
    chunk sizes; else bytes received) where ``limit`` was the most the read takes (``expected``:
    the caller's size or range length, else ``max_body``); ``where`` adds to the URL (an endpoint)."""
    if expected:
        bound = f"the {limit:,} bytes expected (the object's listed size, or the range's length)"
        fix = (
            "The object changed since it was listed, or the server sends something else: list it "
            "again (rebuild the manifest or index) and check the URL"
        )
    else:
        bound = f"max_body ({limit:,} bytes, the most a whole read of unknown size takes)"
        fix = (
            "If the object really is that large, raise max_body= in storage_options or "
            "SHARDSTREAM_MAX_BODY, or read it as a stream; otherwise the server misreports the body"
        )
    if announced:
        what = f"the server announces {size:,} bytes of body, more than {bound}; nothing was allocated for it"
    else:
        what = f"the server sent more than {bound}"
    return ResponseTooLargeError(
        f"cannot read {redact_url(url)}{where}: {what}. {fix}.", url=url, size=size, limit=limit
    )


def network_error(exc: BaseException, url: str, *, endpoint: str = "") -> SourceError:
    """The shardstream error for a socket, TLS or ``http.client`` exception."""
    url = redact_url(url)
    where = f" (endpoint {redact_url(endpoint)})" if endpoint else ""
    if isinstance(exc, SourceError):
        return exc
    if isinstance(exc, ProxyError):  # its message names the proxy, its variable and the fix
        kind = TransientSourceError if exc.transient else SourceError
        text = redact_url(str(exc)) + ("; it is retried" if exc.transient else "")
        return kind(f"cannot open {url}{where}: {text}", url=url)
    if isinstance(exc, BodyTooLarge):  # not retried: the same request gets the same answer
        return too_large(
            url, exc.size, exc.limit, announced=exc.announced, expected=exc.expected, where=where
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return SourceError(
            f"cannot open {url}{where}: TLS certificate verification failed "
            f"({getattr(exc, 'verify_message', None) or exc}). "
            "Pass verify='/path/to/ca-bundle.pem' in storage_options for a private CA.",
            url=url,
        )
    if isinstance(exc, socket.gaierror):
        return TransientSourceError(
            f"cannot open {url}{where}: the host name does not resolve ({exc.strerror}). Check the "
            "URL or endpoint_url for typos and that DNS works on this machine.",
            url=url,
        )
    if isinstance(exc, ConnectionRefusedError):
        return TransientSourceError(
            f"cannot open {url}{where}: connection refused. Check that the server is running and "
            "that the host and port in the URL or endpoint_url are right.",
            url=url,
        )
    if isinstance(exc, TimeoutError | socket.timeout):
        return TransientSourceError(
            f"reading {url}{where} timed out. The server stalled or the network is slow; it is "
            "retried (raise read_timeout= in storage_options for slow links).",
            url=url,
        )
    if isinstance(exc, http.client.IncompleteRead):
        return TransientSourceError(
            f"connection to {url}{where} closed early ({len(exc.partial)} bytes read, "
            f"{exc.expected if exc.expected is not None else 'more'} bytes expected)",
            url=url,
        )
    if isinstance(exc, OSError | http.client.HTTPException):
        text = redact_url(f"{type(exc).__name__}: {exc}")
        return TransientSourceError(f"network error on {url}{where}: {text}; it is retried", url=url)
    text = redact_url(f"{type(exc).__name__}: {exc}")
    return SourceError(f"unexpected error on {url}{where}: {text}", url=url)
