"""TLS to an origin inside TLS to an ``https://`` proxy: the socket the clients use for it.

``ssl.SSLContext.wrap_socket`` cannot wrap an :class:`ssl.SSLSocket` (the inner TLS would be
written to the descriptor, under the outer TLS), so the inner session is an
:class:`ssl.SSLObject` on memory buffers, and :class:`NestedTLSSocket` moves its records through
the outer socket. It offers the calls the three clients make on a connection (``sendall``,
``send``, ``recv_into``, ``makefile("rb")`` for ``http.client``, timeouts, blocking mode,
``fileno`` for ``epoll``), and behaves like an :class:`ssl.SSLSocket` in non-blocking mode: a read
that would wait raises :class:`ssl.SSLWantReadError`.

One departure, for the non-blocking mode of :mod:`.multiplex`: once a request is encrypted, all
of its records are written before :meth:`send` returns, waiting for the socket to take them when
it is full (a request's few KB fit an idle socket's send buffer, so this wait is rare), because
an encrypted record cannot be handed back half sent.
"""

from __future__ import annotations

import io
import select
import ssl
from typing import Any, cast

__all__ = ["NestedTLSSocket"]

_CHUNK = 1 << 16  # ciphertext read from the outer socket at a time
#: What a non-blocking outer socket raises when a call would have to wait.
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class _Reader(io.RawIOBase):
    """The raw stream under ``makefile("rb")``: reads go to the socket's :meth:`recv_into`."""

    def __init__(self, sock: NestedTLSSocket) -> None:
        super().__init__()
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.recv_into(buffer)


class NestedTLSSocket:
    """A TLS session with ``server_hostname`` inside the connected ``outer`` TLS socket.

    The handshake runs in the constructor, in the outer socket's blocking mode and timeout.

    Args:
        outer: the TLS connection to the proxy, its tunnel to the origin open.
        context: the TLS context for the origin (its CAs verify the origin's certificate).
        server_hostname: the origin's host name (SNI and certificate check).

    Raises:
        ssl.SSLError: the handshake failed (``ssl.SSLCertVerificationError`` for a certificate
            that does not verify).
        OSError: the tunnel failed or timed out.
    """

    def __init__(self, outer: ssl.SSLSocket, context: ssl.SSLContext, server_hostname: str) -> None:
        self._outer = outer
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._buffer = bytearray(_CHUNK)
        self._view = memoryview(self._buffer)
        self._pending = b""  # encrypted bytes not yet taken by the outer socket
        timeout = outer.gettimeout()
        self._wait = timeout if timeout else 60.0  # how long a non-blocking flush may wait
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                if not self._receive():
                    raise ssl.SSLEOFError(
                        f"the proxy's tunnel closed during the TLS handshake with {server_hostname}"
                    ) from None
        self._flush()

    # -- moving records -----------------------------------------------------------------------------

    def _receive(self) -> int:
        """Move ciphertext from the outer socket to the session; 0 at the end of the stream."""
        n = self._outer.recv_into(self._view)
        if n:
            self._incoming.write(self._view[:n])
        return n

    def _flush(self) -> None:
        """Write every encrypted byte out (see the module docstring for the non-blocking case)."""
        data = self._pending + self._outgoing.read() if self._outgoing.pending else self._pending
        view = memoryview(data)
        sent = 0
        try:
            while sent < len(view):
                try:
                    sent += self._outer.send(view[sent:])
                except _WOULD_BLOCK:
                    fd = self._outer.fileno()
                    if not any(select.select([], [fd], [], self._wait)):
                        raise TimeoutError("timed out writing to the proxy's tunnel") from None
        finally:
            self._pending = bytes(view[sent:])

    # -- the socket calls the clients make ------------------------------------------------------------

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        size = nbytes or len(view)
        if not size:
            return 0
        while True:
            try:
                # With a buffer, read() fills it and returns a count (typeshed says bytes).
                n = cast(int, self._tls.read(size, view))
            except ssl.SSLWantReadError:
                if self._pending or self._outgoing.pending:
                    self._flush()
                if not self._receive():  # (a non-blocking outer raises SSLWantReadError here)
                    return 0
                continue
            except ssl.SSLZeroReturnError:  # the origin closed its TLS session
                return 0
            if self._outgoing.pending:  # a post-handshake message to answer
                self._flush()
            return n

    def recv(self, size: int, flags: int = 0) -> bytes:
        buffer = bytearray(size)
        n = self.recv_into(buffer)
        return bytes(buffer[:n])

    def send(self, data: Any, flags: int = 0) -> int:
        if self._pending:
            self._flush()
        n = self._tls.write(data)
        self._flush()
        return n

    def sendall(self, data: Any, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        sent = 0
        while sent < len(view):
            sent += self.send(view[sent:])

    def makefile(self, mode: str = "rb", buffering: int | None = None, **_: Any) -> io.BufferedReader:
        if mode != "rb":
            raise ValueError(f"a nested TLS socket only makes 'rb' files, not {mode!r}")
        return io.BufferedReader(_Reader(self), buffering or io.DEFAULT_BUFFER_SIZE)

    def settimeout(self, value: float | None) -> None:
        if value:
            self._wait = value
        self._outer.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._outer.gettimeout()

    def setblocking(self, flag: bool) -> None:
        self._outer.setblocking(flag)

    def setsockopt(self, *args: Any) -> None:
        self._outer.setsockopt(*args)

    def getsockopt(self, *args: Any) -> Any:
        return self._outer.getsockopt(*args)

    def fileno(self) -> int:
        return self._outer.fileno()

    def getpeercert(self) -> Any:
        return self._tls.getpeercert()

    def version(self) -> str | None:
        return self._tls.version()

    def close(self) -> None:
        self._outer.close()

    def __repr__(self) -> str:
        return f"NestedTLSSocket({self._tls.server_hostname} inside {self._outer!r})"
