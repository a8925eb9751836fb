"""End-to-end tests of the http(s):// source against a loopback server and a fault-injecting proxy."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import pytest
from _servers import Cut, FaultProxy, HTTPFileServer, Stall, free_port

from shardstream.errors import AccessDeniedError, ShardNotFoundError, TransientSourceError
from shardstream.sources import open_url, stat_url
from shardstream.sources._resume import ObjectChangedError

ProxyFactory = Callable[[str], FaultProxy]
FAST = {"retries": 20, "retry_deadline": 30.0}


def _data(n: int, seed: int = 0) -> bytes:
    return os.urandom(n) if seed == 0 else bytes((i * seed) % 251 for i in range(n))


def _read_all(stream: object, chunk: int = 65536) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    while n := stream.readinto(buf):  # type: ignore[attr-defined]
        out += buf[:n]
    return bytes(out)


def _header_len(server: HTTPFileServer, path: str) -> int:
    """Bytes of status line and headers before the body of a plain GET of ``path``."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port)
    conn.request("GET", "/" + path, headers={"Accept-Encoding": "identity"})
    resp = conn.getresponse()
    head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in resp.getheaders()) + "\r\n"
    resp.read()
    conn.close()
    return len(head.encode("latin-1"))


def test_read_range_stat(http_server: HTTPFileServer) -> None:
    data = _data(300_000)
    url = http_server.write("e2e/shard-000.tar", data)
    with open_url(url) as stream:
        assert stream.read() == data
    with open_url(url, offset=123_457) as stream:
        assert stream.read(10) == data[123_457:123_467]
        assert _read_all(stream) == data[123_467:]
    info = stat_url(url)
    assert info.size == len(data) and info.etag
    assert http_server.gets("e2e/shard-000.tar") == 2


def test_open_logs_one_info_line(http_server: HTTPFileServer, caplog: pytest.LogCaptureFixture) -> None:
    url = http_server.write("e2e/logged.tar", b"x" * 1000)
    with caplog.at_level(logging.INFO, logger="shardstream"), open_url(url) as stream:
        stream.read()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("shardstream")]
    assert lines == [f"open {url} offset=0 size=1000"]


