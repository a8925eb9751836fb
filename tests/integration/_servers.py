"""Loopback test servers: SeaweedFS S3, a Range-capable HTTP file server and a fault-injecting proxy.

Everything binds to 127.0.0.1 on free ports and is stopped by PID (or by shutting its sockets);
nothing here talks to the internet. The classes are plain objects so benchmarks and other test
packages can reuse them outside pytest.

* :class:`SeaweedS3` (from :mod:`shardstream.testing.seaweed`, shared with the demo and the
  benchmarks) starts ``weed server -s3`` in its own process group with two credentialed
  identities and an anonymous read-only bucket.
* :class:`HTTPFileServer` serves a directory with ``Range``/``HEAD``/``ETag`` support, counts
  requests per path, records the ``Range`` header (and all headers) of each GET and can be told
  to fail the next N requests of a path with a status, or to redirect them.
* :class:`FaultProxy` (from :mod:`_faults`) forwards TCP to an upstream and can cut a connection
  after N response bytes (:class:`Cut`), reset it with a TCP RST (:class:`Reset`), stall it
  (:class:`Stall`) or throttle it (:class:`Throttle`), per connection or for every connection
  (:meth:`FaultProxy.every`); it also counts the HTTP requests it forwards per (method, path).
* :class:`SilentServer` (from :mod:`_faults`) accepts TCP connections and never sends a byte.
"""

from __future__ import annotations

import collections
import contextlib
import email.utils
import hashlib
import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _faults import Cut, FaultProxy, Reset, SilentServer, Stall, Throttle

from shardstream.testing.seaweed import SeaweedS3, free_port, free_ports

__all__ = [
    "Cut",
    "FaultProxy",
    "HTTPFileServer",
    "Reset",
    "SeaweedS3",
    "SilentServer",
    "Stall",
    "Throttle",
    "free_port",
    "free_ports",
]

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
            srv.headers[key].append(dict(self.headers.items()))
            forced = srv.failures.get(key)
            if forced and forced[1] > 0:
                srv.failures[key] = (forced[0], forced[1] - 1)
                status: int | None = forced[0]
            else:
                status = None
            redirect = srv.redirects.get(key)
        if status is not None:
            self._send_error(status)
            return
        if redirect is not None:
            self.send_response(redirect[0])
            self.send_header("Location", redirect[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
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
    redirects: dict[str, tuple[int, str]]
    headers: collections.defaultdict[str, list[dict[str, str]]]
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

    def __init__(self, root: Path | str, ssl_context: Any = None) -> None:
        self.root = Path(root)
        self._server = _CountingHTTPServer((LOOPBACK, 0), _Handler)
        if ssl_context is not None:  # HTTPS with the given (test CA's) certificate
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self._server.root = self.root
        self._server.requests = collections.Counter()
        self._server.ranges = collections.defaultdict(list)
        self._server.failures = {}
        self._server.redirects = {}
        self._server.headers = collections.defaultdict(list)
        self._server.lock = threading.Lock()
        self.port: int = self._server.server_address[1]
        self.url = f"{'https' if ssl_context is not None else 'http'}://{LOOPBACK}:{self.port}"
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

    def redirect(self, path: str, status: int, location: str) -> None:
        """Answer every request for ``path`` with ``status`` and ``Location: location``."""
        with self._server.lock:
            self._server.redirects["/" + path.lstrip("/")] = (status, location)

    def request_headers(self, path: str) -> list[dict[str, str]]:
        """The headers of each request for ``path`` so far, in order."""
        with self._server.lock:
            return list(self._server.headers["/" + path.lstrip("/")])

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


@contextlib.contextmanager
def running(server: Any) -> Iterator[Any]:
    """``with running(FaultProxy(...)) as proxy:`` starts and always stops a server."""
    server.start()
    try:
        yield server
    finally:
        server.stop()
