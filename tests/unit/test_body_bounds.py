"""Whole-body reads are bounded by what the request expects, never by a server's word: a lying
``Content-Length`` (10 GiB) is refused before anything is allocated, and a chunked body or one
ended by the connection's close is read up to the bound and refused past it, on every path that
reads a body whole (the whole-body client of gs://, s3:// and az://, its epoll loop, the default
``get_into`` over a stream, manifests and indexes through ``read_url``, and the JSON and listing
answers the streamed client reads whole).

The server is a real loopback HTTP/1.1 server that answers by the object's name; the 10 GiB
claim is read in a child process under ``RLIMIT_AS`` (address space of what it has after its
imports plus 1 GiB), so that the unbounded client of before fails there with a MemoryError
instead of taking gigabytes of this machine's memory.
"""

from __future__ import annotations

import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest

from shardstream.config import read_settings
from shardstream.errors import ConfigurationError, ResponseTooLargeError
from shardstream.sources import read_url
from shardstream.sources.gcs import GCSSource
from shardstream.sources.http import HTTPSource

CLAIM = 10 << 30  # what the lying server announces
LONG = 200 << 10  # bytes of the chunked and close-delimited bodies
CHUNK = 4 << 10


def _answer(path: str, ranged: bool) -> tuple[bytes, bool]:
    """(the response to a GET of ``path``, with a Range header or not; whether the connection
    closes after it)."""
    name = path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
    if name in ("huge", "o"):  # a claim, and a little of the body (an object, or a listing page)
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % CLAIM + b"x" * 1000, True
    if name == "chunked":
        chunk = b"%x\r\n%s\r\n" % (CHUNK, b"c" * CHUNK)
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        return head + chunk * (LONG // CHUNK) + b"0\r\n\r\n", False
    if name == "close":  # no length: the body ends when the server closes
        return b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"z" * LONG, True
    if name == "sized":  # 2000 bytes, whatever a Range asked
        status = b"206 Partial Content\r\nContent-Range: bytes 0-1999/2000" if ranged else b"200 OK"
        return b"HTTP/1.1 %s\r\nContent-Length: 2000\r\n\r\n%s" % (status, b"s" * 2000), False
    if name == "small":
        return b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", False
    return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", False


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        conn: socket.socket = self.request
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, data = data.partition(b"\r\n\r\n")
            path = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            response, close = _answer(path, b"\r\nrange:" in head.lower())
            try:
                conn.sendall(response)
            except OSError:  # the client refused the body and closed: as it should
                return
            if close:
                conn.shutdown(socket.SHUT_WR)
                return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def liar() -> Iterator[str]:
    """``http://127.0.0.1:port``: answers GETs by the object's last path part (see _answer)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


_CHILD = textwrap.dedent(
    """
    import resource, sys, tracemalloc
    from shardstream.errors import ResponseTooLargeError
    from shardstream.sources.gcs import GCSSource
    from shardstream.sources.many import OK

    source = GCSSource(endpoint_url=sys.argv[1], token="anon")
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    room = vm + (1 << 30)  # what the imports took, and 1 GiB: never the 10 GiB claimed
    resource.setrlimit(resource.RLIMIT_AS, (room, room))
    tracemalloc.start()
    try:
        source.get_into("gs://bkt/huge", bytearray())
    except ResponseTooLargeError as exc:
        print("get_into:", exc)
    except MemoryError:
        print("get_into: MemoryError")
    gets = source.get_many(window=4)
    try:
        assert gets.submit("t", "gs://bkt/huge") is None
        (outcome,) = gets.wait()
        print("get_many:", outcome.kind, type(outcome.error).__name__, outcome.error)
    except MemoryError:
        print("get_many: MemoryError")
    finally:
        gets.close()
    try:  # a listing page, read by the streamed client
        list(source.list_objects("gs://bkt/"))
    except Exception as exc:
        print("list:", type(exc).__name__, exc)
    except MemoryError:
        print("list: MemoryError")
    print("peak:", tracemalloc.get_traced_memory()[1])
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux-specific")
def test_a_claimed_10_gib_body_is_refused_before_anything_is_allocated(liar: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, liar], capture_output=True, text=True, timeout=120, check=False
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    whole, many = lines["get_into"], lines["get_many"]
    for message in (whole, many):
        assert "gs://bkt/huge" in message and f"{CLAIM:,} bytes" in message and f"{1 << 30:,}" in message
        assert "max_body" in message and "SHARDSTREAM_MAX_BODY" in message, message
        assert "nothing was allocated" in message
    assert many.startswith("failed ResponseTooLargeError")  # final: not retried
    listed = lines["list"]
    assert listed.startswith("ResponseTooLargeError cannot read gs://bkt/ ") and f"{CLAIM:,} bytes" in listed
    assert int(lines["peak"]) < 16 << 20  # nothing near the claim was ever allocated


@pytest.fixture
def small_max_body(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("SHARDSTREAM_MAX_BODY", "64K")
    return 64 << 10


@pytest.mark.parametrize("name", ["chunked", "close"])
def test_a_body_without_length_is_read_up_to_max_body_and_refused_past_it(
    liar: str, small_max_body: int, name: str
) -> None:
    source = GCSSource(endpoint_url=liar, token="anon")
    try:
        sink = bytearray()
        with pytest.raises(ResponseTooLargeError) as caught:
            source.get_into(f"gs://bkt/{name}", sink)
        assert len(sink) <= small_max_body  # read up to the bound, never grown past it
        error = caught.value
        assert error.limit == small_max_body and error.size > small_max_body
        message = str(error)
        assert f"gs://bkt/{name}" in message and f"{small_max_body:,}" in message and "max_body=" in message
        # The small answer on the same source is still read (the bound is per answer).
        sink = bytearray()
        source.get_into("gs://bkt/small", sink)
        assert sink == b"hello"
    finally:
        source.close()


@pytest.mark.parametrize("name", ["chunked", "close"])
def test_a_streamed_manifest_or_index_is_bounded_by_max_body(
    liar: str, small_max_body: int, name: str
) -> None:
    """``read_url`` (manifests, ``_info.json``, sidecars) over the streamed ``http(s)://`` client;
    the URL in the message is redacted."""
    url = f"{liar.replace('http://', 'http://bob:hunter2@')}/{name}?sig=s3cr3t"
    with pytest.raises(ResponseTooLargeError) as caught:
        read_url(url)
    message = str(caught.value)
    assert "http://***@127.0.0.1" in message and f"/{name}?sig=***" in message
    assert "hunter2" not in message and "s3cr3t" not in message
    assert f"more than max_body ({small_max_body:,} bytes" in message


def test_a_storage_option_sets_max_body(liar: str) -> None:
    source = HTTPSource(max_body="16K")
    try:
        assert source.max_body == 16 << 10
        with pytest.raises(ResponseTooLargeError, match="more than max_body"):
            read_url(f"{liar}/close", storage_options={"max_body": "16K"})
        assert read_url(f"{liar}/small", storage_options={"max_body": "16K"}) == b"hello"
    finally:
        source.close()
    with pytest.raises(ConfigurationError, match="max_body"):
        HTTPSource(max_body=0)


def test_the_environment_sets_max_body() -> None:
    assert read_settings({}).max_body == 1 << 30
    assert read_settings({"SHARDSTREAM_MAX_BODY": "2G"}).max_body == 2 << 30
    for bad in ("lots", "-1", "0"):
        with pytest.raises(ConfigurationError, match="SHARDSTREAM_MAX_BODY"):
            read_settings({"SHARDSTREAM_MAX_BODY": bad})


def test_the_expected_size_bounds_an_object_and_a_range(liar: str) -> None:
    """A manifest's size (``size=``) and a range's length bound the answer, below max_body."""
    source = GCSSource(endpoint_url=liar, token="anon")
    try:
        with pytest.raises(ResponseTooLargeError) as caught:
            source.get_into("gs://bkt/sized", bytearray(), size=1000)  # the manifest said 1000
        assert "2,000 bytes" in str(caught.value) and "1,000 bytes expected" in str(caught.value)
        with pytest.raises(ResponseTooLargeError, match="100 bytes expected"):
            source.get_into("gs://bkt/sized", bytearray(), offset=0, length=100)
        gets = source.get_many(window=2)
        try:
            assert gets.submit("a", "gs://bkt/sized", 0, None, 1000) is None
            assert gets.submit("b", "gs://bkt/sized", 0, 100) is None
            outcomes = []
            while len(outcomes) < 2:
                outcomes += gets.wait()
            for outcome in outcomes:
                assert outcome.kind == "failed" and isinstance(outcome.error, ResponseTooLargeError)
        finally:
            gets.close()
        sink = bytearray()
        source.get_into("gs://bkt/sized", sink, size=2000)  # as expected: read
        assert len(sink) == 2000
    finally:
        source.close()


def test_the_default_get_into_is_bounded_by_the_expected_size(liar: str) -> None:
    """Sources without a whole-body client (``http(s)://``) read through their stream, bounded."""
    source = HTTPSource()
    try:
        with pytest.raises(ResponseTooLargeError, match="1,000 bytes expected"):
            source.get_into(f"{liar}/sized", bytearray(), size=1000)
        sink = bytearray()
        source.get_into(f"{liar}/small", sink, size=5)
        assert sink == b"hello"
    finally:
        source.close()
