"""Streamed response bodies on keep-alive connections: a small pool over ``http.client``.

Why ``http.client`` and not urllib3 or an SDK's stream: its response's buffered reader fills the
caller's buffer straight from the socket (``readinto1``, no intermediate ``bytes``), which
measured the lowest client CPU per GB of the clients we compared (``benchmarks/bench_s3.py``), and
it lets ``close()`` drop a half-read connection at once. The ``http(s)://`` and ``s3://`` sources
share it; translating statuses and socket errors into shardstream errors is theirs
(``shardstream.sources``).
Proxies (:mod:`.proxy`): a proxied connection is made by :func:`.tunnel.connect_via` (a ``CONNECT``
or SOCKS tunnel, TLS to an ``https://`` proxy), and a plain ``http`` origin's requests go to an
HTTP(S) proxy in absolute form. Not supported: HTTP/2.
"""

from __future__ import annotations

import http.client
import io
import os
import socket
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

from .idle import IdleConnections
from .idle import Key as _Key
from .proxy import Proxies
from .tunnel import connect_via, refusal
from .whole import BodyTooLarge

__all__ = ["ConnectionPool", "PooledBody"]

# The read buffer size of a response (socket.makefile's default).
_READ_BUFFER = io.DEFAULT_BUFFER_SIZE
# What finish() reads to keep a connection: more (or a body of unknown length) closes it instead.
_DRAIN = 1 << 16


#: Methods that a stale keep-alive connection may silently send again.
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})


class PooledBody:
    """A response body. Read to the end, its connection goes back to the pool; closed early, the
    connection is closed (draining a large shard's remainder would cost more than reconnecting).

    ``readinto`` keeps every byte that arrived: it fills the buffer one socket receive at a time
    and, when a receive fails (a reset, a timeout) after some bytes of this call arrived, returns
    those bytes and raises the error on the next call. (``http.client``'s own ``readinto`` waits
    for the whole buffer and loses what a failing call had received, so a connection reset every
    300 KB under 1 MiB reads never advanced.)
    """

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
        self._pid = os.getpid()
        self.response = resp
        self._error: BaseException | None = None
        # Body bytes that arrived with the headers may sit in the response's read buffer; see _fill.
        self._maybe_buffered = True

    def readinto(self, buffer: memoryview, /) -> int:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        resp = self.response
        if resp.fp is None or not len(buffer):
            self._release_if_done()
            return 0
        if resp.length == 0:  # an empty body (or a HEAD): complete the response
            resp.read()
            self._release_if_done()
            return 0
        if resp.chunked or resp.length is None:  # rare for shards: one copy through read1
            data = resp.read1(len(buffer))
            buffer[: len(data)] = data
            self._release_if_done()
            return len(data)
        n = self._fill(buffer[: resp.length])
        self._release_if_done()
        return n

    def _fill(self, view: memoryview) -> int:
        """Fill ``view`` with body bytes, receive by receive (see the class docstring)."""
        resp = self.response
        fp = resp.fp
        assert fp is not None and resp.length is not None
        total = 0
        while total < len(view):
            part = view[total:]
            if self._maybe_buffered and len(part) > _READ_BUFFER:
                # BufferedReader.readinto1 copies buffered bytes and then receives into the rest in
                # the same call, losing both on an error; reading at most one buffer's worth first
                # empties the buffer without that risk.
                part = part[:_READ_BUFFER]
                self._maybe_buffered = False
            elif len(part) <= _READ_BUFFER:
                self._maybe_buffered = True  # a small read leaves the rest of a receive buffered
            try:
                n = fp.readinto1(part)
            except Exception as exc:
                if not total:
                    raise
                self._error = exc  # deliver what arrived; the fault surfaces on the next read
                break
            if not n:  # the server closed before Content-Length: the connection is not reusable
                resp.close()
                break
            total += n
            resp.length -= n
            if not resp.length:
                resp.read()  # zero bytes left: http.client marks the response complete
                break
        return total

    def _release_if_done(self) -> None:
        # http.client marks the response closed as soon as the last body byte has been read.
        if self._conn is not None and self.response.isclosed():
            conn, self._conn = self._conn, None
            complete = not self.response.length  # None (read to close) or 0 (all read)
            reusable = complete and not self.response.will_close and self._pid == os.getpid()
            self._pool.release(self._key, conn, reusable=reusable)

    def read_all(self, limit: int) -> bytes:
        """The rest of the body (a listing page, a JSON answer), at most ``limit`` bytes: a
        ``Content-Length`` above it raises :class:`~.whole.BodyTooLarge` before anything is
        allocated (``http.client``'s own ``read()`` allocates what the server claims, a whole
        ``Content-Length`` or chunk size at once), and a chunked or close-delimited body is read
        up to it and refused past it (the connection is then closed). Afterwards :meth:`finish`
        hands the connection back, as after ``response.read()``."""
        resp = self.response
        if resp.length is not None and resp.length > limit:
            self.close()
            raise BodyTooLarge(resp.length, limit, announced=True, expected=False)
        out = bytearray()
        while True:
            data = resp.read(min(_DRAIN, limit + 1 - len(out)))
            if not data:
                return bytes(out)
            out += data
            if len(out) > limit:
                self.close()
                raise BodyTooLarge(len(out), limit, announced=False, expected=False)

    def finish(self) -> None:
        """Read what is left (a HEAD or small response) so the connection can be reused; a body
        with more than 64 KiB left, or of unknown length, is not read: the connection is closed."""
        resp = self.response
        if not resp.isclosed() and (resp.length is None or resp.length > _DRAIN):
            self.close()
            return
        try:
            resp.read()
        except Exception:
            self.close()
            return
        self._release_if_done()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self.response.close()
            conn.close()


