"""Hostile networks against the http(s):// and s3:// sources: connection resets every 300 KB,
redirects (and credentials that must not follow them), signed URLs in errors and logs, and a
server that accepts connections but never answers."""

from __future__ import annotations

import base64
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import Cut, FaultProxy, HTTPFileServer, Reset, SeaweedS3, SilentServer, Stall

from shardstream.errors import ShardNotFoundError, SourceError, TransientSourceError
from shardstream.sources import SchemeRouter, open_url
from shardstream.tar.samples import TarFormat
from shardstream.tar.writer import TarWriter

ProxyFactory = Callable[[str], FaultProxy]
RESET_EVERY = 300_000
BASIC = "Basic " + base64.b64encode(b"alice:pw-secret").decode()  # from http://alice:pw-secret@...


def _sample(shard: int, i: int) -> dict[str, Any]:
    return {"__key__": f"s{shard}-{i:04d}", "txt": f"sample {shard} {i}", "bin": os.urandom(20_000 + i * 37)}


def _write_shards(directory: Path, shards: int = 2, per_shard: int = 60) -> list[list[dict[str, Any]]]:
    """Shards of about 1.3 MB each: larger than one 1 MiB read, so resets fall inside reads."""
    written = []
    for shard in range(shards):
        samples = [_sample(shard, i) for i in range(per_shard)]
        directory.mkdir(parents=True, exist_ok=True)
        with TarWriter(str(directory / f"shard-{shard}.tar")) as sink:
            for sample in samples:
                sink.write(sample)
        written.append(samples)
    return written


def _read(urls: list[str], options: dict[str, Any]) -> Iterator[tuple[str, bytes, bytes]]:
    fmt, source = TarFormat(), SchemeRouter(options)
    for url in urls:
        for sample in fmt.samples(source, url):
            yield sample["__key__"], bytes(sample["txt"]), bytes(sample["bin"])


def _expected(written: list[list[dict[str, Any]]]) -> list[tuple[str, bytes, bytes]]:
    return [(s["__key__"], s["txt"].encode(), s["bin"]) for shard in written for s in shard]


def _read_bytes(stream: Any, chunk: int = 1 << 20) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    while n := stream.readinto(buf):
        out += buf[:n]
    return bytes(out)


# -- item 5: a reset every 300 KB keeps every byte received ---------------------------------------


def test_http_reset_every_300kb_keeps_every_byte(
    http_server: HTTPFileServer, fault_proxy: ProxyFactory
) -> None:
    data = os.urandom(3_000_000)
    http_server.write("resets/blob.bin", data)
    proxy = fault_proxy(http_server.url)
    proxy.every(Reset(RESET_EVERY))
    with open_url(f"{proxy.url}/resets/blob.bin") as stream:  # default retry settings
        got = _read_bytes(stream)
        retries = stream.retries  # type: ignore[attr-defined]
    # With reads of 1 MiB, a reset every 300 KB used to discard each read whole: the stream never
    # advanced and gave up after 8 attempts. Now each connection delivers what arrived before its
    # reset (the kernel drops only what was still unread when the RST came).
    assert got == data
    assert retries >= len(data) // RESET_EVERY - 1
    assert proxy.gets("resets/blob.bin") == retries + 1


def test_http_samples_survive_resets_every_300kb(
    http_server: HTTPFileServer, fault_proxy: ProxyFactory
) -> None:
    written = _write_shards(http_server.root / "reset-samples")
    proxy = fault_proxy(http_server.url)
    proxy.every(Reset(RESET_EVERY))
    urls = [f"{proxy.url}/reset-samples/shard-{i}.tar" for i in range(len(written))]
    assert list(_read(urls, {})) == _expected(written)  # exact sequence: nothing lost or repeated
    assert proxy.connections > 2 * len(written)


@pytest.mark.s3
def test_s3_samples_survive_resets_every_300kb(
    s3_server: SeaweedS3, s3_bucket: str, fault_proxy: ProxyFactory, tmp_path: Path
) -> None:
    written = _write_shards(tmp_path / "shards")
    urls = [
        s3_server.upload_file(tmp_path / "shards" / f"shard-{i}.tar", s3_bucket, f"r/shard-{i}.tar")
        for i in range(len(written))
    ]
    proxy = fault_proxy(s3_server.endpoint_url)
    proxy.every(Reset(RESET_EVERY))
    options = s3_server.options_for(endpoint_url=proxy.url)
    assert list(_read(urls, options)) == _expected(written)
    assert proxy.connections > 2 * len(written)


