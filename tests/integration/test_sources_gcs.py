"""``gs://`` against fake-gcs-server (a real emulator on loopback): ranged reads, resume after
cuts, early stop, listing, resumable uploads, credentials and errors, and the datasets on top.

Faults are real sockets: :class:`FaultProxy` cuts connections, and :class:`Recorder` (below) is
an HTTP forwarder that records request headers, serves a token endpoint, and, for the upload
fault tests, answers a resumable upload's status query as GCS does (fake-gcs-server completes the
upload instead, its issue #1362) and loses one chunk's answer or request.
"""

from __future__ import annotations

import http.client
import http.server
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _components import require_module
from _servers import Cut, FaultProxy

import shardstream as ss
from shardstream.errors import (
    AccessDeniedError,
    ConfigurationError,
    ObjectChangedError,
    ShardNotFoundError,
    SourceError,
)
from shardstream.sources import get_source
from shardstream.sources.gcs import GCSSource
from shardstream.sources.many import OK, RETRY
from shardstream.testing.fakegcs import FakeGCS

ProxyFactory = Callable[[str], FaultProxy]
KIB = 1 << 10


@pytest.fixture
def bucket(gcs_server: FakeGCS, request: pytest.FixtureRequest) -> str:
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return gcs_server.create_bucket(f"t{time.monotonic_ns() % 10**9}-{stem}")


_made: list[GCSSource] = []


@pytest.fixture(autouse=True)
def _close_sources() -> Iterator[None]:
    """Every source a test builds is closed after it (its idle connections with it)."""
    yield
    while _made:
        _made.pop().close()


def _made_here(source: GCSSource) -> GCSSource:
    _made.append(source)
    return source


def _source(server: FakeGCS, endpoint: str | None = None, **options: Any) -> GCSSource:
    options = {**server.storage_options, "endpoint_url": endpoint or server.endpoint_url, **options}
    return _made_here(GCSSource(**options))


def _eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Recorder:
    """An HTTP/1.1 forwarder to ``upstream`` that records every request's method, path and
    headers. ``token``: it answers ``POST /token`` itself (an OAuth2 token endpoint).
    ``gcs_status``: it answers resumable upload status queries (``Content-Range: bytes */*``)
    from the bytes the emulator acknowledged, as GCS does. ``lose``: ``{n: "answer" | "request"}``
    for the n-th chunk PUT (1-based): forward it and drop the answer, or drop it unsent; either
    way the client's connection is closed without an answer. ``refused``: ``Authorization``
    values answered 401 (a revoked token); a list ``token`` hands out its tokens in turn."""

    def __init__(self, upstream: str, *, token: dict[str, Any] | list[dict[str, Any]] | None = None) -> None:
        self.upstream = upstream.split("://", 1)[1]
        self.token = token
        self.refused: set[str] = set()
        self.gcs_status = False
        self.lose: dict[int, str] = {}
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.held: dict[str, int] = {}
        self.chunks = 0
        self.lock = threading.Lock()
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                recorder.handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = handle_one

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def headers_of(self, method: str) -> list[dict[str, str]]:
        return [h for m, _, h in self.seen if m == method]

    def _reply(
        self, h: http.server.BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes
    ) -> None:
        h.send_response(status)
        for name, value in headers.items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in h.headers.items()}
        with self.lock:
            self.seen.append((h.command, h.path, headers))
        if self.token is not None and h.path == "/token":
            with self.lock:
                token = self.token.pop(0) if isinstance(self.token, list) else self.token
            return self._reply(h, 200, {"Content-Type": "application/json"}, json.dumps(token).encode())
        if headers.get("Authorization") in self.refused:
            error = {"error": {"code": 401, "message": "Invalid Credentials"}}
            return self._reply(h, 401, {"Content-Type": "application/json"}, json.dumps(error).encode())
        upload_id = h.path.rpartition("upload_id=")[2] if "upload_id=" in h.path else ""
        spec = headers.get("Content-Range", "")
        if self.gcs_status and h.command == "PUT" and spec == "bytes */*":
            held = self.held.get(upload_id, 0)
            return self._reply(h, 308, {"Range": f"bytes=0-{held - 1}"} if held else {}, b"")
        fate = ""
        if h.command == "PUT" and upload_id and body:
            with self.lock:
                self.chunks += 1
                fate = self.lose.pop(self.chunks, "")
        if fate == "request":
            h.close_connection = True
            return
        conn = http.client.HTTPConnection(self.upstream, timeout=30)
        try:
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        answer = {
            k: v for k, v in resp.getheaders() if k.lower() not in ("content-length", "transfer-encoding")
        }
        if resp.status == 308 and upload_id and spec.startswith("bytes ") and not spec.startswith("bytes */"):
            self.held[upload_id] = int(spec[6:].split("/")[0].split("-")[1]) + 1
        if fate == "answer":
            h.close_connection = True
            return
        self._reply(h, resp.status, answer, data)