@pytest.mark.parametrize("chunk", [1, 4096, 1 << 20])
def test_resume_after_cuts_at_many_offsets(
    http_server: HTTPFileServer, fault_proxy: ProxyFactory, chunk: int
) -> None:
    size = 200_000 if chunk > 1 else 20_000
    data = _data(size, seed=7)
    path = f"cuts/shard-{chunk}.tar"
    http_server.write(path, data)
    proxy = fault_proxy(http_server.url)
    head = _header_len(http_server, path)
    # Cuts inside the headers, at the first body byte, at many body offsets, and one byte short of the end.
    cuts = [5, head - 1, head, head + 1, head + 999, head + 4096, head + size // 3, head + size - 1]
    proxy.plan(*(Cut(c) for c in cuts))
    with open_url(f"{proxy.url}/{path}", storage_options=FAST) as stream:
        got = _read_all(stream, chunk)
        retries = stream.retries  # type: ignore[attr-defined]
    assert got == data
    # Every cut that fell inside a response cost one retry (a resumed response is shorter than the
    # first, so the last planned cut may land past its end) and one more GET, nothing else.
    assert len(cuts) - 1 <= retries <= len(cuts)
    assert proxy.gets(path) == retries + 1


def test_resume_is_exact_with_odd_read_sizes(http_server: HTTPFileServer, fault_proxy: ProxyFactory) -> None:
    data = _data(150_000, seed=3)
    http_server.write("cuts/odd.tar", data)
    proxy = fault_proxy(http_server.url)
    proxy.plan(*(Cut(300 + 7919 * i) for i in range(1, 12)))
    out = bytearray()
    with open_url(f"{proxy.url}/cuts/odd.tar", storage_options=FAST) as stream:
        sizes = [1, 7, 4096, 333, 65536, 17]
        i = 0
        while block := stream.read(sizes[i % len(sizes)]):
            out += block
            i += 1
    assert bytes(out) == data


def test_stall_times_out_and_resumes(
    http_server: HTTPFileServer, fault_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    data = _data(100_000)
    http_server.write("stall/a.tar", data)
    proxy = fault_proxy(http_server.url)
    proxy.plan(Stall(after=5_000, seconds=12.0))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        with open_url(f"{proxy.url}/stall/a.tar", storage_options={**FAST, "read_timeout": 0.5}) as stream:
            assert stream.read() == data
    assert time.monotonic() - started < 9.0  # not the 12 s stall (generous for a loaded machine)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "timed out" in warnings[0].getMessage()


def test_server_errors_are_retried(http_server: HTTPFileServer) -> None:
    data = _data(10_000)
    url = http_server.write("flaky/a.tar", data)
    http_server.fail("flaky/a.tar", 503, times=2)
    with open_url(url, storage_options=FAST) as stream:
        assert stream.read() == data


def test_persistent_server_error_gives_up_with_message(http_server: HTTPFileServer) -> None:
    url = http_server.write("flaky/b.tar", b"x")
    http_server.fail("flaky/b.tar", 500, times=100)
    with pytest.raises(TransientSourceError) as info:
        open_url(url, storage_options={"retries": 3})
    msg = str(info.value)
    assert url in msg and "HTTP 500" in msg and "giving up" in msg and "retries=" in msg
    assert info.value.status == 500


def test_404_fails_fast(http_server: HTTPFileServer) -> None:
    url = http_server.url_for("missing/shard-000.tar")
    with pytest.raises(ShardNotFoundError) as info:
        open_url(url)
    assert url in str(info.value) and "HTTP 404" in str(info.value) and "check the URL" in str(info.value)
    assert http_server.gets("missing/shard-000.tar") == 1  # not retried


def test_403_fails_fast_without_credentials_in_message(http_server: HTTPFileServer) -> None:
    http_server.write("private/a.tar", b"x")
    http_server.fail("private/a.tar", 403, times=1)
    url = http_server.url.replace("http://", "http://alice:s3cretpw@") + "/private/a.tar"
    with pytest.raises(AccessDeniedError) as info:
        open_url(url)
    msg = str(info.value)
    assert "s3cretpw" not in msg and "***@" in msg and "HTTP 403" in msg and "credentials" in msg


def test_unreachable_host_message() -> None:
    url = f"http://127.0.0.1:{free_port()}/shard.tar"
    with pytest.raises(TransientSourceError) as info:
        open_url(url, storage_options={"retries": 2, "connect_timeout": 1.0})
    msg = str(info.value)
    assert url in msg and "connection refused" in msg and "server is running" in msg


def test_object_changed_while_reading(http_server: HTTPFileServer, fault_proxy: ProxyFactory) -> None:
    http_server.write("change/a.tar", _data(100_000, seed=5))
    proxy = fault_proxy(http_server.url)
    proxy.plan(Cut(20_000))
    with open_url(f"{proxy.url}/change/a.tar", storage_options=FAST) as stream:
        stream.read(1000)
        http_server.write("change/a.tar", _data(100_000, seed=11))  # replaced mid-read
        with pytest.raises(ObjectChangedError, match="changed while it was being read"):
            stream.read()


def test_close_releases_connection_at_once(http_server: HTTPFileServer, fault_proxy: ProxyFactory) -> None:
    http_server.write("close/a.tar", _data(2_000_000))
    proxy = fault_proxy(http_server.url)
    stream = open_url(f"{proxy.url}/close/a.tar")
    stream.read(10)
    assert proxy.open_connections == 1
    stream.close()
    deadline = time.monotonic() + 2
    while proxy.open_connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.open_connections == 0


def test_connection_is_reused_after_full_read(http_server: HTTPFileServer, fault_proxy: ProxyFactory) -> None:
    for i in range(3):
        http_server.write(f"reuse/{i}.tar", _data(5000))
    proxy = fault_proxy(http_server.url)
    for i in range(3):
        with open_url(f"{proxy.url}/reuse/{i}.tar") as stream:
            stream.read()
    assert proxy.connections == 1


def test_ranged_read_sends_a_bounded_range_and_resumes_within_it(
    http_server: HTTPFileServer, fault_proxy: ProxyFactory
) -> None:
    data = _data(200_000, seed=13)
    path = "range/a.tar"
    http_server.write(path, data)
    proxy = fault_proxy(http_server.url)
    proxy.plan(Cut(3_000), Cut(20_000), Cut(50_000))  # three cuts inside the range's responses
    offset, length = 10_000, 100_000
    with open_url(f"{proxy.url}/{path}", offset=offset, length=length, storage_options=FAST) as stream:
        got = _read_all(stream, 7919)
        retries = stream.retries  # type: ignore[attr-defined]
    assert got == data[offset : offset + length]
    headers = http_server.range_headers(path)
    assert retries == 3 and len(headers) == 4
    assert headers[0] == "bytes=10000-109999"
    starts = [int(h[len("bytes=") :].split("-")[0]) for h in headers if h]
    assert all(h is not None and h.endswith("-109999") for h in headers)  # never past the range
    assert starts == sorted(starts) and len(set(starts)) == 4


def test_range_at_or_past_the_end_is_empty(http_server: HTTPFileServer) -> None:
    url = http_server.write("range/end.tar", b"x" * 1000)
    for offset in (1000, 5000):
        with open_url(url, offset=offset) as stream:
            assert stream.read() == b""
        with open_url(url, offset=offset, length=10) as stream:
            assert stream.read() == b""
    with open_url(url, offset=990, length=100) as stream:
        assert stream.read() == b"x" * 10


def test_ranged_open_logs_the_length(http_server: HTTPFileServer, caplog: pytest.LogCaptureFixture) -> None:
    url = http_server.write("range/logged.tar", b"x" * 1000)
    with caplog.at_level(logging.INFO, logger="shardstream"), open_url(url, offset=5, length=10) as stream:
        assert stream.read() == b"x" * 10
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("shardstream")]
    assert lines == [f"open {url} offset=5 size=1000 length=10"]
