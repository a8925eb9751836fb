"""Loopback test servers: SeaweedFS S3, a Range-capable HTTP file server and a fault-injecting proxy.

Everything binds to 127.0.0.1 on free ports and is stopped by PID (or by shutting its sockets);
nothing here talks to the internet. The classes are plain objects so benchmarks and other test
packages can reuse them outside pytest.

* :class:`SeaweedS3` (from :mod:`shardstream.testing.seaweed`, shared with the demo and the
  benchmarks) starts ``weed server -s3`` in its own process group with two credentialed
  identities and an anonymous read-only bucket.
* :class:`HTTPFileServer` serves a directory with ``Range``/``HEAD``/``ETag`` support, counts
  requests per path, records the ``Range`` header of each GET and can be told to fail the next N
  requests of a path with a status.
* :class:`FaultProxy` forwards TCP to an upstream and can cut a connection after N response bytes
  or stall it; it also parses the HTTP requests it forwards and counts them per (method, path).
"""

from __future__ import annotations

import collections
import contextlib
import email.utils
import hashlib
import http.server
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardstream.testing.seaweed import SeaweedS3, free_port, free_ports

__all__ = ["Cut", "FaultProxy", "HTTPFileServer", "SeaweedS3", "Stall", "free_port", "free_ports"]

LOOPBACK = "127.0.0.1"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _CountingHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # silence per-request stderr lines
        pass

    def _path(self) -> Path | None:
        rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        root = self.server.root.resolve()
        path = (root / rel).resolve()
        if root not in path.parents and path != root:
            return None
        return path if path.is_file() else None

    def _send_error(self, status: int) -> None:
        body = f"error {status}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        srv = self.server
        key = urllib.parse.urlsplit(self.path).path
        with srv.lock:
            srv.requests[(self.command, key)] += 1
            if self.command == "GET":
                srv.ranges[key].append(self.headers.get("Range"))
            forced = srv.failures.get(key)
            if forced and forced[1] > 0:
                srv.failures[key] = (forced[0], forced[1] - 1)
                status: int | None = forced[0]
            else:
                status = None
        if status is not None:
            self._send_error(status)
            return
        path = self._path()
        if path is None:
            self._send_error(404)
            return
        data = path.read_bytes()
        etag = '"' + hashlib.md5(data).hexdigest() + '"'
        if_match = self.headers.get("If-Match")
        if if_match is not None and if_match.strip() not in (etag, "*"):
            self._send_error(412)
            return
        start, end = 0, len(data)
        status = 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            first, _, last = rng[6:].partition("-")
            start = int(first) if first else max(0, len(data) - int(last))
            end = min(len(data), int(last) + 1) if (first and last) else len(data)
            if start >= len(data) and len(data) > 0:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/x-tar")
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", email.utils.formatdate(path.stat().st_mtime, usegmt=True))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if self.command == "HEAD":
            return
        view = memoryview(data)[start:end]
        try:
            for pos in range(0, len(view), 1 << 16):
                self.wfile.write(view[pos : pos + (1 << 16)])
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = _handle
    do_HEAD = _handle


class _CountingHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    root: Path
    requests: collections.Counter[tuple[str, str]]
    ranges: collections.defaultdict[str, list[str | None]]
    failures: dict[str, tuple[int, int]]
    lock: threading.Lock

    def handle_error(self, request: Any, client_address: Any) -> None:  # client went away: fine
        pass