# -- reading -----------------------------------------------------------------------------------------


def test_ranged_reads_stat_and_odd_keys(gcs_server: FakeGCS, bucket: str) -> None:
    data = os.urandom(1_000_003)
    keys = ["plain.bin", "dir/sub dir/x?y=1#frag%20é日本.bin", "a+b&c=d;e@f"]
    source = _source(gcs_server)
    for key in keys:
        url = gcs_server.put_object(bucket, key, data)
        assert url == f"gs://{bucket}/{key}"
        info = source.stat(url)
        assert info.size == len(data) and info.etag and info.etag.isdigit()  # the generation
        for offset, length in ((0, None), (0, 1), (999_000, None), (123_456, 500_000), (len(data), 5)):
            with source.open(url, offset=offset, length=length) as stream:
                end = len(data) if length is None else offset + length
                assert stream.read() == data[offset:end]
                if offset < len(data):  # (a 416 answer past the end carries no generation)
                    assert stream.etag == info.etag  # type: ignore[attr-defined]
    gcs_url = f"gcs://{bucket}/{keys[1]}"  # the gcs:// spelling reaches the same object
    with get_source(gcs_url, gcs_server.storage_options).open(gcs_url, offset=10, length=10) as stream:
        assert stream.read() == data[10:20]
    with pytest.raises(ShardNotFoundError, match=f"gs://{bucket}/nope.bin"):
        source.open(f"gs://{bucket}/nope.bin")


def test_cut_mid_body_resumes_at_the_byte_offset(
    gcs_server: FakeGCS, bucket: str, fault_proxy: ProxyFactory
) -> None:
    data = os.urandom(1_500_000)
    url = gcs_server.put_object(bucket, "cuts/shard.tar", data)
    proxy = fault_proxy(gcs_server.endpoint_url)
    cuts = [3, 700, 5000, 65_536, 300_000, 700_001]
    proxy.plan(*(Cut(c) for c in cuts))
    source = _source(gcs_server, proxy.url, retries=20)
    with source.open(url) as stream:
        got = bytearray()
        while block := stream.read(100_003):
            got += block
        retries = stream.retries  # type: ignore[attr-defined]
    assert got == data
    assert len(cuts) - 2 <= retries <= len(cuts)
    path = f"download/storage/v1/b/{bucket}/o/cuts%2Fshard.tar"
    assert proxy.gets(path) == retries + 1
    # Each resume asked for the rest only: the bytes through the proxy are the object once plus
    # the cut-off heads and answers' headers (a restart from 0 would add ~100 KB to 1.4 MB each).
    assert proxy.response_bytes < len(data) + (retries + 1) * 2000