# -- item 6: redirects -----------------------------------------------------------------------------


@pytest.fixture
def other_server(tmp_path: Path) -> Iterator[HTTPFileServer]:
    """A second loopback server: another origin (same host, another port)."""
    server = HTTPFileServer(tmp_path / "other-root").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_followed_with_range(http_server: HTTPFileServer, status: int) -> None:
    data = os.urandom(200_000)
    http_server.write(f"redir/{status}/target.tar", data)
    http_server.redirect(f"redir/{status}/link.tar", status, f"/redir/{status}/target.tar")
    url = http_server.url_for(f"redir/{status}/link.tar")
    with open_url(url) as stream:
        assert stream.read() == data
    with open_url(url, offset=1000, length=5000) as stream:
        assert stream.read() == data[1000:6000]
    assert http_server.range_headers(f"redir/{status}/target.tar")[-1] == "bytes=1000-5999"


def test_credentials_stay_on_their_origin(http_server: HTTPFileServer, other_server: HTTPFileServer) -> None:
    data = os.urandom(50_000)
    target = http_server.write("cdn/shard.tar", data)
    other_server.redirect("hub/shard.tar", 302, target)  # a hub redirecting to a CDN
    other_server.redirect("hub/same.tar", 307, "/hub/final.tar")  # stays on the hub
    other_server.write("hub/final.tar", data)
    hub = other_server.url.replace("http://", "http://alice:pw-secret@")
    options = {"headers": {"Authorization": "Bearer tok-secret", "X-Api-Key": "key-secret"}}
    with open_url(f"{hub}/hub/shard.tar", storage_options=options) as stream:
        assert stream.read() == data
    sent_to_hub = other_server.request_headers("hub/shard.tar")[-1]
    sent_to_cdn = http_server.request_headers("cdn/shard.tar")[-1]
    assert sent_to_hub["Authorization"] == BASIC and sent_to_hub["X-Api-Key"] == "key-secret"
    assert "Authorization" not in sent_to_cdn and "X-Api-Key" not in sent_to_cdn
    assert not any("secret" in value for value in sent_to_cdn.values())
    # A redirect within the origin keeps the credentials.
    with open_url(f"{hub}/hub/same.tar", storage_options=options) as stream:
        assert stream.read() == data
    assert other_server.request_headers("hub/final.tar")[-1]["Authorization"] == BASIC
    # Without user info in the URL, the headers= Authorization goes to the hub and no further.
    with open_url(other_server.url_for("hub/shard.tar"), storage_options=options) as stream:
        assert stream.read() == data
    assert other_server.request_headers("hub/shard.tar")[-1]["Authorization"] == "Bearer tok-secret"
    assert "Authorization" not in http_server.request_headers("cdn/shard.tar")[-1]
    # Hub -> CDN -> hub: once dropped, credentials stay dropped for the rest of the chain.
    other_server.redirect("hub/bounce.tar", 302, http_server.url_for("cdn/bounce.tar"))
    http_server.redirect("cdn/bounce.tar", 302, other_server.url_for("hub/final.tar"))
    with open_url(other_server.url_for("hub/bounce.tar"), storage_options=options) as stream:
        assert stream.read() == data
    assert "Authorization" not in other_server.request_headers("hub/final.tar")[-1]


def test_resume_after_redirect_starts_at_the_original_url(
    http_server: HTTPFileServer, other_server: HTTPFileServer, fault_proxy: ProxyFactory
) -> None:
    data = os.urandom(600_000)
    http_server.write("cdn/cut.tar", data)
    proxy = fault_proxy(http_server.url)
    proxy.plan(Cut(100_000), Reset(250_000))
    other_server.redirect("hub/cut.tar", 302, f"{proxy.url}/cdn/cut.tar")
    with open_url(other_server.url_for("hub/cut.tar")) as stream:
        assert _read_bytes(stream, 65536) == data
        retries = stream.retries  # type: ignore[attr-defined]
    assert retries == 2 and other_server.gets("hub/cut.tar") == 3
    ranges = http_server.range_headers("cdn/cut.tar")
    assert ranges[0] is None and all(r is not None and r.startswith("bytes=") for r in ranges[1:])


