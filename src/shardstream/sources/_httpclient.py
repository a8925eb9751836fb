"""A small keep-alive connection pool over the standard library's ``http.client``, and the
translation of HTTP statuses and socket errors into shardstream errors.

Why ``http.client`` and not urllib3 or an SDK's stream: its ``readinto`` fills the caller's buffer
straight from the socket (no intermediate ``bytes``), which measured the lowest client CPU per GB
of all candidates (see ``s3.py``), and it lets ``close()`` drop a half-read connection at once.
Used by both the ``http(s)://`` and ``s3://`` sources, so both share one data path.
Not supported: HTTP(S) proxies (``HTTP_PROXY``) and HTTP/2.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Mapping
from urllib.parse import urlsplit

from ..errors import AccessDeniedError, ShardNotFoundError, SourceError, TransientSourceError, redact_url
from ._resume import ObjectChangedError

__all__ = ["ConnectionPool", "PooledBody", "network_error", "status_error", "TRANSIENT_STATUSES"]

#: Statuses worth retrying: timeouts, throttling and server-side failures.
TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 509, 598, 599})

_Key = tuple[str, str, int]


class PooledBody:
    """A response body. Read to the end, its connection goes back to the pool; closed early, the
    connection is closed (draining a large shard's remainder would cost more than reconnecting)."""

    def __init__(
        self,
        pool: ConnectionPool,
        key: _Key,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
    ) -> None:
        self._pool = pool
        self._key = key
        self._conn: http.client.HTTPConnection | None = conn
        self.response = resp

    def readinto(self, buffer: memoryview, /) -> int:
        n = self.response.readinto(buffer)
        # http.client marks the response closed as soon as the last body byte has been read.
        if self._conn is not None and self.response.isclosed() and (n or len(buffer)):
            conn, self._conn = self._conn, None
            self._pool.release(self._key, conn, reusable=not self.response.will_close)
        return n

    def finish(self) -> None:
        """Read what is left (a HEAD or small response) so the connection can be reused."""
        try:
            self.response.read()
        except Exception:
            self.close()
            return
        self.readinto(memoryview(bytearray(1)))

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self.response.close()
            conn.close()


class ConnectionPool:
    """Idle keep-alive connections per (scheme, host, port); thread-safe.

    Args:
        connect_timeout: seconds to wait for the TCP (and TLS) connection (default 10).
        read_timeout: seconds a read may wait for data before it fails as a timeout (default 60).
        ssl_context: context for ``https`` (default: the system's trusted CAs).
        max_idle: idle connections kept per host (default 16).
    """

    def __init__(
        self,
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 16,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._ssl = ssl_context
        self.max_idle = max_idle
        self._idle: dict[_Key, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def _new(self, key: _Key) -> http.client.HTTPConnection:
        scheme, host, port = key
        conn: http.client.HTTPConnection
        if scheme == "https":
            ctx = self._ssl if self._ssl is not None else ssl.create_default_context()
            conn = http.client.HTTPSConnection(host, port, timeout=self.connect_timeout, context=ctx)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.connect_timeout)
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(self.read_timeout)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def request(
        self, method: str, url: str, headers: Mapping[str, str] | None = None, body: bytes | None = None
    ) -> PooledBody:
        """Send a request and return its body once the status line and headers have arrived.

        A reused keep-alive connection that the server already closed is replaced once, silently;
        other network errors propagate as the standard library raised them.
        """
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        key: _Key = (scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        while True:
            with self._lock:
                idle = self._idle.get(key)
                conn = idle.pop() if idle else None
            reused = conn is not None
            if conn is None:
                conn = self._new(key)
            try:
                conn.request(method, target, body=body, headers=dict(headers or {}))
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                if reused:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            return PooledBody(self, key, conn, resp)

    def release(self, key: _Key, conn: http.client.HTTPConnection, *, reusable: bool) -> None:
        """Return a connection whose response was read to the end."""
        if reusable:
            with self._lock:
                idle = self._idle.setdefault(key, [])
                if len(idle) < self.max_idle:
                    idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()


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
    elif status == 412:
        cls, default_fix = (
            ObjectChangedError,
            "the object changed while it was being read; read the shard again",
        )
    elif status in TRANSIENT_STATUSES or status >= 500:
        cls, default_fix = TransientSourceError, "the server is busy or failing; it is retried"
    elif status == 416:
        cls, default_fix = SourceError, "the requested byte range is beyond the object's end"
    else:
        cls, default_fix = SourceError, "unexpected response from the server"
    return cls(f"{what}. {fix or default_fix}.", url=url, status=status)


def network_error(exc: BaseException, url: str, *, endpoint: str = "") -> SourceError:
    """The shardstream error for a socket, TLS or ``http.client`` exception."""
    url = redact_url(url)
    where = f" (endpoint {redact_url(endpoint)})" if endpoint else ""
    if isinstance(exc, SourceError):
        return exc
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