class HTTPFileServer:
    """Serves ``root`` on loopback with Range, HEAD, ETag and If-Match support.

    Attributes:
        url: base URL, e.g. ``http://127.0.0.1:PORT``; ``url_for("a/b.tar")`` builds file URLs.
        requests: ``Counter`` of ``(method, path)`` -> number of requests received.
        ranges: path -> the ``Range`` header of each GET of it, in order (``None``: no header).
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._server = _CountingHTTPServer((LOOPBACK, 0), _Handler)
        self._server.root = self.root
        self._server.requests = collections.Counter()
        self._server.ranges = collections.defaultdict(list)
        self._server.failures = {}
        self._server.lock = threading.Lock()
        self.port: int = self._server.server_address[1]
        self.url = f"http://{LOOPBACK}:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http-file-server", daemon=True
        )

    @property
    def requests(self) -> collections.Counter[tuple[str, str]]:
        return self._server.requests

    @property
    def ranges(self) -> collections.defaultdict[str, list[str | None]]:
        return self._server.ranges

    def range_headers(self, path: str) -> list[str | None]:
        """The ``Range`` header of each GET of ``path`` so far (``None`` where there was none)."""
        with self._server.lock:
            return list(self._server.ranges["/" + path.lstrip("/")])

    def gets(self, path: str) -> int:
        """Number of GET requests received for ``path`` (leading ``/`` optional)."""
        return self._server.requests[("GET", "/" + path.lstrip("/"))]

    def reset_counts(self) -> None:
        with self._server.lock:
            self._server.requests.clear()
            self._server.ranges.clear()

    def fail(self, path: str, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests for ``path`` with ``status``."""
        with self._server.lock:
            self._server.failures["/" + path.lstrip("/")] = (status, times)

    def url_for(self, path: str) -> str:
        return f"{self.url}/{path.lstrip('/')}"

    def write(self, path: str, data: bytes) -> str:
        """Create ``root/path`` with ``data``; returns its URL."""
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return self.url_for(path)

    def start(self) -> HTTPFileServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> HTTPFileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------------------------
# Fault-injecting TCP proxy


@dataclass(frozen=True)
class Cut:
    """Close the connection after forwarding ``after`` bytes of response (headers included)."""

    after: int


@dataclass(frozen=True)
class Stall:
    """After ``after`` response bytes, stop forwarding for ``seconds`` (then close)."""

    after: int
    seconds: float


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

    Each new connection takes the next plan from :meth:`plan` (a :class:`Cut`, a :class:`Stall`
    or ``None`` for a clean pass-through); when the queue is empty connections pass through.

    Attributes:
        url: ``http://127.0.0.1:PORT`` to use instead of the upstream's URL.
        connections: number of connections accepted.
        requests: ``Counter`` of ``(method, path)`` seen in forwarded HTTP requests.
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
        self._plans: collections.deque[Cut | Stall | None] = collections.deque()
        self._lock = threading.Lock()
        self.connections = 0
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self._stop = threading.Event()
        self._socks: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)

    def plan(self, *plans: Cut | Stall | None) -> None:
        """Queue fault plans for the next connections (one per connection, in order)."""
        with self._lock:
            self._plans.extend(plans)

    def clear(self) -> None:
        """Drop queued plans and reset the counters."""
        with self._lock:
            self._plans.clear()
            self.requests.clear()
            self.connections = 0

    @property
    def open_connections(self) -> int:
        """Client connections currently open through the proxy."""
        with self._lock:
            return len(self._socks) // 2

    @property
    def ranges(self) -> collections.defaultdict[str, list[str | None]]:
        return self._server.ranges

    def range_headers(self, path: str) -> list[str | None]:
        """The ``Range`` header of each GET of ``path`` so far (``None`` where there was none)."""
        with self._server.lock:
            return list(self._server.ranges["/" + path.lstrip("/")])

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
                plan = self._plans.popleft() if self._plans else None
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

    def _close_pair(self, a: socket.socket, b: socket.socket) -> None:
        for s in (a, b):
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

    def _pump_down(self, upstream: socket.socket, client: socket.socket, plan: Cut | Stall | None) -> None:
        sent = 0
        limit = plan.after if plan is not None else None
        try:
            while True:
                want = 1 << 16 if limit is None else min(1 << 16, limit - sent)
                if want <= 0:
                    if isinstance(plan, Stall):
                        self._stop.wait(plan.seconds)
                    break
                data = upstream.recv(want)
                if not data:
                    break
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            self._close_pair(client, upstream)


@contextlib.contextmanager
def running(server: Any) -> Iterator[Any]:
    """``with running(FaultProxy(...)) as proxy:`` starts and always stops a server."""
    server.start()
    try:
        yield server
    finally:
        server.stop()
