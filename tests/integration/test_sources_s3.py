"""End-to-end tests of the s3:// source against a local SeaweedFS (started once per session)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from _servers import Cut, FaultProxy, SeaweedS3, Stall, free_port

from shardstream.errors import (
    AccessDeniedError,
    ConfigurationError,
    ShardNotFoundError,
    TransientSourceError,
)
from shardstream.sources import create_url, get_source, open_url, stat_url
from shardstream.sources.s3 import S3Source

pytestmark = pytest.mark.s3

ProxyFactory = Callable[[str], FaultProxy]


def _read_all(stream: object, chunk: int = 1 << 16) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    while n := stream.readinto(buf):  # type: ignore[attr-defined]
        out += buf[:n]
    return bytes(out)


def _assert_no_secret(text: str, s3: SeaweedS3) -> None:
    assert s3.secret_key not in text and s3.alt_secret_key not in text


def test_read_range_stat(s3_server: SeaweedS3, s3_bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    data = os.urandom(3_000_000)
    url = s3_server.put_object(s3_bucket, "data/shard-000000.tar", data)
    opts = s3_server.storage_options
    with caplog.at_level(logging.DEBUG, logger="shardstream"):
        with open_url(url, storage_options=opts) as stream:
            assert _read_all(stream) == data
        with open_url(url, offset=1_234_567, storage_options=opts) as stream:
            assert stream.read(5) == data[1_234_567:1_234_572]
            assert stream.read() == data[1_234_572:]
    info = stat_url(url, storage_options=opts)
    assert info.size == len(data) and info.etag
    assert f"open {url} offset=0 size={len(data)}" in caplog.messages
    source = get_source(url, opts)
    _assert_no_secret(caplog.text + repr(source), s3_server)
    assert isinstance(source, S3Source) and source.requests[url] == 2


def test_resume_after_cuts_at_many_offsets(
    s3_server: SeaweedS3, s3_bucket: str, fault_proxy: ProxyFactory
) -> None:
    data = os.urandom(1_500_000)
    url = s3_server.put_object(s3_bucket, "cuts/shard.tar", data)
    proxy = fault_proxy(s3_server.endpoint_url)
    cuts = [3, 200, 400, 401, 1000, 5000, 65_536, 300_000, 700_001, 1_000_000]
    proxy.plan(*(Cut(c) for c in cuts))
    opts = s3_server.options_for(endpoint_url=proxy.url, retries=20)
    with open_url(url, storage_options=opts) as stream:
        got = _read_all(stream, 100_003)
        retries = stream.retries  # type: ignore[attr-defined]
    assert got == data
    assert len(cuts) - 2 <= retries <= len(cuts)
    assert proxy.gets(f"{s3_bucket}/cuts/shard.tar") == retries + 1  # each fetch counted at the proxy


def test_stall_times_out_and_resumes(s3_server: SeaweedS3, s3_bucket: str, fault_proxy: ProxyFactory) -> None:
    data = os.urandom(400_000)
    url = s3_server.put_object(s3_bucket, "stall/shard.tar", data)
    proxy = fault_proxy(s3_server.endpoint_url)
    proxy.plan(Stall(after=50_000, seconds=5.0))
    opts = s3_server.options_for(endpoint_url=proxy.url, read_timeout=0.5, retries=5)
    with open_url(url, storage_options=opts) as stream:
        assert stream.read() == data
        assert stream.retries == 1  # type: ignore[attr-defined]


def test_missing_key_and_bucket(s3_server: SeaweedS3, s3_bucket: str) -> None:
    opts = s3_server.storage_options
    url = f"s3://{s3_bucket}/nope/shard-000.tar"
    with pytest.raises(ShardNotFoundError) as info:
        open_url(url, storage_options=opts)
    msg = str(info.value)
    assert url in msg and "404" in msg and "NoSuchKey" in msg and "check the key" in msg
    with pytest.raises(ShardNotFoundError) as info:
        open_url("s3://no-such-bucket-xyz/shard.tar", storage_options=opts)
    msg = str(info.value)
    assert "s3://no-such-bucket-xyz/shard.tar" in msg and "NoSuchBucket" in msg and "bucket name" in msg
    with pytest.raises(ShardNotFoundError, match="404"):
        stat_url(url, storage_options=opts)


def test_bad_credentials(s3_server: SeaweedS3, s3_bucket: str) -> None:
    url = s3_server.put_object(s3_bucket, "a.tar", b"x" * 100)
    wrong_key = {**s3_server.storage_options, "access_key_id": "NOSUCHKEYID"}
    with pytest.raises(AccessDeniedError) as info:
        open_url(url, storage_options=wrong_key)
    msg = str(info.value)
    assert url in msg and "403" in msg and "InvalidAccessKeyId" in msg and "AWS_ACCESS_KEY_ID" in msg
    _assert_no_secret(msg, s3_server)
    wrong_secret = {**s3_server.storage_options, "secret_access_key": "not-the-secret-0123"}
    with pytest.raises(AccessDeniedError) as info:
        open_url(url, storage_options=wrong_secret)
    msg = str(info.value)
    assert "SignatureDoesNotMatch" in msg and "AWS_SECRET_ACCESS_KEY" in msg
    assert "not-the-secret-0123" not in msg and "X-Amz-Signature=" not in msg
    assert info.value.__cause__ is None or "not-the-secret" not in repr(info.value.__cause__)


def test_per_dataset_credentials(s3_server: SeaweedS3, s3_bucket: str) -> None:
    """Two option sets in one process: the alt identity may only use its own bucket."""
    mine = s3_server.put_object(s3_bucket, "a.tar", b"admin data")
    theirs = s3_server.put_object(s3_server.alt_bucket, "b.tar", b"alt data")
    admin, alt = s3_server.storage_options, s3_server.options_for(alt=True)
    assert get_source(mine, admin) is not get_source(mine, alt)
    with open_url(theirs, storage_options=alt) as stream:
        assert stream.read() == b"alt data"
    with open_url(mine, storage_options=admin) as stream:
        assert stream.read() == b"admin data"
    with pytest.raises(AccessDeniedError) as info:
        open_url(mine, storage_options=alt)
    assert "AccessDenied" in str(info.value) and mine in str(info.value)
    _assert_no_secret(str(info.value), s3_server)


def test_anonymous_access(s3_server: SeaweedS3) -> None:
    url = s3_server.put_object(s3_server.public_bucket, "open/shard.tar", b"public bytes")
    anon = {"endpoint_url": s3_server.endpoint_url, "anon": True}
    with open_url(url, storage_options=anon) as stream:
        assert stream.read() == b"public bytes"
    private = s3_server.put_object(s3_server.alt_bucket, "closed.tar", b"secret bytes")
    with pytest.raises(AccessDeniedError, match="anon=True"):
        open_url(private, storage_options=anon)


def test_standard_aws_environment(
    s3_server: SeaweedS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No storage_options: endpoint, region and credentials come from AWS_* variables, then a profile."""
    url = s3_server.put_object(s3_bucket, "env.tar", b"from env")
    for name in list(os.environ):
        if name.startswith("AWS_") and name != "AWS_CA_BUNDLE":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    source = S3Source()
    try:
        assert source.endpoint_url == s3_server.endpoint_url
        with source.open(url) as stream:
            assert stream.read() == b"from env"
    finally:
        source.close()
    # A named profile from the config and credentials files.
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    (tmp_path / "credentials").write_text(
        f"[lab]\naws_access_key_id = {s3_server.alt_access_key}\n"
        f"aws_secret_access_key = {s3_server.alt_secret_key}\n"
    )
    (tmp_path / "config").write_text("[profile lab]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    alt_url = s3_server.put_object(s3_server.alt_bucket, "profile.tar", b"from profile")
    source = S3Source(profile="lab")
    try:
        with source.open(alt_url) as stream:
            assert stream.read() == b"from profile"
        with pytest.raises(AccessDeniedError):
            source.open(url)  # the lab identity may not read the admin's bucket
    finally:
        source.close()
    with pytest.raises(ConfigurationError, match="profile 'nope' not found"):
        S3Source(profile="nope")


def test_unreachable_endpoint(s3_server: SeaweedS3) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    opts = s3_server.options_for(endpoint_url=endpoint, retries=2, connect_timeout=1.0)
    with pytest.raises(TransientSourceError) as info:
        open_url("s3://bucket/shard.tar", storage_options=opts)
    msg = str(info.value)
    assert "s3://bucket/shard.tar" in msg and endpoint in msg and "connection refused" in msg
    assert "server is running" in msg and "giving up" in msg
    _assert_no_secret(msg, s3_server)


def test_multipart_write_and_read_back(s3_server: SeaweedS3, s3_bucket: str) -> None:
    opts = s3_server.options_for(part_size=5 << 20)
    url = f"s3://{s3_bucket}/written/shard-000.tar"
    data = os.urandom((12 << 20) + 12345)
    with create_url(url, storage_options=opts) as out:
        for pos in range(0, len(data), 1_000_003):  # odd chunk sizes straddle part boundaries
            out.write(data[pos : pos + 1_000_003])
            assert len(out._buffer) < (5 << 20)  # type: ignore[attr-defined]  # one part at most
        assert len(out._parts) == 2  # type: ignore[attr-defined]
    head = s3_server.admin.head_object(Bucket=s3_bucket, Key="written/shard-000.tar")
    assert head["ContentLength"] == len(data)
    with open_url(url, storage_options=opts) as stream:
        assert _read_all(stream, 1 << 20) == data
    small = f"s3://{s3_bucket}/written/small.tar"
    with create_url(small, storage_options=opts) as out:
        out.write(b"tiny")
    assert s3_server.get_object(s3_bucket, "written/small.tar") == b"tiny"


def test_failed_write_publishes_nothing(s3_server: SeaweedS3, s3_bucket: str) -> None:
    opts = s3_server.options_for(part_size=5 << 20)
    url = f"s3://{s3_bucket}/broken.tar"
    with pytest.raises(RuntimeError, match="user code failed"), create_url(url, storage_options=opts) as out:
        out.write(os.urandom(6 << 20))
        raise RuntimeError("user code failed")
    with pytest.raises(ShardNotFoundError):
        stat_url(url, storage_options=opts)


def test_write_denied_message(s3_server: SeaweedS3, s3_bucket: str) -> None:
    out = create_url(f"s3://{s3_bucket}/denied.tar", storage_options=s3_server.options_for(alt=True))
    out.write(b"x")
    with pytest.raises(AccessDeniedError) as info:
        out.close()
    msg = str(info.value)
    assert "cannot write" in msg and "403" in msg and "AccessDenied" in msg
    _assert_no_secret(msg, s3_server)


def test_ranged_read_resumes_within_the_range(
    s3_server: SeaweedS3, s3_bucket: str, fault_proxy: ProxyFactory
) -> None:
    data = os.urandom(1_000_000)
    url = s3_server.put_object(s3_bucket, "range/shard.tar", data)
    proxy = fault_proxy(s3_server.endpoint_url)
    proxy.plan(Cut(5_000), Cut(100_000))
    opts = s3_server.options_for(endpoint_url=proxy.url, retries=20)
    with open_url(url, offset=123_456, length=500_000, storage_options=opts) as stream:
        got = _read_all(stream, 65_537)
        retries = stream.retries  # type: ignore[attr-defined]
        assert stream.read() == b""
    assert got == data[123_456:623_456]
    assert retries == 2 and proxy.gets(f"{s3_bucket}/range/shard.tar") == 3
    for offset in (len(data), len(data) + 10):  # InvalidRange (416): empty, not an error
        with open_url(url, offset=offset, length=10, storage_options=opts) as stream:
            assert stream.read() == b""


def test_credentials_set_after_a_failed_lookup_are_used(
    s3_server: SeaweedS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A notebook user: the first open finds no credentials, they export them, the next open works."""
    url = s3_server.put_object(s3_bucket, "late/a.tar", b"late credentials")
    for name in list(os.environ):
        if name.startswith("AWS_") and name != "AWS_CA_BUNDLE":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    opts = {"endpoint_url": s3_server.endpoint_url, "region": s3_server.region}
    for _ in range(2):  # failing twice must not make it stick either
        with pytest.raises(AccessDeniedError, match="no AWS credentials found"):
            open_url(url, storage_options=opts)
    source = get_source(url, opts)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    with open_url(url, storage_options=opts) as stream:
        assert stream.read() == b"late credentials"
    assert get_source(url, opts) is source  # the same cached source, with a fresh lookup
    assert stat_url(url, storage_options=opts).size == len(b"late credentials")


def test_local_and_s3_shards_in_one_dataset(s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    """storage_options apply per scheme: FileSource never sees the S3 options."""
    import shardstream as ss

    local = str(tmp_path / "local-000.tar")
    with ss.TarWriter(local) as sink:
        sink.write({"__key__": "local0", "cls": 0})
    remote = f"s3://{s3_bucket}/mixed/remote-000.tar"
    with ss.TarWriter(remote, storage_options=s3_server.storage_options) as sink:
        sink.write({"__key__": "remote0", "cls": 1})
    options = {**s3_server.storage_options, "read_timeout": 30.0}
    dataset = ss.ShardStream([local, remote], shuffle_shards=False, cache=None, storage_options=options)
    assert [s["__key__"] for s in dataset] == ["local0", "remote0"]
    compat = ss.WebDataset([remote, local], shardshuffle=False, storage_options=options)
    assert [s["__key__"] for s in compat] == ["remote0", "local0"]
    with pytest.raises(ConfigurationError, match="'endpoint'"):
        list(ss.ShardStream([local, remote], cache=None, storage_options={"endpoint": "x"}))