def test_a_replaced_object_is_not_resumed(
    gcs_server: FakeGCS, bucket: str, fault_proxy: ProxyFactory
) -> None:
    """fake-gcs-server ignores ifGenerationMatch on downloads: the generation of the resumed
    answer is compared with the first one's."""
    data = os.urandom(800_000)
    url = gcs_server.put_object(bucket, "replaced.bin", data)
    proxy = fault_proxy(gcs_server.endpoint_url)
    proxy.plan(Cut(300_000))
    source = _source(gcs_server, proxy.url, retries=5)
    with source.open(url) as stream:
        assert stream.read(100_000) == data[:100_000]
        gcs_server.put_object(bucket, "replaced.bin", os.urandom(800_000))
        with pytest.raises(ObjectChangedError, match="replaced.bin changed"):
            stream.read()
    with pytest.raises(ObjectChangedError):  # get_into pins the generation it is given
        source.get_into(url, bytearray(), etag=str(int(source.stat(url).etag or 0) - 1))


def test_early_stop_releases_the_connection(
    gcs_server: FakeGCS, bucket: str, fault_proxy: ProxyFactory
) -> None:
    # Large enough that the socket buffers on both sides of the proxy (a few MB each on
    # loopback) cannot hold half of it: 8 MB passed 4.1 MB through before the close in one run.
    data = os.urandom(32_000_000)
    url = gcs_server.put_object(bucket, "big.bin", data)
    proxy = fault_proxy(gcs_server.endpoint_url)
    source = _source(gcs_server, proxy.url)
    stream = source.open(url)
    assert stream.read(1000) == data[:1000]
    stream.close()
    assert _eventually(lambda: proxy.open_connections == 0)
    assert proxy.response_bytes < len(data) // 2  # the rest was not drained


# -- listing -----------------------------------------------------------------------------------------


def test_listing_nested_keys_over_many_pages(
    gcs_server: FakeGCS, bucket: str, fault_proxy: ProxyFactory
) -> None:
    keys = ["a.txt", "b/c.txt", "b/d/e.txt", "b/d/f g?.txt", "z/1", "z/2", "z/3"]
    for i, key in enumerate(keys):
        gcs_server.put_object(bucket, f"root/{key}", b"x" * i)
    gcs_server.put_object(bucket, "rootless.txt", b"not under root/")
    proxy = fault_proxy(gcs_server.endpoint_url)
    source = _source(gcs_server, proxy.url, max_results=2)
    found = sorted(source.list_objects(f"gs://{bucket}/root/"), key=lambda item: item.key)
    assert [(item.key, item.size) for item in found] == sorted((k, i) for i, k in enumerate(keys))
    assert all(item.etag.isdigit() for item in found)
    assert proxy.gets(f"storage/v1/b/{bucket}/o") == 4  # 7 objects, 2 per page
    with pytest.raises(ShardNotFoundError, match="bucket 'no-such-bucket' does not exist"):
        list(source.list_objects("gs://no-such-bucket/x/"))


# -- writing -----------------------------------------------------------------------------------------


def test_multi_chunk_upload_round_trip(gcs_server: FakeGCS, bucket: str, fault_proxy: ProxyFactory) -> None:
    data = os.urandom(1_300_000)
    proxy = fault_proxy(gcs_server.endpoint_url)
    source = _source(gcs_server, proxy.url, chunk_size=256 * KIB)
    url = f"gs://{bucket}/up/one.bin"
    with source.create(url) as out:
        for at in range(0, len(data), 99_999):
            out.write(data[at : at + 99_999])
        assert not gcs_server.exists(bucket, "up/one.bin")  # four chunks sent, nothing published
    assert gcs_server.get_object(bucket, "up/one.bin") == data
    assert proxy.requests[("PUT", f"/upload/storage/v1/b/{bucket}/o")] == 5  # 4 x 256 KiB + the rest
    with source.create(f"gs://{bucket}/up/small") as out:  # under one chunk: one request
        out.write(b"small")
    assert gcs_server.get_object(bucket, "up/small") == b"small"


def test_abort_and_exceptions_publish_nothing(gcs_server: FakeGCS, bucket: str) -> None:
    source = _source(gcs_server, chunk_size=256 * KIB)
    out = source.create(f"gs://{bucket}/gone/aborted")
    out.write(os.urandom(600_000))  # two chunks sent: the session holds them
    out.abort()  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="boom"):
        with source.create(f"gs://{bucket}/gone/raised") as out:
            out.write(os.urandom(600_000))
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        with source.create(f"gs://{bucket}/gone/small") as out:
            out.write(b"tiny")
            raise RuntimeError("boom")
    for key in ("aborted", "raised", "small"):
        assert not gcs_server.exists(bucket, f"gone/{key}")
    assert list(source.list_objects(f"gs://{bucket}/gone/")) == []