def test_redirect_loop_and_limits(http_server: HTTPFileServer) -> None:
    http_server.redirect("loop/a.tar", 302, "/loop/b.tar")
    http_server.redirect("loop/b.tar", 302, "/loop/a.tar")
    with pytest.raises(SourceError, match="max_redirects=10"):
        open_url(http_server.url_for("loop/a.tar"))
    http_server.write("loop/t.tar", b"x")
    http_server.redirect("loop/one.tar", 307, "/loop/t.tar")
    with pytest.raises(SourceError, match="HTTP 307"):
        open_url(http_server.url_for("loop/one.tar"), storage_options={"max_redirects": 0})
    http_server.redirect("loop/ftp.tar", 302, "ftp://example.invalid/t.tar")
    with pytest.raises(SourceError, match="not an http"):
        open_url(http_server.url_for("loop/ftp.tar"))


# -- item 7: signed URLs never appear in errors or logs --------------------------------------------


SIGNED_QUERIES = {
    "s3": "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIASECRET1%2F2024&"
    "X-Amz-Security-Token=SECRET2&X-Amz-Signature=SECRET3",
    "gcs": "X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=svc%40SECRET1&X-Goog-Signature=SECRET2",
    "gcs-v2": "GoogleAccessId=svc@SECRET1&Expires=1700000000&Signature=SECRET2",
    "azure": "sv=2022-11-02&se=2030-01-01&sp=r&sig=SECRET1",
    "token": "access_token=SECRET1&API_KEY=SECRET2&Token=SECRET3",
}


@pytest.mark.parametrize("kind", sorted(SIGNED_QUERIES))
def test_signed_url_secrets_stay_out_of_errors_and_logs(
    http_server: HTTPFileServer, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    http_server.write(f"signed/{kind}.tar", b"x" * 100)
    http_server.fail(f"signed/{kind}.tar", 503, times=1)  # one retry: a WARNING naming the URL
    url = http_server.url_for(f"signed/{kind}.tar") + "?" + SIGNED_QUERIES[kind]
    missing = http_server.url_for(f"signed/{kind}-missing.tar") + "?" + SIGNED_QUERIES[kind]
    with caplog.at_level(logging.DEBUG, logger="shardstream"):
        with open_url(url, storage_options={"retries": 3}) as stream:
            assert stream.read() == b"x" * 100
        with pytest.raises(ShardNotFoundError) as info:
            open_url(missing)
    text = caplog.text + str(info.value) + repr(info.value) + str(info.value.url)
    assert "SECRET" not in text
    assert "***" in str(info.value) and "retry 1/" in caplog.text


# -- item 11: a server that never answers fails fast; a transfer making progress does not ----------


def test_silent_server_fails_within_first_byte_deadline() -> None:
    options = {"response_timeout": 0.2, "first_byte_deadline": 1.0, "retries": 100, "retry_deadline": 300}
    with SilentServer() as silent:
        started = time.monotonic()
        with pytest.raises(TransientSourceError) as info:
            open_url(f"{silent.url}/shard.tar", storage_options=options)
        elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 6.0, elapsed  # (the retry budget would allow 300 s: generous for load)
    assert silent.connections >= 3  # it retried within the budget, not just once
    assert "first_byte_deadline=1s" in str(info.value) and "timed out" in str(info.value)


@pytest.mark.s3
def test_silent_s3_endpoint_fails_within_first_byte_deadline(s3_server: SeaweedS3) -> None:
    with SilentServer() as silent:
        options = s3_server.options_for(
            endpoint_url=silent.url, response_timeout=0.2, first_byte_deadline=1.0, retries=100
        )
        started = time.monotonic()
        with pytest.raises(TransientSourceError, match="first_byte_deadline"):
            open_url("s3://bucket/shard.tar", storage_options=options)
        assert time.monotonic() - started < 6.0  # (retry budget: 300 s; generous for load)


def test_transfer_making_progress_keeps_long_retries(
    http_server: HTTPFileServer, fault_proxy: ProxyFactory
) -> None:
    data = os.urandom(1_000_000)
    http_server.write("progress/a.tar", data)
    proxy = fault_proxy(http_server.url)
    # Four stalls after the first bytes: 4 x read_timeout alone exceeds first_byte_deadline.
    proxy.plan(*(Stall(after=50_000 + 100_000 * i, seconds=5.0) for i in range(4)))
    options = {"read_timeout": 0.4, "response_timeout": 0.4, "first_byte_deadline": 1.0, "retries": 10}
    started = time.monotonic()
    with open_url(f"{proxy.url}/progress/a.tar", storage_options=options) as stream:
        assert _read_bytes(stream) == data
        assert stream.retries == 4  # type: ignore[attr-defined]
    assert time.monotonic() - started > 1.6  # well past first_byte_deadline, and it still finished
