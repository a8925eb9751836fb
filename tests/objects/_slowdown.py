"""An HTTP-level proxy for S3 tests: answers chosen requests with 503 SlowDown, cuts others
after some response bytes, and counts requests (LIST = a GET on the bucket itself).

Requests are forwarded with their own headers (``Host`` included), so SigV4 signatures made
for the proxy's address still verify at the server behind it.
"""

from __future__ import annotations

import collections
import http.client
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class SlowDownProxy:
    """Plans are consumed one per object GET: ``"slowdown"``, ``("cut", n)`` or ``None``.

    Attributes:
        url: ``http://127.0.0.1:PORT``.
        lists: LIST requests seen.
        gets: object GETs seen (by path).
        ranges: ``(path, Range header or None)`` of each object GET, in arrival order.
        slowdowns / cuts: faults injected.
    """

    def __init__(self, upstream: str) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.plans: collections.deque[Any] = collections.deque()
        self.every_nth_slowdown = 0  # answer every n-th object GET with 503 (0: never)
        self.lock = threading.Lock()
        self.lists = 0
        self.gets: collections.Counter[str] = collections.Counter()
        self.ranges: list[tuple[str, str | None]] = []
        self.slowdowns = 0
        self.cuts = 0
        self._seen = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 5

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                proxy._handle(self)

            do_HEAD = do_PUT = do_POST = do_DELETE = do_GET  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})

    def start(self) -> SlowDownProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def __enter__(self) -> SlowDownProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _plan(self, handler: BaseHTTPRequestHandler) -> Any:
        path, _, query = handler.path.partition("?")
        is_list = handler.command == "GET" and path.strip("/").count("/") == 0
        with self.lock:
            if is_list:
                self.lists += 1
                return None
            if handler.command != "GET":
                return None
            self.gets[path] += 1
            self.ranges.append((path, handler.headers.get("Range")))
            self._seen += 1
            if self.plans:
                return self.plans.popleft()
            if self.every_nth_slowdown and self._seen % self.every_nth_slowdown == 0:
                return "slowdown"
        return None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        plan = self._plan(handler)
        if plan == "slowdown":
            with self.lock:
                self.slowdowns += 1
            handler.send_response(503)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(_SLOWDOWN)))
            handler.end_headers()
            handler.wfile.write(_SLOWDOWN)
            return
        conn = http.client.HTTPConnection(*self.upstream, timeout=10)
        try:
            conn.request(handler.command, handler.path, body=body, headers=dict(handler.headers.items()))
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        handler.send_response(resp.status)
        for name, value in resp.getheaders():
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command == "HEAD":
            return
        if isinstance(plan, tuple) and plan[0] == "cut":
            with self.lock:
                self.cuts += 1
            handler.wfile.write(data[: plan[1]])
            handler.wfile.flush()
            handler.close_connection = True
            try:
                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        handler.wfile.write(data)