class ConnectionPool:
    """Idle keep-alive connections per (scheme, host, port); thread-safe and fork-aware (a forked
    child starts with no connections: a socket shared with the parent would mix responses).

    Args:
        connect_timeout: seconds to wait for the TCP (and TLS) connection (default 10).
        read_timeout: seconds a body read may wait for data before it fails as a timeout
            (default 60).
        response_timeout: seconds to wait for the status line and headers of a response after
            sending the request (default: ``read_timeout``).
        ssl_context: context for ``https`` (default: the system's trusted CAs).
        max_idle: idle connections kept per host (default 16).
        proxies: which origins are reached through a proxy (default: none).
    """

    def __init__(
        self,
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        response_timeout: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 16,
        proxies: Proxies | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.response_timeout = read_timeout if response_timeout is None else response_timeout
        self._ssl = ssl_context
        self.proxies = proxies
        self.idle: IdleConnections[http.client.HTTPConnection] = IdleConnections(max_idle)

    def _context(self) -> ssl.SSLContext:
        """The TLS context for origins and ``https://`` proxies (made once when none was given)."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def _new(self, key: _Key) -> http.client.HTTPConnection:
        scheme, host, port = key
        conn: http.client.HTTPConnection
        route = self.proxies.route(scheme, host, port) if self.proxies else None
        if scheme == "https":
            ctx = self._context()
            conn = http.client.HTTPSConnection(host, port, timeout=self.connect_timeout, context=ctx)
        else:  # (the origin's name, for its Host header, also through a proxy)
            conn = http.client.HTTPConnection(host, port, timeout=self.connect_timeout)
        if route is not None:  # a tunnel (TLS to the origin done), or a connection to the proxy
            conn.sock = connect_via(
                route, scheme, host, port, timeout=self.connect_timeout, context=self._context()
            )
        else:
            conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def request(
        self, method: str, url: str, headers: Mapping[str, str] | None = None, body: bytes | None = None
    ) -> PooledBody:
        """Send a request and return its body once the status line and headers have arrived.

        A reused keep-alive connection that the server already closed is replaced, silently, for
        idempotent methods (GET, HEAD, OPTIONS, DELETE); for others (a POST, an upload's chunk
        PUT) the server may have acted on the request, so the error propagates and the caller
        decides (an upload asks its session what arrived). Other network errors propagate as the
        standard library raised them. The headers must
        arrive within ``response_timeout``; body reads then wait up to ``read_timeout``.
        """
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        key: _Key = (scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        route = self.proxies.route(*key) if self.proxies and scheme == "http" else None
        if route is not None and route.absolute:  # a plain-http origin through an HTTP(S) proxy
            name = f"[{key[1]}]" if ":" in key[1] else key[1]
            target = f"http://{name}{'' if key[2] == 80 else f':{key[2]}'}{target}"
            authorization = route.authorization
            if authorization is not None:
                headers = {**(headers or {}), "Proxy-Authorization": authorization}
        while True:
            conn = self.idle.take(key)
            reused = conn is not None
            if conn is None:
                conn = self._new(key)
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(self.response_timeout)
                conn.request(method, target, body=body, headers=dict(headers or {}))
                resp = conn.getresponse()
                if conn.sock is not None:
                    conn.sock.settimeout(self.read_timeout)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                if reused and method in _IDEMPOTENT:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            if resp.status == 407 and route is not None and route.absolute:  # the proxy's answer
                conn.close()
                line = f"HTTP/1.1 407 {resp.reason}"
                raise refusal(route, f"a request to {key[1]}:{key[2]}", 407, line)
            return PooledBody(self, key, conn, resp)

    def release(self, key: _Key, conn: http.client.HTTPConnection, *, reusable: bool) -> None:
        """Return a connection whose response was read to the end."""
        if reusable:
            self.idle.give(key, conn)
        else:
            conn.close()

    def close(self) -> None:
        """Close every idle connection."""
        self.idle.close()
