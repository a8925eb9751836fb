"""Fault injection for the loopback tests: a TCP proxy that cuts, resets, stalls or throttles
responses, and a server that accepts connections but never answers.

Everything binds to 127.0.0.1 on free ports and is stopped by closing its sockets and joining
its threads. Re-exported by :mod:`_servers`, where the other test servers live.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

__all__ = ["Cut", "FaultProxy", "Plan", "Reset", "SilentServer", "Stall", "Throttle"]

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Cut:
    """Close the connection after forwarding ``after`` bytes of response (headers included);
    ``Cut(0)`` closes it once the upstream starts answering, so the request has reached it."""

    after: int


@dataclass(frozen=True)
class Stall:
    """After ``after`` response bytes, stop forwarding for ``seconds`` (then close)."""

    after: int
    seconds: float


@dataclass(frozen=True)
class Reset:
    """Abort the connection with a TCP reset (RST) after forwarding ``after`` response bytes."""

    after: int


@dataclass(frozen=True)
class Throttle:
    """Forward the response at about ``bytes_per_second``."""

    bytes_per_second: int


Plan = Cut | Stall | Reset | Throttle | None


@dataclass
class _RequestCounter:
    """Parses the client->server byte stream into HTTP requests (heads + Content-Length bodies)."""

    counts: collections.Counter[tuple[str, str]]
    lock: threading.Lock
    buf: bytearray = field(default_factory=bytearray)
    body_left: int = 0
    broken: bool = False

    def feed(self, data: bytes) -> None:
        if self.broken:
            return
        self.buf += data
        while True:
            if self.body_left:
                take = min(self.body_left, len(self.buf))
                del self.buf[:take]
                self.body_left -= take
                if self.body_left:
                    return
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            del self.buf[: end + 4]
            method, _, rest = head[0].partition(" ")
            target = rest.rpartition(" ")[0]
            with self.lock:
                self.counts[(method, urllib.parse.urlsplit(target).path)] += 1
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
            if "chunked" in headers.get("transfer-encoding", ""):
                self.broken = True  # cannot follow chunked bodies; stop counting this connection
                return
            self.body_left = int(headers.get("content-length", "0") or 0)


class FaultProxy:
    """A loopback TCP proxy to ``upstream`` that injects faults into responses.

    Each new connection takes the next plan from :meth:`plan` (a :class:`Cut`, :class:`Reset`,
    :class:`Stall`, :class:`Throttle` or ``None`` for a clean pass-through); when the queue is
    empty, connections follow the plan set by :meth:`every` (default: pass through).

    Attributes:
        url: ``http://127.0.0.1:PORT`` to use instead of the upstream's URL.
        connections: number of connections accepted.
        requests: ``Counter`` of ``(method, path)`` seen in forwarded HTTP requests.
        response_bytes: bytes forwarded from the upstream to clients (headers included).
    """

    def __init__(self, upstream: tuple[str, int] | str) -> None:
        if isinstance(upstream, str):
            parts = urllib.parse.urlsplit(upstream)
            upstream = (parts.hostname or LOOPBACK, parts.port or 80)
        self.upstream = upstream
        self._listener = socket.create_server((LOOPBACK, 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://{LOOPBACK}:{self.port}"
        self._plans: collections.deque[Plan] = collections.deque()
        self._default: Plan = None
        self._lock = threading.Lock()
        self.connections = 0
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.response_bytes = 0
        self._stop = threading.Event()
        self._socks: set[socket.socket] = set()
        self._resetting: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)

    def plan(self, *plans: Plan) -> None:
        """Queue fault plans for the next connections (one per connection, in order)."""
        with self._lock:
            self._plans.extend(plans)

    def every(self, plan: Plan) -> None:
        """The plan of every connection once the queue is empty (``None``: pass through)."""
        with self._lock:
            self._default = plan

    def clear(self) -> None:
        """Drop queued plans and reset the counters."""
        with self._lock:
            self._plans.clear()
            self.requests.clear()
            self.connections = 0
            self.response_bytes = 0

    @property
    def open_connections(self) -> int:
        """Client connections currently open through the proxy."""
        with self._lock:
            return len(self._socks) // 2

    def gets(self, path: str) -> int:
        """Number of GET requests forwarded for ``path``."""
        return self.requests[("GET", "/" + path.lstrip("/"))]

    def start(self) -> FaultProxy:
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._accept_thread.join(timeout=5)
        self._listener.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                plan = self._plans.popleft() if self._plans else self._default
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._socks.update((client, upstream))
            counter = _RequestCounter(self.requests, self._lock)
            for target, args in (
                (self._pump_up, (client, upstream, counter)),
                (self._pump_down, (upstream, client, plan)),
            ):
                t = threading.Thread(target=target, args=args, daemon=True)
                t.start()
                self._threads.append(t)

    def _reset(self, client: socket.socket) -> None:
        """Abort ``client`` with RST: SO_LINGER 0 makes close() reset instead of FIN, and
        SHUT_RD (which sends nothing) wakes the other pump's recv so the close takes effect now."""
        with self._lock:
            self._resetting.add(client)
        with contextlib.suppress(OSError):
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.shutdown(socket.SHUT_RD)
        with contextlib.suppress(OSError):
            client.close()

    def _close_pair(self, a: socket.socket, b: socket.socket) -> None:
        for s in (a, b):
            with self._lock:
                resetting = s in self._resetting
            if not resetting:  # a shutdown would send FIN ahead of the reset
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
            with self._lock:
                self._socks.discard(s)

    def _pump_up(self, client: socket.socket, upstream: socket.socket, counter: _RequestCounter) -> None:
        try:
            while True:
                data = client.recv(1 << 16)
                if not data:
                    break
                counter.feed(data)
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            self._close_pair(client, upstream)

    def _pump_down(self, upstream: socket.socket, client: socket.socket, plan: Plan) -> None:
        sent = 0
        limit = plan.after if isinstance(plan, Cut | Stall | Reset) else None
        started = time.monotonic()
        try:
            while True:
                want = 1 << 16 if limit is None else min(1 << 16, limit - sent)
                if isinstance(plan, Throttle):
                    want = min(want, max(1, plan.bytes_per_second // 20))
                if want <= 0:
                    if isinstance(plan, Cut) and sent == 0:
                        # Cut(0): the request reaches the server and its answer never reaches the
                        # client. Without waiting for the answer to start, the close could come
                        # before the client's request was forwarded (or counted).
                        upstream.recv(1)
                    if isinstance(plan, Stall):
                        self._stop.wait(plan.seconds)
                    elif isinstance(plan, Reset):
                        self._reset(client)
                    break
                data = upstream.recv(want)
                if not data:
                    break
                client.sendall(data)
                sent += len(data)
                with self._lock:
                    self.response_bytes += len(data)
                if isinstance(plan, Throttle):
                    ahead = sent / plan.bytes_per_second - (time.monotonic() - started)
                    if ahead > 0 and self._stop.wait(ahead):
                        break
        except OSError:
            pass
        finally:
            self._close_pair(client, upstream)


class SilentServer:
    """Accepts TCP connections on loopback and never sends anything (until stopped).

    Attributes:
        url: ``http://127.0.0.1:PORT``.
        connections: number of connections accepted.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server((LOOPBACK, 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.connections = 0
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="silent-server", daemon=True)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._socks.append(conn)

    def start(self) -> SilentServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> SilentServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
