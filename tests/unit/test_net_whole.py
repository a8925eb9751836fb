"""The whole-body HTTP/1.1 client (net.whole), against a scripted socket server: framing
(length, chunked, close), keep-alive and a server-closed idle connection, and failures that keep
the bytes that arrived."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from shardstream.net.whole import WholeBodyPool

# One handler per accepted connection: it gets the socket and the request bytes it read.
Handler = Callable[[socket.socket], None]


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    return data


class Scripted:
    """A TCP server on 127.0.0.1 whose n-th connection is served by ``handlers[n]``."""

    def __init__(self, handlers: list[Handler]) -> None:
        self.handlers = handlers
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        for handler in self.handlers:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                handler(conn)

    def close(self) -> None:
        self.sock.close()
        self._thread.join(5)


@pytest.fixture
def scripted() -> Iterator[Callable[[list[Handler]], Scripted]]:
    servers: list[Scripted] = []

    def make(handlers: list[Handler]) -> Scripted:
        server = Scripted(handlers)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def answer(*responses: bytes, then_close: bool = False) -> Handler:
    """Serve one response per request on this connection, in order."""

    def handle(conn: socket.socket) -> None:
        for response in responses:
            if not _read_request(conn):
                return
            conn.sendall(response)
        if not then_close:
            _read_request(conn)  # wait until the client closes

    return handle


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def get(
    pool: WholeBodyPool, server: Scripted, sink: bytearray, path: str = "/k"
) -> tuple[int, dict[str, str]]:
    resp = pool.get(("http", "127.0.0.1", server.port), path, {"Host": "x"}, sink)
    return resp.status, resp.headers


def test_content_length_bodies_reuse_one_connection(scripted: Callable[[list[Handler]], Scripted]) -> None:
    big = bytes(range(256)) * 1000  # larger than the receive buffer
    server = scripted([answer(ok(b"hello", b'ETag: "e1"\r\n'), ok(big), ok(b""))])
    pool = WholeBodyPool()
    sink = bytearray()
    status, headers = get(pool, server, sink)
    assert (status, bytes(sink), headers["etag"]) == (200, b"hello", '"e1"')
    sink = bytearray(b"prefix:")
    assert get(pool, server, sink)[0] == 200 and bytes(sink) == b"prefix:" + big
    sink = bytearray()
    assert get(pool, server, sink)[0] == 200 and sink == b""
    assert server.accepted == 1
    pool.close()


def test_chunked_close_delimited_and_http10_bodies(scripted: Callable[[list[Handler]], Scripted]) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nT: 1\r\n\r\n"
    )
    until_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"
    http10 = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
    continued = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after 100")
    server = scripted([answer(chunked, continued), answer(until_close, then_close=True), answer(http10)])
    pool = WholeBodyPool()
    for want in (b"hello world", b"after 100", b"all of it", b"ok"):
        sink = bytearray()
        assert get(pool, server, sink)[0] == 200 and bytes(sink) == want
    assert server.accepted == 3  # a close-delimited or HTTP/1.0 answer is not kept alive
    pool.close()


def test_a_reused_connection_the_server_closed_is_replaced_once(
    scripted: Callable[[list[Handler]], Scripted],
) -> None:
    server = scripted([answer(ok(b"one"), then_close=True), answer(ok(b"two"))])
    pool = WholeBodyPool()
    sink = bytearray()
    get(pool, server, sink)
    time.sleep(0.1)  # the server has closed the idle connection
    sink = bytearray()
    assert get(pool, server, sink)[0] == 200 and bytes(sink) == b"two"
    assert server.accepted == 2
    pool.close()


def test_a_cut_body_keeps_the_bytes_that_arrived(scripted: Callable[[list[Handler]], Scripted]) -> None:
    server = scripted(
        [answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"a" * 70000, then_close=True)]
    )
    pool = WholeBodyPool()
    sink = bytearray(b"x")
    with pytest.raises(http.client.IncompleteRead):
        get(pool, server, sink)
    assert bytes(sink) == b"x" + b"a" * 70000  # a retry resumes after these
    pool.close()


def test_no_answer_times_out_and_garbage_is_refused(scripted: Callable[[list[Handler]], Scripted]) -> None:
    def silent(conn: socket.socket) -> None:
        _read_request(conn)
        time.sleep(1.5)

    server = scripted([silent])
    garbage = scripted([answer(b"SSH-2.0-OpenSSH\r\n\r\n", then_close=True)])
    pool = WholeBodyPool(response_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        get(pool, server, bytearray())
    assert time.monotonic() - started < 1.2
    with pytest.raises(http.client.BadStatusLine):
        get(pool, garbage, bytearray())
    pool.close()


def test_a_forked_child_starts_without_connections(scripted: Callable[[list[Handler]], Scripted]) -> None:
    server = scripted([answer(ok(b"one"))])
    pool = WholeBodyPool()
    get(pool, server, bytearray())
    assert pool.idle.count() == 1
    pool.idle.forget_after_fork()  # what the at-fork hook runs in a child
    assert not pool.idle.count()