@pytest.mark.parametrize("lost", ["answer", "request"])
def test_a_cut_chunk_upload_resumes_from_the_committed_offset(
    gcs_server: FakeGCS, bucket: str, lost: str
) -> None:
    """The third chunk's answer (or the chunk itself) is lost with its connection: the writer asks
    the session how much it holds and goes on from there; a resend of a held chunk would be
    appended twice (the emulator credits whatever it is sent), a skipped one would be missing."""
    data = os.urandom(1_300_000)
    with Recorder(gcs_server.endpoint_url) as shim:
        shim.gcs_status = True
        shim.lose = {3: lost}
        source = _source(gcs_server, shim.url, chunk_size=256 * KIB, retries=5)
        with source.create(f"gs://{bucket}/cut/obj.bin") as out:
            out.write(data)
    assert gcs_server.get_object(bucket, "cut/obj.bin") == data
    assert out.queries == 1  # type: ignore[attr-defined]
    ranges = [h["Content-Range"] for h in shim.headers_of("PUT")]
    resent = "bytes 524288-786431/*"
    assert ranges.count(resent) == (2 if lost == "request" else 1)
    assert ranges.count("bytes */*") == 1


def test_an_emulator_that_completes_on_a_status_query_is_an_error(
    gcs_server: FakeGCS, bucket: str, fault_proxy: ProxyFactory
) -> None:
    """Without the shim, fake-gcs-server completes the upload when asked for its status: the
    writer says so instead of reporting a truncated object as written."""
    proxy = fault_proxy(gcs_server.endpoint_url)
    proxy.plan(None, None, Cut(10))  # the third connection: the second chunk's answer
    source = _source(gcs_server, proxy.url, chunk_size=256 * KIB, retries=3)
    with pytest.raises(SourceError, match="completed the upload with"):
        with source.create(f"gs://{bucket}/emu/obj.bin") as out:
            out.write(os.urandom(1_000_000))


def test_shard_writer_dataset_and_object_stream(gcs_server: FakeGCS, bucket: str) -> None:
    opts = {**gcs_server.storage_options, "chunk_size": 256 * KIB}
    pattern = f"gs://{bucket}/prefix/train-%06d.tar"
    with ss.ShardWriter(pattern, maxcount=4, storage_options=opts) as sink:
        for i in range(12):
            sink.write({"__key__": f"s{i:03d}", "txt": f"text {i}", "bin": os.urandom(100_000)})
    urls = [pattern % n for n in range(3)]
    assert all(gcs_server.exists(bucket, u.split("/", 3)[3]) for u in urls)
    ds = ss.ShardStream(urls, shuffle_shards=False, cache=None, storage_options=opts)
    assert [s["txt"] for s in ds] == [f"text {i}".encode() for i in range(12)]
    for i in range(5):
        gcs_server.put_object(bucket, f"objs/k{i}.txt", f"object {i}".encode())
        gcs_server.put_object(bucket, f"objs/k{i}.cls", str(i).encode())
    stream = ss.ObjectStream(f"gs://{bucket}/objs/", storage_options=opts, shuffle=False)
    got = {s["__key__"]: (s["txt"], s["cls"]) for s in stream}
    assert got == {f"k{i}": (f"object {i}".encode(), str(i).encode()) for i in range(5)}


# -- credentials -------------------------------------------------------------------------------------


