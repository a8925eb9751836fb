"""Every third-party failure the network sources can see maps to the right shardstream error."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator

import pytest
from _components import require_module

from shardstream.errors import (
    AccessDeniedError,
    ResponseTooLargeError,
    ShardNotFoundError,
    SourceError,
    TransientSourceError,
)
from shardstream.net.proxy import ProxyError
from shardstream.net.whole import BodyTooLarge
from shardstream.sources._resume import ObjectChangedError
from shardstream.sources._status import network_error, status_error

URL = "http://bob:hunter2@example.test/shards/a.tar?X-Amz-Signature=abcdef&X-Amz-Credential=AKIDX"


def _clean(msg: str) -> None:
    assert "hunter2" not in msg and "abcdef" not in msg and "AKIDX" not in msg


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, ShardNotFoundError),
        (410, ShardNotFoundError),
        (401, AccessDeniedError),
        (403, AccessDeniedError),
        (407, AccessDeniedError),  # an HTTP proxy's answer to an absolute-form request
        (412, ObjectChangedError),
        (408, TransientSourceError),
        (429, TransientSourceError),
        (500, TransientSourceError),
        (502, TransientSourceError),
        (503, TransientSourceError),
        (504, TransientSourceError),
        (507, TransientSourceError),
        (416, SourceError),
        (400, SourceError),
    ],
)
def test_status_mapping(status: int, cls: type[SourceError]) -> None:
    err = status_error(status, URL)
    assert type(err) is cls and err.status == status
    msg = str(err)
    assert f"HTTP {status}" in msg and "http://***@example.test/shards/a.tar" in msg
    _clean(msg)


@pytest.mark.parametrize(
    ("exc", "cls", "text"),
    [
        (TimeoutError("timed out"), TransientSourceError, "timed out"),
        (TimeoutError(), TransientSourceError, "timed out"),
        (ConnectionRefusedError(111, "refused"), TransientSourceError, "connection refused"),
        (socket.gaierror(-2, "Name or service not known"), TransientSourceError, "does not resolve"),
        (ConnectionResetError(104, "reset"), TransientSourceError, "ConnectionResetError"),
        (BrokenPipeError(32, "broken"), TransientSourceError, "BrokenPipeError"),
        (http.client.IncompleteRead(b"abc", 10), TransientSourceError, "closed early"),
        (http.client.RemoteDisconnected("closed"), TransientSourceError, "RemoteDisconnected"),
        (http.client.BadStatusLine("HTTP/"), TransientSourceError, "BadStatusLine"),
        (ssl.SSLCertVerificationError(1, "bad cert"), SourceError, "verify="),
        (BodyTooLarge(10 << 30, 1 << 30, announced=True, expected=False), ResponseTooLargeError, "max_body="),
        (
            BodyTooLarge(2000, 1000, announced=False, expected=True),
            ResponseTooLargeError,
            "1,000 bytes expected",
        ),
        (ValueError("weird"), SourceError, "unexpected error"),
        (
            ProxyError("the proxy http://p:3128 (from ALL_PROXY) is down", transient=True),
            TransientSourceError,
            "(from ALL_PROXY) is down; it is retried",
        ),
        (
            ProxyError("ALL_PROXY names a SOCKS proxy: pip install 'shardstream[socks]'"),
            SourceError,
            "(endpoint http://example.test): ALL_PROXY names a SOCKS proxy",
        ),
    ],
)
def test_network_mapping(exc: BaseException, cls: type[SourceError], text: str) -> None:
    err = network_error(exc, URL, endpoint="http://example.test")
    assert type(err) is cls
    assert text in str(err)
    _clean(str(err))


@pytest.fixture(scope="module")
def s3source() -> Iterator[object]:
    require_module("botocore", "the s3:// source's error translation (botocore)")
    from shardstream.sources.s3 import S3Source

    source = S3Source(endpoint_url="http://127.0.0.1:9", access_key_id="AKIDX", secret_access_key="hunter2")
    yield source
    source.close()


def test_s3_codes_cover_the_table(s3source: object) -> None:
    from shardstream.sources.s3 import _CODES, s3_error

    for code, (cls, fix) in _CODES.items():
        err = s3_error(400, code, "s3://b/k.tar", endpoint="http://127.0.0.1:9")
        assert type(err) is cls, code
        assert code in str(err) and fix in str(err) and "s3://b/k.tar" in str(err)
    assert type(s3_error(404, None, "s3://b/k")) is ShardNotFoundError
    assert type(s3_error(403, "Odd", "s3://b/k")) is AccessDeniedError
    assert type(s3_error(503, None, "s3://b/k")) is TransientSourceError
    assert "redirected" in str(s3_error(301, None, "s3://b/k"))  # S3 redirects are not followed
    assert "max_redirects" in str(status_error(302, "https://h/k"))  # an unfollowed HTTP redirect


def test_s3_botocore_mapping(s3source: object) -> None:
    from botocore import exceptions as bx

    translate = s3source.translate  # type: ignore[attr-defined]
    client_error = bx.ClientError(
        {"Error": {"Code": "NoSuchBucket"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "GetObject"
    )
    cases: list[tuple[BaseException, type[SourceError], str]] = [
        (client_error, ShardNotFoundError, "NoSuchBucket"),
        (bx.NoCredentialsError(), AccessDeniedError, "anon=True"),
        (
            bx.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"),
            AccessDeniedError,
            "AWS_",
        ),
        (
            bx.EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
            TransientSourceError,
            "server is running",
        ),
        (bx.ConnectTimeoutError(endpoint_url="http://127.0.0.1:9"), TransientSourceError, "retried"),
        (bx.ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), TransientSourceError, "retried"),
        (bx.ConnectionClosedError(endpoint_url="http://127.0.0.1:9"), TransientSourceError, "retried"),
        (bx.ParamValidationError(report="bad key"), SourceError, "bad key"),
        (ConnectionResetError(104, "reset"), TransientSourceError, "ConnectionResetError"),
    ]
    for exc, cls, text in cases:
        err = translate(exc, "s3://b/k.tar")
        assert type(err) is cls, exc
        assert text in str(err) and "s3://b/k.tar" in str(err)
        _clean(str(err) + repr(s3source))


def test_sdks_are_imported_lazily() -> None:
    code = (
        "import sys, shardstream.sources.s3, shardstream.sources.http, shardstream.sources.pipe\n"
        "bad = [m for m in ('boto3', 'botocore', 'obstore', 'urllib3') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


# -- scheme detection and per-scheme storage options ------------------------------------------------


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("good.tar", "file"),
        ("data/good.tar", "file"),
        ("./good.tar", "file"),
        ("/abs/good.tar", "file"),
        ("C:\\data\\good.tar", "file"),
        ("c:/data/good.tar", "file"),
        ("train-{000..009}.tar", "file"),
        ("file:///abs/good.tar", "file"),
        ("S3://bucket/k.tar", "s3"),
        ("https://h/k.tar", "https"),
        ("pipe:cat x.tar", "pipe"),
    ],
)
def test_scheme_of(url: str, scheme: str) -> None:
    from shardstream.sources import scheme_of

    assert scheme_of(url) == scheme


def test_bare_relative_names_are_local_paths(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from shardstream.sources import get_source, open_url
    from shardstream.sources.file import FileSource

    root = Path(str(tmp_path))
    (root / "data").mkdir()
    (root / "good.tar").write_bytes(b"top")
    (root / "data" / "good.tar").write_bytes(b"nested")
    monkeypatch.chdir(root)
    assert isinstance(get_source("good.tar"), FileSource)
    with open_url("good.tar") as stream:
        assert stream.read() == b"top"
    with open_url("data/good.tar", offset=1) as stream:
        assert stream.read() == b"ested"
    with pytest.raises(ShardNotFoundError, match="no such file"):
        open_url("missing.tar")


def test_bare_relative_shard_in_a_dataset(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    import shardstream as ss

    monkeypatch.chdir(Path(str(tmp_path)))
    with ss.TarWriter("good.tar") as sink:
        for i in range(3):
            sink.write({"__key__": f"k{i}", "cls": i})
    assert [s["__key__"] for s in ss.WebDataset("good.tar", shardshuffle=False)] == ["k0", "k1", "k2"]
    assert [s["__key__"] for s in ss.ShardStream("good.tar", shuffle_shards=False, cache=None)] == [
        "k0",
        "k1",
        "k2",
    ]


def test_each_source_gets_only_its_own_options(tmp_path: object) -> None:
    from pathlib import Path

    from shardstream.sources import SchemeRouter, get_source, open_url, source_options
    from shardstream.sources.http import HTTPSource

    path = Path(str(tmp_path)) / "a.tar"
    path.write_bytes(b"local")
    mixed = {"anon": True, "endpoint_url": "http://127.0.0.1:9", "read_timeout": 5.0, "buffering": 0}
    with open_url(str(path), storage_options=mixed) as stream:  # FileSource takes buffering only
        assert stream.read() == b"local"
    router = SchemeRouter(mixed)
    with router.open(str(path)) as stream:
        assert stream.read() == b"local"
    http = get_source("https://h/x.tar", mixed)
    assert isinstance(http, HTTPSource) and http.pool.read_timeout == 5.0
    s3_only = {"anon": True, "endpoint_url": "http://127.0.0.1:9"}
    assert get_source(str(path), s3_only) is get_source(str(path))  # irrelevant options: same source
    assert source_options("memory") == frozenset()
    assert {"anon", "endpoint_url", "read_timeout"} <= (source_options("s3") or frozenset())


def test_unknown_option_is_an_error_not_ignored(tmp_path: object) -> None:
    from shardstream.errors import ConfigurationError
    from shardstream.sources import SchemeRouter, check_storage_options, open_url

    # (``endpoint`` itself is hf://'s option; ``endpoint_uri`` is nobody's)
    with pytest.raises(ConfigurationError, match="unknown storage option.*'endpoint_uri'") as info:
        open_url(str(tmp_path) + "/a.tar", storage_options={"endpoint_uri": "http://x"})
    assert "endpoint_url" in str(info.value)  # the message lists what each scheme accepts
    with pytest.raises(ConfigurationError, match="'read_timout'"):
        SchemeRouter({"read_timout": 1})
    # Known to some source, but to none of the schemes in use: an error where the URLs are known.
    with pytest.raises(ConfigurationError, match="'anon'.*schemes in use: file"):
        check_storage_options({"anon": True}, ["a.tar", "/b/c.tar"])
    with pytest.raises(ConfigurationError, match="'anon'"):
        SchemeRouter({"anon": True}, urls=["a.tar"])
    check_storage_options({"anon": True, "buffering": 0}, ["a.tar", "s3://b/k.tar"])
    SchemeRouter({"anon": True}, urls=["a.tar", "s3://b/k.tar"])
