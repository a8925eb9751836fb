"""Many GETs at once from one thread (Multiplexer), against a real socket server with a thread per
connection: bodies of every size on reused connections, 1xx answers, answers left to the blocking
client, a server-closed idle connection, refused and silent servers, TLS, wake-ups and close."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from _components import require_module

from shardstream.net.multiplex import AVAILABLE, Answer, Multiplexer, borrow
from shardstream.net.whole import WholeBodyPool, render_request

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="needs select.epoll (Linux)")

# Answers the request it read (its path) with the bytes to send, or None to close the connection.
Respond = Callable[[str], "bytes | None"]


def ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


class Server:
    """A keep-alive TCP (or TLS) server on 127.0.0.1 with a thread per connection."""

    def __init__(self, respond: Respond, context: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.context = context
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.open = 0
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.conns: list[socket.socket] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                self.open += 1
                self.conns.append(conn)
            thread = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self.context is not None:
                conn = self.context.wrap_socket(conn, server_side=True)
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                request, _, data = data.partition(b"\r\n\r\n")
                path = request.split(b" ")[1].decode()
                with self.lock:
                    self.paths.append(path)
                reply = self.respond(path)
                if reply is None:
                    return
                conn.sendall(reply)
                if b"\r\nConnection: close\r\n" in reply:
                    return
        except OSError:
            return
        finally:
            conn.close()
            with self.lock:
                self.open -= 1

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not)
        except OSError:
            pass
        self.sock.close()
        self._accept.join(5)
        assert not self._accept.is_alive()
        with self.lock:
            conns = list(self.conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self.threads:
            thread.join(5)


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def make(respond: Respond, context: ssl.SSLContext | None = None) -> Server:
        server = Server(respond, context)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


@pytest.fixture
def pools() -> Iterator[Callable[..., WholeBodyPool]]:
    made: list[WholeBodyPool] = []

    def make(**kwargs: object) -> WholeBodyPool:
        pool = WholeBodyPool(**kwargs)  # type: ignore[arg-type]
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.close()


def _request(path: str, port: int) -> bytes:
    return render_request("GET", path, {"Host": f"127.0.0.1:{port}"})


def _run(multi: Multiplexer, jobs: list[tuple[object, tuple[str, str, int], bytes]]) -> dict[object, Answer]:
    out: dict[object, Answer] = {}
    for token, key, request in jobs:
        failed = multi.submit(token, key, request)
        if failed is not None:
            out[token] = failed
    deadline = time.monotonic() + 20
    while len(out) < len(jobs):
        assert time.monotonic() < deadline, f"only {len(out)} of {len(jobs)} answers"
        for answer in multi.wait(None):
            out[answer.token] = answer
    return out


def _body(path: str) -> bytes:
    size = int(path.rsplit("/", 1)[1])
    return (path.encode() * (size // len(path) + 1))[:size]


def test_bodies_of_every_size_on_reused_connections(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool]
) -> None:
    server = serve(lambda path: ok(_body(path), 'ETag: "x"'))
    pool = pools()
    multi = Multiplexer(pool)
    key = ("http", "127.0.0.1", server.port)
    sizes = [0, 1, 1000, 65_000, 65_536, 70_000, 300_000] * 6
    try:
        for rnd in range(2):  # the second round runs on the first round's connections
            paths = [f"/r{rnd}/{i}/{n}" for i, n in enumerate(sizes)]
            before = time.monotonic()
            got = _run(multi, [(p, key, _request(p, server.port)) for p in paths])
            after = time.monotonic()
            for p in paths:
                assert got[p].error is None and got[p].status == 200, got[p]
                assert before < got[p].sent < after  # when the request was all written
                assert got[p].body == _body(p)
                assert b'etag: "x"' in got[p].head
            assert len(multi) == 0
        assert server.accepted <= len(sizes)  # no more connections than requests in flight
    finally:
        multi.close()
    assert pool.idle.count() == server.accepted  # every connection went back to the pool, idle
    with pool.idle._lock:
        conns = [c for idle in pool.idle._idle.values() for c in idle]
    assert all(c.sock.getblocking() for c in conns)
    # and the blocking client can use them
    sink = bytearray()
    resp = pool.get(key, "/after/5", {"Host": f"127.0.0.1:{server.port}"}, sink)
    assert resp.status == 200 and bytes(sink) == _body("/after/5")
    assert server.accepted == len(conns)
    pool.close()


def test_informational_answers_are_skipped_and_errors_come_with_their_body(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool]
) -> None:
    def respond(path: str) -> bytes:
        if path == "/missing":
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nNoSuchKey"
        return b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after 100")

    server = serve(respond)
    multi = Multiplexer(pools())
    key = ("http", "127.0.0.1", server.port)
    try:
        got = _run(multi, [(p, key, _request(p, server.port)) for p in ("/a", "/missing", "/b")])
    finally:
        multi.close()
    assert got["/a"].body == got["/b"].body == b"after 100" and got["/a"].status == 200
    assert got["/missing"].status == 404 and got["/missing"].body == b"NoSuchKey"


def test_answers_it_does_not_read_are_errors_for_the_blocking_client(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool]
) -> None:
    def respond(path: str) -> bytes:
        if path == "/chunked":
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        if path == "/garbage":
            return b"SPAM\r\n\r\n"
        if path == "/short":
            return b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc"
        return ok(b"fine")

    server = serve(respond)
    pool = pools()
    multi = Multiplexer(pool)
    key = ("http", "127.0.0.1", server.port)
    paths = ["/chunked", "/garbage", "/fine"]
    try:
        got = _run(multi, [(p, key, _request(p, server.port)) for p in paths])
    finally:
        multi.close()
    assert isinstance(got["/chunked"].error, http.client.HTTPException)
    assert "Content-Length" in str(got["/chunked"].error)
    assert isinstance(got["/garbage"].error, http.client.BadStatusLine)
    assert got["/fine"].body == b"fine"
    # a body cut short: the server closes after 3 of 10 bytes
    multi = Multiplexer(pool)
    try:
        short = _run(multi, [("s", key, _request("/short", server.port))])["s"]
    finally:
        multi.close()
    assert isinstance(short.error, http.client.IncompleteRead)
    assert pool.idle.count() <= 1  # only the good answer's connection was kept


def test_a_connection_the_server_closed_while_idle_is_replaced_once(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool]
) -> None:
    served: list[str] = []

    def respond(path: str) -> bytes | None:
        served.append(path)
        return ok(b"x" * 10) if path != "/bye" else None  # /bye: close without answering

    server = serve(respond)
    pool = pools()
    key = ("http", "127.0.0.1", server.port)
    sink = bytearray()
    pool.get(key, "/warm", {"Host": "h"}, sink)  # one idle connection in the pool
    assert pool.idle.count() == 1
    # the server closes that idle connection: the next request on it gets no answer
    with server.lock:
        victim = server.conns[0]
    victim.shutdown(socket.SHUT_RDWR)
    time.sleep(0.1)
    multi = Multiplexer(pool)
    try:
        got = _run(multi, [("a", key, _request("/a", server.port))])["a"]
        assert got.error is None and got.body == b"x" * 10
        assert server.accepted == 2
        # sent on the reused connection, closed without an answer, sent once more on a new
        # one that closes too: an error, not a third try
        bye = _run(multi, [("b", key, _request("/bye", server.port))])["b"]
        assert isinstance(bye.error, (http.client.IncompleteRead, ConnectionError)), bye
    finally:
        multi.close()
    assert served.count("/bye") == 2 and server.accepted == 3


def test_refused_and_silent_servers_fail_in_time(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool]
) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    silent = serve(lambda path: b"")  # reads the request, sends nothing, keeps the connection
    pool = pools(response_timeout=0.3)
    multi = Multiplexer(pool)
    try:
        t0 = time.monotonic()
        got = _run(
            multi,
            [
                ("refused", ("http", "127.0.0.1", port), _request("/x", port)),
                ("silent", ("http", "127.0.0.1", silent.port), _request("/x", silent.port)),
            ],
        )
        assert isinstance(got["refused"].error, ConnectionRefusedError | OSError)
        assert isinstance(got["silent"].error, TimeoutError)
        assert time.monotonic() - t0 < 8  # (generous for a loaded machine)
        assert len(multi) == 0
    finally:
        multi.close()
    assert pool.idle.count() == 0


def test_wake_returns_a_wait_from_another_thread(pools: Callable[..., WholeBodyPool]) -> None:
    multi = Multiplexer(pools())
    try:
        timer = threading.Timer(0.2, multi.wake)
        timer.start()
        t0 = time.monotonic()
        assert multi.wait(None) == []
        assert 0.15 < time.monotonic() - t0 < 8  # woken, not the 1 s poll repeated (generous for load)
        timer.join()
    finally:
        multi.close()


def test_close_closes_requests_in_flight(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool]
) -> None:
    release = threading.Event()

    def respond(path: str) -> bytes:
        if path == "/slow":
            release.wait(10)
        return ok(b"done")

    server = serve(respond)
    pool = pools()
    multi = Multiplexer(pool)
    key = ("http", "127.0.0.1", server.port)
    assert multi.submit("slow", key, _request("/slow", server.port)) is None
    assert _run(multi, [("fast", key, _request("/fast", server.port))])["fast"].body == b"done"
    assert multi.wait(0.2) == [] and len(multi) == 1
    multi.close()
    release.set()
    assert pool.idle.count() == 1  # the idle one went back; the busy one was closed
    deadline = time.monotonic() + 5
    while server.open > 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.open == 1
    pool.close()


@pytest.fixture
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh certificate for 127.0.0.1 from a test CA (trustme, as in the
    proxy tests), and a client context that trusts only that CA."""
    trustme = require_module("trustme", "TLS on the epoll loop (test certificates from trustme)")
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


