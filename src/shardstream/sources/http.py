"""``http://`` and ``https://`` URLs, with keep-alive connections, timeouts and resume by Range.

A ranged open sends ``Range: bytes=offset-(offset+length-1)``; a resume after a fault asks for the
rest of that range only. A server that ignores ``Range`` (200) is handled by skipping to the
offset and stopping at the range's end ourselves (the connection is then closed, not reused).
Redirects are followed (see :mod:`shardstream.net.redirect`): bounded hops, ``Range`` kept, credentials never
sent to another origin.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

from ..config import UNSET, check_max_body, network_env, read_settings
from ..errors import ConfigurationError, SourceError, redact_url
from ..net.pool import ConnectionPool, PooledBody
from ..net.proxy import Proxies
from ..net.redirect import basic_auth, follow_redirects
from ..net.whole import WholeBodyPool
from ._resume import EmptyBody, Opened, ResumableReader, range_header
from ._retry import RetryPolicy
from ._status import network_error, status_error
from .base import ObjectInfo, SourceBase, check_range

__all__ = [
    "HTTPSource",
    "Network",
    "beyond_end",
    "check_max_redirects",
    "content_range_total",
    "network",
    "ssl_context",
]


def check_max_redirects(value: int) -> int:
    """``value`` if it is a valid ``max_redirects`` (an int >= 0), else ConfigurationError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"max_redirects={value!r}: use an integer >= 0 (0 follows none)")
    return value


def ssl_context(verify: bool | str) -> ssl.SSLContext:
    """TLS context: system CAs (``True``; OpenSSL honours ``SSL_CERT_FILE``/``SSL_CERT_DIR``), a CA
    bundle file or directory, or no checks (``False``)."""
    if verify is False:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if isinstance(verify, str):
        import os.path

        try:
            if os.path.isdir(verify):
                return ssl.create_default_context(capath=verify)
            return ssl.create_default_context(cafile=verify)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"the CA bundle {verify!r} cannot be used ({exc}); point verify= (or AWS_CA_BUNDLE, "
                "REQUESTS_CA_BUNDLE) at a readable PEM file or a directory of certificates"
            ) from None
    return ssl.create_default_context()


@dataclass(frozen=True)
class Network:
    """A source's TLS trust, proxies and timeouts, and the clients built from them.

    Attributes:
        verify: ``verify`` as resolved (a CA bundle path from the environment, or as given).
        context: the TLS context.
        proxies: the proxies from the environment, or ``None``.
        timeouts: ``connect_timeout``, ``response_timeout`` and ``read_timeout`` in seconds.
        max_body: the most bytes a whole-body read of unknown size takes (``max_body=``, else
            ``SHARDSTREAM_MAX_BODY``).
    """

    verify: bool | str
    context: ssl.SSLContext
    proxies: Proxies | None
    timeouts: tuple[float, float, float]
    max_body: int

    def _options(self) -> dict[str, Any]:
        connect, response, read = self.timeouts
        return {
            "connect_timeout": connect,
            "response_timeout": response,
            "read_timeout": read,
            "ssl_context": self.context,
            "proxies": self.proxies,
        }

    def pool(self) -> ConnectionPool:
        """A pool of streamed-body connections (:mod:`shardstream.net.pool`)."""
        return ConnectionPool(**self._options())

    def whole(self) -> WholeBodyPool:
        """A pool for whole small bodies (:mod:`shardstream.net.whole`), bounded by ``max_body``
        where a request expects no size."""
        return WholeBodyPool(**self._options(), max_body=self.max_body)


def network(
    verify: bool | str,
    *,
    aws: bool = False,
    connect_timeout: float = 10.0,
    response_timeout: float = 20.0,
    read_timeout: float = 60.0,
    max_body: int | str | object = UNSET,
) -> Network:
    """The TLS trust and the proxies of a source, as curl and botocore choose them, with its
    timeouts and its ``max_body``: what its connection pools are built from (:class:`Network`).

    An explicit ``verify`` (a path, or ``False``) wins; ``verify=True`` takes ``AWS_CA_BUNDLE``
    (S3 only, ``aws=True``), else ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``, else the system's trust
    store. Proxies come from ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``/``NO_PROXY``
    (:mod:`shardstream.net.proxy`), each checked only when an origin would go through it.
    """
    env = network_env()
    if verify is True:
        bundle = (env.aws_ca_bundle if aws else None) or env.ca_bundle
        if bundle:
            verify = bundle
    proxies = Proxies(
        env.http_proxy,
        env.https_proxy,
        env.no_proxy,
        http_variable=env.http_proxy_variable,
        https_variable=env.https_proxy_variable,
    )
    return Network(
        verify,
        ssl_context(verify),
        proxies if proxies else None,
        (connect_timeout, response_timeout, read_timeout),
        read_settings().max_body if max_body is UNSET else check_max_body(max_body),
    )


def _error_detail(body: PooledBody) -> str:
    """First bytes of an error response, for the message (the body is closed)."""
    try:
        buf = bytearray(512)
        n = body.readinto(memoryview(buf))
        return redact_url(buf[:n].decode("utf-8", "replace").strip().replace("\n", " "), limit=200)
    except Exception:
        return ""
    finally:
        body.close()


def content_range_total(value: str | None) -> int | None:
    """Total size from ``Content-Range: bytes a-b/total`` (``None`` when absent or ``*``)."""
    if not value or "/" not in value:
        return None
    total = value.rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None


def beyond_end(body: PooledBody) -> Opened:
    """A 416 answer to a range starting at or past the object's end: an empty body.

    The total size comes from ``Content-Range: bytes */total`` when the server sends it; the
    ETag of an error response is not the object's, so none is kept.
    """
    total = content_range_total(body.response.getheader("Content-Range"))
    body.finish()
    return Opened(EmptyBody(), total, None)


