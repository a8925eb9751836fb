"""Whole small bodies over HTTP/1.1 keep-alive sockets into a caller's buffer, at the least client
CPU per request.

A single-sample object is a few KB, so its GET costs more in the client than on the wire; through
``http.client`` most of that is header parsing, the response object, its buffered reader and a
``poll`` per socket call. This client writes the request with one ``send``, receives the status
line, headers and usually the whole body with one ``recv_into`` into a reused buffer, splits the
headers by hand and copies the body once into the caller's ``bytearray``; on plain TCP, timeouts
are the kernel's (``SO_RCVTIMEO``/``SO_SNDTIMEO``) instead of a ``poll`` before every call. The
client CPU per GET of both clients is measured in ``benchmarks/results/bench_objects.md``.

It covers what an object GET needs: ``Content-Length`` and chunked bodies, bodies ended by the
connection's close, keep-alive, and a reused connection that the server closed meanwhile (sent
again once, on a new connection: only for GET and HEAD, which are idempotent). Streaming large
bodies stays with :mod:`.pool` (its reader fills the caller's buffer without this module's one
copy). Proxies as in :mod:`.proxy`, connected by :func:`.tunnel.connect_via`.
Not supported: HTTP/2, ``Expect: 100-continue`` (1xx answers are skipped).

Every body is bounded before it is read (:class:`Expect`, ``max_body``): a ``Content-Length``
larger than the bound is refused before anything is allocated for it, and a chunked body or one
ended by the connection's close is read up to the bound and refused past it, so a server's word
never decides how much memory this process takes. The bound of an answer that is the object (or
the asked range) is the size the caller expects; where it expects none, and for error answers,
it is the pool's ``max_body``.

Errors are the standard library's: ``OSError`` (reset, refused, timeout) and
``http.client.HTTPException`` (a malformed response, a body cut short, :class:`BodyTooLarge`);
the sources translate them. The body bytes received before a failure stay in the caller's
buffer, so a retry can resume after them.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from ..config import DEFAULT_MAX_BODY
from ..forks import ForkSafeLock
from .idle import Closable, IdleConnections
from .idle import Key as _Key
from .proxy import Proxies, absolute_form
from .tunnel import connect_via

__all__ = ["BodyTooLarge", "Expect", "WholeBodyPool", "WholeResponse", "render_request"]

_BUFFER = 1 << 16
_MAX_HEAD = 1 << 16  # status line plus headers


@dataclass(frozen=True)
class Expect:
    """The body sizes a request may take, in bytes: ``whole`` for a 2xx answer that is the object
    (its size, when the caller knows it: a manifest's or a stat's), ``part`` for a 206 (the asked
    range's length, when it has one). ``None``: the pool's ``max_body``. Error answers are always
    bounded by ``max_body`` (their bodies are messages, whatever the object's size)."""

    whole: int | None = None
    part: int | None = None


class BodyTooLarge(http.client.HTTPException):
    """An answer's body is larger than the request may take; nothing beyond the bound was read.

    Attributes:
        size: the size announced (``Content-Length``, or the chunk sizes so far) or received
            (a body ended by the connection's close).
        limit: the most bytes the request could take.
        announced: ``size`` is the server's claim (nothing of it was allocated), not bytes received.
        expected: ``limit`` is the size the caller expected (:class:`Expect`), not ``max_body``.
    """

    def __init__(self, size: int, limit: int, *, announced: bool, expected: bool) -> None:
        self.size = size
        self.limit = limit
        self.announced = announced
        self.expected = expected
        what = "announces" if announced else "sent"
        bound = "the size expected" if expected else "max_body"
        super().__init__(f"the answer {what} a body of {size} bytes, more than the {limit} bytes of {bound}")


def body_limit(status: int, expect: Expect | None, max_body: int) -> tuple[int, bool]:
    """The most body bytes an answer with ``status`` may have, and whether that is the caller's
    expectation (else ``max_body``). A 206 without a range length is bounded by the object's size."""
    if expect is not None and 200 <= status < 300:
        want = expect.part if status == 206 and expect.part is not None else expect.whole
        if want is not None:
            return want, True
    return max_body, False


class WholeResponse:
    """What a request returned: status, headers (lower-case names; the last of repeated ones)."""

    __slots__ = ("status", "headers")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}


def render_request(method: str, target: str, headers: Mapping[str, str]) -> bytes:
    """The bytes of a request without a body (``headers`` must include ``Host``)."""
    lines = [f"{method} {target} HTTP/1.1\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6))


class Connection:
    """One keep-alive connection and its receive buffer ``[start, end)``."""

    __slots__ = ("sock", "buf", "view", "start", "end", "plain", "timeout")

    def __init__(self, sock: socket.socket, plain: bool) -> None:
        self.sock = sock
        self.buf = bytearray(_BUFFER)
        self.view = memoryview(self.buf)
        self.start = self.end = 0
        self.plain = plain
        self.timeout = -1.0

    def set_timeout(self, seconds: float) -> None:
        if seconds == self.timeout:
            return
        self.timeout = seconds
        if self.plain:  # blocking socket, kernel timeouts: no poll() before each call
            value = _timeval(seconds)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        else:
            self.sock.settimeout(seconds)

    def recv(self) -> int:
        """Receive more bytes after ``end`` (compacting first when the buffer is full)."""
        if self.end == len(self.buf):
            if self.start == 0:
                raise http.client.LineTooLong("response headers longer than 64 KiB")
            tail = self.end - self.start
            self.view[:tail] = self.view[self.start : self.end]
            self.start, self.end = 0, tail
        try:
            n = self.sock.recv_into(self.view[self.end :])
        except BlockingIOError as exc:  # SO_RCVTIMEO expired
            raise TimeoutError("timed out waiting for the server") from exc
        self.end += n
        return n

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class WholeBodyPool:
    """Keep-alive connections per (scheme, host, port) for whole-body requests; thread-safe and
    fork-aware (a forked child starts with no connections).

    Args:
        connect_timeout: seconds for the TCP (and TLS) connection.
        response_timeout: seconds for the first bytes of a response after the request is sent.
        read_timeout: seconds any later receive may wait.
        ssl_context: context for ``https`` (default: the system's trusted CAs).
        max_idle: idle connections kept per host.
        proxies: which origins are reached through a proxy (default: none).
        max_body: the most body bytes an answer may have where the request expects no size (and
            for error answers); default 1 GiB (the sources pass ``SHARDSTREAM_MAX_BODY``).
    """

    def __init__(
        self,
        *,
        connect_timeout: float = 10.0,
        response_timeout: float = 20.0,
        read_timeout: float = 60.0,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 64,
        proxies: Proxies | None = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.response_timeout = response_timeout
        self.read_timeout = read_timeout
        self.max_body = max_body
        self._ssl = ssl_context
        self.proxies = proxies
        self.idle: IdleConnections[Connection] = IdleConnections(max_idle)
        self._parked: Closable | None = None
        self._park_lock = ForkSafeLock()

    def through_proxy(self, key: _Key) -> bool:
        """Whether connections to ``key`` go through a proxy (then :meth:`connect` blocks and
        :meth:`for_proxy` rewrites plain-http requests)."""
        return self.proxies is not None and self.proxies.route(*key) is not None

    def for_proxy(self, key: _Key, request: bytes) -> bytes:
        """``request`` as it is sent on a connection to ``key`` (absolute form through a proxy)."""
        route = self.proxies.route(*key) if self.proxies else None
        if route is None or key[0] != "http" or not route.absolute:
            return request
        return absolute_form(request, *key, route)

    def connect(self, key: _Key) -> Connection:
        """A new blocking connection to ``key`` (TLS done; through a proxy when one applies)."""
        return self._connect(key)

    def _connect(self, key: _Key) -> Connection:
        scheme, host, port = key
        route = self.proxies.route(scheme, host, port) if self.proxies else None
        if route is not None:  # tunnels and TLS (to an https:// proxy, to the origin): .tunnel
            ctx = self._ssl if self._ssl is not None else ssl.create_default_context()
            sock = connect_via(route, scheme, host, port, timeout=self.connect_timeout, context=ctx)
            if scheme == "https" or route.tls:
                return Connection(sock, plain=False)
            sock.settimeout(None)  # a plain socket (to the proxy, or a SOCKS tunnel): as below
            return Connection(sock, plain=True)
        sock = socket.create_connection((host, port), timeout=self.connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                ctx = self._ssl if self._ssl is not None else ssl.create_default_context()
                sock = ctx.wrap_socket(sock, server_hostname=host)
                return Connection(sock, plain=False)
            sock.settimeout(None)  # blocking; timeouts are set as socket options
            return Connection(sock, plain=True)
        except BaseException:
            sock.close()
            raise

    def get(
        self,
        key: _Key,
        target: str,
        headers: Mapping[str, str],
        sink: bytearray,
        *,
        method: str = "GET",
        expect: Expect | None = None,
    ) -> WholeResponse:
        """Send ``method target`` to ``key`` = (scheme, host, port) and append the whole body to
        ``sink``. ``headers`` must include ``Host``. The body is bounded by ``expect`` (else
        ``max_body``): past it, :class:`BodyTooLarge`. On an error, the body bytes that arrived are
        in ``sink`` and the exception propagates."""
        request = render_request(method, target, headers)
        return self.send(key, request, sink, head=method == "HEAD", expect=expect)

    def send(
        self,
        key: _Key,
        request: bytes,
        sink: bytearray,
        *,
        head: bool = False,
        expect: Expect | None = None,
    ) -> WholeResponse:
        """:meth:`get` for a request already rendered (a GET, or a HEAD with ``head=True``)."""
        while True:
            conn = self.idle.take(key)
            reused = conn is not None
            if conn is None:
                conn = self._connect(key)
            resp = WholeResponse()
            try:
                conn.set_timeout(self.response_timeout)
                conn.sock.sendall(self.for_proxy(key, request) if self.proxies else request)
                reusable = self._read(conn, resp, sink, head=head, expect=expect)
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                conn.close()
                if reused and not resp.status:  # the server closed an idle connection: once more
                    continue
                raise
            except BlockingIOError as exc:  # SO_SNDTIMEO expired
                conn.close()
                raise TimeoutError("timed out sending the request") from exc
            except BaseException:
                conn.close()
                raise
            if reusable:
                self.idle.give(key, conn)
            else:
                conn.close()
            return resp

    def _read(
        self, conn: Connection, resp: WholeResponse, sink: bytearray, *, head: bool, expect: Expect | None
    ) -> bool:
        """Read one response into ``resp`` and ``sink``; whether the connection can be reused."""
        conn.start = conn.end = 0
        while True:  # skip 1xx answers
            pos = self._head(conn, resp)
            if resp.status >= 200:
                break
            conn.start = pos
        conn.start = pos
        fields = resp.headers
        keep = fields.get("connection", "").lower() != "close"
        if head or resp.status in (204, 304):
            return keep and conn.start == conn.end
        limit, expected = body_limit(resp.status, expect, self.max_body)
        if "chunked" in fields.get("transfer-encoding", "").lower():
            self._chunked(conn, sink, limit, expected)
            return keep and conn.start == conn.end
        length = fields.get("content-length")
        if length is None:  # the body ends when the server closes: read up to the bound
            got = conn.end - conn.start
            if got > limit:
                raise BodyTooLarge(got, limit, announced=False, expected=expected)
            sink += conn.view[conn.start : conn.end]
            conn.start = conn.end = 0
            conn.set_timeout(self.read_timeout)
            while conn.recv():
                got += conn.end
                if got > limit:
                    raise BodyTooLarge(got, limit, announced=False, expected=expected)
                sink += conn.view[: conn.end]
                conn.end = 0
            return False
        if not length.isdigit():
            raise http.client.HTTPException(f"invalid Content-Length {length[:40]!r}")
        size = int(length)
        if size > limit:  # refused before a byte of it is allocated
            raise BodyTooLarge(size, limit, announced=True, expected=expected)
        self._exact(conn, sink, size)
        return keep and conn.start == conn.end

    def _head(self, conn: Connection, resp: WholeResponse) -> int:
        """Parse a status line and headers at ``conn.start``; returns where the body starts."""
        buf = conn.buf
        end = buf.find(b"\r\n\r\n", conn.start, conn.end)
        while end < 0:
            if not conn.recv():
                if conn.end == conn.start:
                    raise http.client.RemoteDisconnected(
                        "the server closed the connection without a response"
                    )
                raise http.client.IncompleteRead(bytes(buf[conn.start : conn.end]))
            end = buf.find(b"\r\n\r\n", conn.start, conn.end)  # (recv may have moved the bytes)
        text = buf[conn.start : end].decode("latin-1")
        status_line, _, rest = text.partition("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise http.client.BadStatusLine(status_line[:100])
        resp.status = int(parts[1])
        fields = resp.headers
        fields.clear()
        for line in rest.split("\r\n"):
            name, sep, value = line.partition(":")
            if sep:
                fields[name.strip().lower()] = value.strip()
        if parts[0] == "HTTP/1.0" and fields.get("connection", "").lower() != "keep-alive":
            fields["connection"] = "close"
        return end + 4

    def _exact(self, conn: Connection, sink: bytearray, length: int) -> None:
        """Append ``length`` body bytes to ``sink``: the buffered ones, then straight from the socket."""
        have = min(length, conn.end - conn.start)
        sink += conn.view[conn.start : conn.start + have]
        conn.start += have
        left = length - have
        if not left:
            return
        conn.set_timeout(self.read_timeout)
        at = len(sink)
        sink.extend(bytes(left))
        view = memoryview(sink)
        try:
            while left:
                try:
                    n = conn.sock.recv_into(view[at:], left)
                except BlockingIOError as exc:
                    raise TimeoutError("timed out reading the response body") from exc
                if not n:
                    raise http.client.IncompleteRead(b"", left)
                at += n
                left -= n
        finally:
            view.release()
            del sink[at:]

    def _chunked(self, conn: Connection, sink: bytearray, limit: int, expected: bool) -> None:
        conn.set_timeout(self.read_timeout)
        got = 0
        while True:
            line = self._line(conn)
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise http.client.HTTPException(f"invalid chunk size {size_text[:40]!r}") from None
            if size == 0:
                while self._line(conn):  # trailers, up to the empty line
                    pass
                return
            got += size
            if got > limit:  # (before the chunk is allocated: its size is a claim too)
                raise BodyTooLarge(got, limit, announced=True, expected=expected)
            self._exact(conn, sink, size)
            if self._line(conn):
                raise http.client.HTTPException("a chunk is not followed by CRLF")

    def _line(self, conn: Connection) -> bytes:
        end = conn.buf.find(b"\r\n", conn.start, conn.end)
        while end < 0:
            if not conn.recv():
                raise http.client.IncompleteRead(b"")
            end = conn.buf.find(b"\r\n", conn.start, conn.end)
        line = bytes(conn.buf[conn.start : end])
        conn.start = end + 2
        return line

    # A non-blocking loop (``multiplex.Multiplexer``) kept between two uses with its idle
    # connections: :meth:`close` closes it; a forked child forgets it (``multiplex``).

    @property
    def parked(self) -> Closable | None:
        """The loop parked here, if any."""
        return self._parked

    def park(self, loop: Closable) -> bool:
        """Keep ``loop`` until :meth:`unpark`, unless one is kept already (then False)."""
        with self._park_lock:
            if self._parked is None:
                self._parked = loop
                return True
        return False

    def unpark(self) -> Closable | None:
        """The parked loop, no longer kept here (None if there is none)."""
        with self._park_lock:
            loop, self._parked = self._parked, None
        return loop

    def close(self) -> None:
        """Close every idle connection (the parked loop's too)."""
        loop = self.unpark()
        if loop is not None:
            loop.close()  # (gives its idle connections to ``idle`` first)
        self.idle.close()