def test_tls_connections_handshake_without_blocking(
    serve: Callable[..., Server],
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    pools: Callable[..., WholeBodyPool],
) -> None:
    server_ctx, client_ctx = tls
    server = serve(lambda path: ok(_body(path)), server_ctx)
    pool = pools(ssl_context=client_ctx)
    multi = Multiplexer(pool)
    key = ("https", "127.0.0.1", server.port)
    try:
        for rnd in range(2):
            paths = [f"/t{rnd}/{i}/{n}" for i, n in enumerate([5, 70_000, 200_000, 16_000] * 4)]
            got = _run(multi, [(p, key, _request(p, server.port)) for p in paths])
            assert all(got[p].error is None and got[p].body == _body(p) for p in paths)
        assert server.accepted <= 16
    finally:
        multi.close()
    sink = bytearray()  # a TLS connection handed back works with the blocking client
    pool.get(key, "/back/7", {"Host": "h"}, sink)
    assert bytes(sink) == _body("/back/7")
    # a server whose certificate is not trusted: the handshake fails, clearly
    untrusting = Multiplexer(pools())
    try:
        got = _run(untrusting, [("x", key, _request("/x/1", server.port))])
    finally:
        untrusting.close()
    assert isinstance(got["x"].error, ssl.SSLCertVerificationError)
    pool.close()