def test_emulator_host_from_the_environment(
    gcs_server: FakeGCS, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = gcs_server.put_object(bucket, "env.bin", b"from the environment")
    for name, value in gcs_server.env.items():
        monkeypatch.setenv(name, value.removeprefix("http://"))  # host:port, as Google's clients take
    source = _made_here(GCSSource())
    assert source.auth.kind == "anonymous" and source.endpoint_url == gcs_server.endpoint_url
    with source.open(url) as stream:
        assert stream.read() == b"from the environment"


def test_access_token_is_sent_and_never_shown(gcs_server: FakeGCS, bucket: str) -> None:
    secret = "ya29.SECRET-token-value"
    url = gcs_server.put_object(bucket, "tok.bin", b"with a token")
    with Recorder(gcs_server.endpoint_url) as rec:
        source = _made_here(GCSSource(endpoint_url=rec.url, token=secret))
        with source.open(url) as stream:
            assert stream.read() == b"with a token"
        assert source.stat(url).size == 12
        sink = bytearray()
        source.get_into(url, sink)
        assert sink == b"with a token"
        with source.create(f"gs://{bucket}/tok-out.bin") as out:
            out.write(b"written")
        assert {h.get("Authorization") for *_, h in rec.seen} == {f"Bearer {secret}"}
        with pytest.raises(ShardNotFoundError) as info:
            source.open(f"gs://{bucket}/missing")
    assert secret not in repr(source) and secret not in str(info.value)
    assert "access token" in repr(source)


def test_service_account_key_file(gcs_server: FakeGCS, bucket: str, tmp_path: Path) -> None:
    """A key file loads through google-auth, which signs a JWT and exchanges it at the key's
    token_uri (here a loopback endpoint); the token it gets is what the emulator is sent."""
    rsa = require_module(
        "cryptography.hazmat.primitives.asymmetric.rsa", "service-account key signing (cryptography)"
    )
    serialization = require_module(
        "cryptography.hazmat.primitives.serialization", "service-account key signing (cryptography)"
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    url = gcs_server.put_object(bucket, "sa.bin", b"service account")
    with Recorder(gcs_server.endpoint_url, token={"access_token": "ya29.minted", "expires_in": 3600}) as rec:
        info = {
            "type": "service_account",
            "project_id": "test",
            "private_key_id": "k1",
            "private_key": pem,
            "client_email": "reader@test.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": f"{rec.url}/token",
        }
        path = tmp_path / "key.json"
        path.write_text(json.dumps(info))
        source = _made_here(GCSSource(endpoint_url=rec.url, token=str(path)))
        with source.open(url) as stream:
            assert stream.read() == b"service account"
        assert source.auth.kind == "service account reader@test.iam.gserviceaccount.com"
        token_requests = [h for m, p, h in rec.seen if p == "/token"]
        assert len(token_requests) == 1  # refreshed once, then reused until it nears expiry
        assert rec.headers_of("GET")[-1]["Authorization"] == "Bearer ya29.minted"
    # Google's real token endpoint is out of reach: the error says which credentials failed.
    info["token_uri"] = "http://127.0.0.1:9/token"
    path.write_text(json.dumps(info))
    source = _made_here(GCSSource(endpoint_url=gcs_server.endpoint_url, token=str(path), retries=1))
    with pytest.raises(SourceError) as error:
        source.open(url)
    text = str(error.value)
    assert "reader@test.iam.gserviceaccount.com" in text and "token request" in text
    assert "PRIVATE KEY" not in text and pem[40:80] not in text


def _pem() -> str:
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.mark.parametrize("form", ["JSON text", "dict", "dict without type"])
def test_key_text_and_dicts_as_gcsfs_takes_them(gcs_server: FakeGCS, bucket: str, form: str) -> None:
    """``token=`` as the key file's JSON text (handed over from an environment variable), a dict
    of it, or gcsfs's older dict without ``type``: each is loaded, gets its token from the key's
    token_uri, and reads; none of it shows in the ``repr``."""
    url = gcs_server.put_object(bucket, "forms.bin", b"from a key in memory")
    pem = _pem()
    with Recorder(gcs_server.endpoint_url, token={"access_token": "ya29.minted", "expires_in": 3600}) as rec:
        info: dict[str, Any] = {
            "type": "service_account",
            "private_key_id": "k1",
            "private_key": pem,
            "client_email": "reader@test.iam.gserviceaccount.com",
            "token_uri": f"{rec.url}/token",
        }
        if form == "dict without type":
            del info["type"]
        token: object = json.dumps(info) if form == "JSON text" else info
        source = _made_here(GCSSource(endpoint_url=rec.url, token=token))
        with source.open(url) as stream:
            assert stream.read() == b"from a key in memory"
        assert rec.headers_of("GET")[-1]["Authorization"] == "Bearer ya29.minted"
        assert len([p for _, p, _ in rec.seen if p == "/token"]) == 1
    assert source.auth.kind == "service account reader@test.iam.gserviceaccount.com"
    assert pem[40:80] not in repr(source) + repr(source.auth)


def test_an_authorized_user_dict_loads_without_showing_its_secrets() -> None:
    """What ``gcloud auth application-default login`` writes, as a dict: its refresh token is
    exchanged at Google's endpoint only (google-auth ignores a token_uri in such a key), so this
    test stops at loading it."""
    info = {
        "type": "authorized_user",
        "client_id": "c.apps.googleusercontent.com",
        "client_secret": "client-SECRET-value",
        "refresh_token": "refresh-SECRET-value",
    }
    source = _made_here(GCSSource(endpoint_url="http://127.0.0.1:9", token=info))
    source.auth.resolve()
    assert source.auth.renewable and source.auth.kind == "credentials dict"
    assert "SECRET" not in repr(source) + repr(source.auth)
    del info["refresh_token"]
    broken = _made_here(GCSSource(endpoint_url="http://127.0.0.1:9", token=info))
    with pytest.raises(ConfigurationError, match="credentials dict") as error:
        broken.auth.resolve()
    assert "client-SECRET" not in str(error.value) and "refresh_token" in str(error.value)


def test_a_credentials_object_is_used_as_given(gcs_server: FakeGCS, bucket: str) -> None:
    credentials = pytest.importorskip("google.oauth2.credentials")
    url = gcs_server.put_object(bucket, "object.bin", b"with a credentials object")
    with Recorder(gcs_server.endpoint_url) as rec:
        token = credentials.Credentials(token="ya29.from-an-object")
        source = _made_here(GCSSource(endpoint_url=rec.url, token=token))
        with source.open(url) as stream:
            assert stream.read() == b"with a credentials object"
        assert rec.headers_of("GET")[-1]["Authorization"] == "Bearer ya29.from-an-object"
    assert source.auth.kind == "Credentials object of type Credentials"
    assert "ya29" not in repr(source)


def test_a_missing_key_file_is_sent_as_a_token_and_said_so(
    gcs_server: FakeGCS, bucket: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As in gcsfs, a string that names no file is an access token; one that looks like a path
    says so (naming the file, never the directories, which may be part of a token)."""
    missing = str(tmp_path / "secret-dir" / "key.json")
    with Recorder(gcs_server.endpoint_url) as rec, caplog.at_level(logging.WARNING, logger="shardstream"):
        source = _made_here(GCSSource(endpoint_url=rec.url, token=missing))
        with pytest.raises(ShardNotFoundError) as info:
            source.open(f"gs://{bucket}/none.bin")
        assert rec.headers_of("GET")[-1]["Authorization"] == f"Bearer {missing}"
    assert "'key.json'" in source.auth.kind and source.auth.kind.startswith("access token")
    for text in (str(info.value), repr(source), caplog.text):
        assert "secret-dir" not in text and str(tmp_path) not in text
    assert "no file 'key.json' exists" in caplog.text


def test_a_revoked_token_is_refreshed_on_the_object_fetch_path(
    gcs_server: FakeGCS, bucket: str, tmp_path: Path
) -> None:
    """Many small objects go through ``get_many`` on one epoll loop. A 401 to a token that can
    be renewed is a RETRY there (not a final error): the retry's ``get_into`` (what the fetch
    loop does with a RETRY) refreshes the token once, and the session goes on with the new one."""
    rsa = require_module(
        "cryptography.hazmat.primitives.asymmetric.rsa", "service-account key signing (cryptography)"
    )
    serialization = require_module(
        "cryptography.hazmat.primitives.serialization", "service-account key signing (cryptography)"
    )
    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        .decode()
    )
    for i in range(6):
        gcs_server.put_object(bucket, f"revoked/k{i}.txt", f"object {i}".encode())
    tokens = [
        {"access_token": "ya29.old", "expires_in": 3600},
        {"access_token": "ya29.new", "expires_in": 3600},
    ]
    with Recorder(gcs_server.endpoint_url, token=tokens) as rec:
        info = {
            "type": "service_account",
            "private_key_id": "k1",
            "private_key": pem,
            "client_email": "reader@test.iam.gserviceaccount.com",
            "token_uri": f"{rec.url}/token",
        }
        (tmp_path / "key.json").write_text(json.dumps(info))
        source = _made_here(GCSSource(endpoint_url=rec.url, token=str(tmp_path / "key.json")))
        url = f"gs://{bucket}/revoked/k0.txt"
        gets = source.get_many(window=4)
        try:
            source.get_into(url, bytearray())  # the first token, accepted
            rec.refused.add("Bearer ya29.old")  # ... and now revoked
            assert gets.submit("k0", url) is None
            outcome = gets.wait()[0]
            assert outcome.kind == RETRY and "401" in str(outcome.error)
            sink = bytearray()  # what the fetch loop does with a RETRY
            source.get_into(url, sink)
            assert sink == b"object 0"
            for i in range(1, 6):  # the session goes on with the new token
                assert gets.submit(f"k{i}", f"gs://{bucket}/revoked/k{i}.txt") is None
            found: dict[str, bytes] = {}
            while len(found) < 5:
                found.update((o.token, o.body) for o in gets.wait() if o.kind == OK)
            assert found == {f"k{i}": f"object {i}".encode() for i in range(1, 6)}
        finally:
            gets.close()
        assert len([p for _, p, _ in rec.seen if p == "/token"]) == 2
        authorizations = [h.get("Authorization") for m, _, h in rec.seen if m == "GET"]
        assert authorizations.count("Bearer ya29.new") == 6
        assert "ya29" not in str(outcome.error)


def test_missing_google_auth_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.auth", None)
    source = _made_here(GCSSource(endpoint_url="http://127.0.0.1:9"))  # no token, no emulator: ADC
    with pytest.raises(ImportError, match=r"pip install 'shardstream\[gcs\]'"):
        source.open("gs://b/k")


def test_denied_access_names_the_credentials(gcs_server: FakeGCS, bucket: str) -> None:
    """fake-gcs-server accepts any credentials, so the refusal comes from a loopback server."""

    class Deny(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            body = json.dumps({"error": {"code": 403, "message": "caller lacks storage.objects.get"}})
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Deny)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        source = _made_here(
            GCSSource(endpoint_url=f"http://127.0.0.1:{httpd.server_address[1]}", token="anon")
        )
        with pytest.raises(AccessDeniedError) as info:
            source.open(f"gs://{bucket}/x.bin")
        text = str(info.value)
        assert f"gs://{bucket}/x.bin" in text and "anonymous" in text
        assert "storage.objects.get" in text and "token" in text
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_a_forked_child_uses_the_parents_source(gcs_server: FakeGCS, bucket: str) -> None:
    """``fork_safe``: the child's pools start empty (a shared socket would mix two processes'
    answers) and its reads are right; the parent's idle connection still works afterwards."""
    data = os.urandom(300_000)
    url = gcs_server.put_object(bucket, "fork.bin", data)
    source = _source(gcs_server)
    assert GCSSource.fork_safe
    with source.open(url) as stream:
        assert stream.read() == data  # read to the end: its connection is idle in the pool
    assert source.pool.idle.count() == 1
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if everything holds
        ok = source.pool.idle.count() == 0
        with source.open(url, offset=1000, length=5000) as stream:
            ok = ok and stream.read() == data[1000:6000]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with source.open(url) as stream:
        assert stream.read() == data