class _Skipping:
    """A body whose first ``skip`` bytes are discarded (servers that ignore Range)."""

    def __init__(self, body: PooledBody, skip: int) -> None:
        self._body = body
        self._skip = skip

    def readinto(self, buffer: memoryview, /) -> int:
        while self._skip:
            n = self._body.readinto(buffer[: min(len(buffer), self._skip)])
            if n == 0:
                return 0
            self._skip -= n
        return self._body.readinto(buffer)

    def close(self) -> None:
        self._body.close()


class HTTPSource(SourceBase):
    """Reads ``http(s)://`` URLs with pooled keep-alive connections and resumable streams.

    Args:
        connect_timeout: seconds to establish a connection (default 10).
        response_timeout: seconds to wait for a response's status line and headers (default 20).
        read_timeout: seconds without data before a body read times out and is retried
            (default 60).
        first_byte_deadline: seconds a stream may spend, retries included, before its first byte
            arrives (default 60): a server that accepts connections but never answers fails after
            about this long. Once bytes flow, ``retries``/``retry_deadline`` govern.
        headers: extra request headers, e.g. ``{"Authorization": "Bearer ..."}``; never logged,
            and never sent to another origin after a redirect.
        verify: ``True`` (``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` when set, else the system's
            CAs), a CA bundle path, or ``False`` to skip TLS checks (an ``https://`` proxy is
            checked with the same CAs). Proxies: ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``
            and ``NO_PROXY`` are honoured, as curl does (HTTP, HTTPS and SOCKS proxies).
        retries: attempts per fault, first included (default ``SHARDSTREAM_RETRIES``).
        retry_deadline: seconds one stream may spend retrying (default ``SHARDSTREAM_RETRY_DEADLINE``).
        max_redirects: redirects followed per request (default 10; 0 treats a redirect as an error).
        max_body: the most bytes a whole read of an object of unknown size takes (``get_into``, a
            manifest, an index; bytes or a size such as ``"4G"``; default ``SHARDSTREAM_MAX_BODY``,
            1 GiB); past it, ResponseTooLargeError.
    """

    #: An open waits for a round trip: ``open_ahead`` starts it on a thread.
    opens_ahead = True

    def __init__(
        self,
        *,
        connect_timeout: float = 10.0,
        response_timeout: float = 20.0,
        read_timeout: float = 60.0,
        first_byte_deadline: float = 60.0,
        headers: Mapping[str, str] | None = None,
        verify: bool | str = True,
        retries: int | object = UNSET,
        retry_deadline: float | object = UNSET,
        max_redirects: int = 10,
        max_body: int | str | object = UNSET,
    ) -> None:
        self._headers = dict(headers or {})
        self.policy = RetryPolicy.from_options(
            retries=retries, retry_deadline=retry_deadline, first_byte_deadline=first_byte_deadline
        )
        self.max_redirects = check_max_redirects(max_redirects)
        net = network(
            verify,
            connect_timeout=connect_timeout,
            response_timeout=response_timeout,
            read_timeout=read_timeout,
            max_body=max_body,
        )
        self.max_body = net.max_body
        self.pool = net.pool()

    def __repr__(self) -> str:  # header values may be secrets: show names only
        return f"HTTPSource(headers={sorted(self._headers)}, policy={self.policy!r})"

    def _request(self, method: str, url: str, headers: dict[str, str]) -> PooledBody:
        credentials = {**self._headers, **basic_auth(url)}  # user:password@ in the URL wins
        return follow_redirects(
            self.pool.request,
            method,
            url,
            headers,
            credentials=credentials,
            max_redirects=self.max_redirects,
        )

    def _opener(self, url: str, end: int | None, offset: int, etag: str | None) -> Opened:
        headers = {"Accept-Encoding": "identity"}
        byte_range = range_header(offset, end)
        if byte_range is not None:
            headers["Range"] = byte_range
        if etag and not etag.startswith("W/"):
            headers["If-Match"] = etag
        body = self._request("GET", url, headers)
        resp = body.response
        if resp.status == 416 and byte_range is not None:
            return beyond_end(body)
        if resp.status >= 300:
            raise status_error(resp.status, url, detail=_error_detail(body))
        length = resp.getheader("Content-Length")
        if resp.status == 206:
            size = content_range_total(resp.getheader("Content-Range"))
            return Opened(body, size, resp.getheader("ETag"))
        size = int(length) if length and length.isdigit() else None
        if offset:  # the server ignored Range: skip to the offset ourselves
            return Opened(_Skipping(body, offset), size, resp.getheader("ETag"))
        return Opened(body, size, resp.getheader("ETag"))

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``url`` (to the end when ``length`` is
        ``None``); transient faults are retried and resumed within the range."""
        end = check_range(url, offset, length)
        reader = ResumableReader(
            url,
            functools.partial(self._opener, url, end),
            translate=functools.partial(network_error, url=url),
            offset=offset,
            length=length,
            policy=self.policy,
        )
        return cast(BinaryIO, reader)

    def stat(self, url: str) -> ObjectInfo:
        """Size and ETag from a ``HEAD`` request."""
        try:
            body = self._request("HEAD", url, {"Accept-Encoding": "identity"})
        except SourceError:
            raise
        except Exception as exc:
            raise network_error(exc, url) from exc
        resp = body.response
        body.finish()
        if resp.status >= 300:
            raise status_error(resp.status, url, action="stat")
        length = resp.getheader("Content-Length")
        return ObjectInfo(
            size=int(length) if length and length.isdigit() else None, etag=resp.getheader("ETag")
        )

    def close(self) -> None:
        self.pool.close()