def _fetched(multi: Multiplexer, key: tuple[str, str, int], paths: list[str]) -> bool:
    """Whether GETs of ``paths`` (``/.../size``) all answered 200 with their bodies."""
    got = _run(multi, [(p, key, _request(p, key[2])) for p in paths])
    return all(got[p].error is None and got[p].status == 200 and got[p].body == _body(p) for p in paths)


def _parked(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool], paths: list[str]
) -> tuple[Server, WholeBodyPool, tuple[str, str, int], Multiplexer]:
    """A server, a pool and the loop parked on it after fetching ``paths``."""
    server = serve(lambda path: ok(_body(path)))
    pool = pools()
    key = ("http", "127.0.0.1", server.port)
    multi = borrow(pool)
    assert _fetched(multi, key, paths)
    multi.park()
    return server, pool, key, multi


def test_a_parked_loop_keeps_its_connections_for_the_next_borrow(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool]
) -> None:
    server, pool, key, multi = _parked(serve, pools, [f"/a/{i}/{100 * i}" for i in range(8)])
    conns = server.accepted
    assert pool.parked is multi and not multi.closed and pool.idle.count() == 0
    again = borrow(pool)
    assert again is multi and pool.parked is None
    assert _fetched(again, key, [f"/b/{i}/{100 * i}" for i in range(8)])
    assert server.accepted == conns  # the same connections, still non-blocking and watched
    # a loop with a request in flight is closed, not parked; nor is a second loop
    again.submit("slow", key, _request("/c/10", server.port))
    again.park()
    assert again.closed and pool.parked is None
    other, third = borrow(pool), borrow(pool)
    other.park()
    third.park()
    assert pool.parked is other and third.closed
    # the pool closes its parked loop and that loop's connections
    pool.close()
    assert other.closed and pool.parked is None
    deadline = time.monotonic() + 5
    while server.open and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.open == 0


def test_a_forked_child_forgets_the_parked_loop_and_the_parent_keeps_it(
    serve: Callable[..., Server], pools: Callable[..., WholeBodyPool]
) -> None:
    import os

    server, pool, key, multi = _parked(serve, pools, [f"/p/{i}/50" for i in range(4)])
    conns = server.accepted
    pid = os.fork()
    if pid == 0:  # the child: its own loop and connections; the parent's are left alone
        code = 1
        try:
            mine = borrow(pool)
            code = 0 if mine is not multi and multi.closed and _fetched(mine, key, ["/q/0/70"]) else 2
            mine.close()
        finally:
            os._exit(code)
    deadline, done = time.monotonic() + 30, (0, 0)
    try:  # the child is waited for, and killed if it hangs: no process outlives the test
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert done[0] == pid, "the forked child did not finish within 30 s"
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert server.accepted == conns + 1  # the child connected once, for itself
    assert borrow(pool) is multi and not multi.closed
    assert _fetched(multi, key, [f"/r/{i}/60" for i in range(4)])
    assert server.accepted == conns + 1  # on the parent's connections, still its own
    multi.close()
