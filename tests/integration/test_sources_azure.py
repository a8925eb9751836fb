"""End-to-end tests of the az:// source against Azurite (Microsoft's emulator, started once per
session): ranged reads, resume at the byte offset, listing, block-blob writes, credentials from
options and the environment, errors. Real sockets and a real server; no mocks."""

from __future__ import annotations

import datetime
import io
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from _faults import Cut, FaultProxy
from _procs import fork_child

import shardstream as ss
from shardstream.errors import (
    AccessDeniedError,
    ConfigurationError,
    ObjectChangedError,
    ShardNotFoundError,
    SourceError,
    TransientSourceError,
)
from shardstream.sources import create_url, forget_sources, get_source, open_url, stat_url
from shardstream.sources.azure import AzureSource, SharedKey, azure_error, parse_azure_url
from shardstream.tar import TarWriter
from shardstream.testing.azurite import Azurite

_numbers = itertools.count()


class RangeProxy(FaultProxy):
    """A FaultProxy that also records the ``x-ms-range`` and ``If-Match`` header of every request
    it forwards (``None`` where a request has none), in order."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.ranges: list[str | None] = []
        self.if_match: list[str | None] = []

    def _pump_up(self, client: Any, upstream: Any, counter: Any) -> None:
        feed = counter.feed

        def record(data: bytes) -> None:
            for head in data.split(b"\r\n\r\n"):
                lines = head.split(b"\r\n")
                if not lines[0].startswith((b"GET ", b"HEAD ", b"PUT ")):
                    continue
                found = {
                    k.strip().lower(): v.strip().decode() for k, _, v in (x.partition(b":") for x in lines)
                }
                self.ranges.append(found.get(b"x-ms-range"))
                self.if_match.append(found.get(b"if-match"))
            feed(data)

        counter.feed = record
        super()._pump_up(client, upstream, counter)


@pytest.fixture
def az(azurite_server: Azurite) -> Azurite:
    return azurite_server


@pytest.fixture
def container(azurite_server: Azurite, request: pytest.FixtureRequest) -> str:
    """A new, empty container for one test."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return azurite_server.create_container(f"t{next(_numbers)}-{stem}".replace("--", "-")[:63])


@pytest.fixture
def proxy(azurite_server: Azurite) -> Iterator[RangeProxy]:
    made = RangeProxy(azurite_server.endpoint_url).start()
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def make() -> Iterator[Callable[..., AzureSource]]:
    """``make(**options)``: an AzureSource, closed after the test (its pool holds sockets)."""
    made: list[AzureSource] = []

    def build(**options: Any) -> AzureSource:
        made.append(AzureSource(**options))
        return made[-1]

    try:
        yield build
    finally:
        for source in made:
            source.close()


Make = Callable[..., AzureSource]


def _through(az: Azurite, proxy: FaultProxy, **extra: Any) -> dict[str, Any]:
    return az.options_for(endpoint_url=f"{proxy.url}/{az.account_name}", **extra)


def _read_all(stream: Any, chunk: int = 1 << 16) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    while n := stream.readinto(buf):
        out += buf[:n]
    return bytes(out)


# -- reading --------------------------------------------------------------------------------------


def test_ranged_reads_move_only_the_range(
    az: Azurite, container: str, proxy: RangeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    data = os.urandom(2_000_000)
    url = az.put_blob(container, "data/shard-000000.tar", data)
    opts = _through(az, proxy)
    with caplog.at_level(logging.INFO, logger="shardstream"):
        with open_url(url, offset=1_234_567, length=1000, storage_options=opts) as stream:
            assert stream.read() == data[1_234_567:1_235_567]
    assert proxy.ranges == ["bytes=1234567-1235566"]
    assert proxy.response_bytes < 3000  # the range, not the blob
    assert f"open {url} offset=1234567 size={len(data)} length=1000" in caplog.messages
    with open_url(url, offset=1_999_990, storage_options=opts) as stream:
        assert stream.read() == data[1_999_990:]
    info = stat_url(url, storage_options=opts)
    assert info.size == len(data) and info.etag and info.etag.startswith('"')


def test_a_cut_read_resumes_at_the_byte_offset_pinned_to_the_etag(
    az: Azurite, container: str, proxy: RangeProxy, make: Make
) -> None:
    data = os.urandom(1_000_000)
    url = az.put_blob(container, "cuts/shard.tar", data)
    proxy.plan(Cut(300_000))
    source = make(**_through(az, proxy, retries=5))
    with source.open(url) as stream:
        got = _read_all(stream, 100_003)
        assert stream.retries == 1  # type: ignore[attr-defined]
    assert got == data
    assert proxy.ranges[0] is None and len(proxy.ranges) == 2
    resumed_at = int(str(proxy.ranges[1]).removeprefix("bytes=").removesuffix("-"))
    assert 299_000 < resumed_at < 300_000  # where the cut fell (after the response head)
    assert proxy.response_bytes < len(data) + 2000  # nothing read twice
    assert proxy.if_match[1] == source.stat(url).etag  # the resume is pinned to the version


def test_a_cut_ranged_read_resumes_within_the_range(az: Azurite, container: str, proxy: RangeProxy) -> None:
    data = os.urandom(1_000_000)
    url = az.put_blob(container, "range/shard.tar", data)
    proxy.plan(Cut(50_000))
    with open_url(url, offset=100_000, length=500_000, storage_options=_through(az, proxy)) as stream:
        assert _read_all(stream, 65_537) == data[100_000:600_000]
    first, resumed = proxy.ranges
    assert first == "bytes=100000-599999"
    assert resumed is not None and resumed.endswith("-599999")
    assert 149_000 < int(resumed[len("bytes=") :].split("-")[0]) < 150_000


def test_a_blob_replaced_mid_read_is_object_changed(
    az: Azurite, container: str, proxy: RangeProxy, make: Make
) -> None:
    data = os.urandom(1_000_000)
    url = az.put_blob(container, "changed/shard.tar", data)
    proxy.plan(Cut(200_000))
    source = make(**_through(az, proxy, retries=5))
    with source.open(url) as stream:
        assert stream.read(1000) == data[:1000]
        az.put_blob(container, "changed/shard.tar", os.urandom(1_000_000))
        with pytest.raises(ObjectChangedError, match="changed while it was being read"):
            _read_all(stream)


def test_early_stop_releases_the_connection(az: Azurite, container: str, proxy: RangeProxy) -> None:
    # About 26 MB: more than the socket buffers on both sides of the proxy can hold by half
    # (3 MB let 1.6 MB through before the close in a fresh-clone run).
    buf = io.BytesIO()
    with TarWriter(buf) as tar:
        for i in range(2000):
            tar.write({"__key__": f"s{i:05d}", "bin": os.urandom(12_000)})
    url = az.put_blob(container, "early/shard-0.tar", buf.getvalue())
    ds = ss.ShardStream([url], shuffle_shards=False, storage_options=_through(az, proxy), cache=None)
    for n, _ in enumerate(ds):
        if n == 3:
            break
    deadline = time.monotonic() + 5
    while proxy.open_connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.open_connections == 0
    assert proxy.response_bytes < len(buf.getvalue()) // 2  # stopped, not drained


# -- listing --------------------------------------------------------------------------------------


def test_listing_nested_keys_over_several_pages(
    az: Azurite, container: str, proxy: RangeProxy, make: Make
) -> None:
    names = [f"pre/{d}/{i:03d}.bin" for d in ("a", "b/c", "b/d") for i in range(7)] + ["pre/top.txt"]
    for name in names:
        az.put_blob(container, name, name.encode())
    az.put_blob(container, "prelude.txt", b"not under pre/")
    source = make(**_through(az, proxy, maxresults=4))
    listed = list(source.list_objects(f"az://{container}/pre/"))
    assert sorted(x.key for x in listed) == sorted(n[len("pre/") :] for n in names)
    assert all(x.size == len(f"pre/{x.key}") and x.etag for x in listed)
    assert proxy.gets(f"{az.account_name}/{container}") == 6  # ceil(22 / 4) pages
    assert len(list(source.list_objects(f"az://{container}/"))) == 23
    with pytest.raises(ShardNotFoundError, match="container 'no-such-container'"):
        list(source.list_objects("az://no-such-container/x/"))


# -- writing --------------------------------------------------------------------------------------


def test_multi_block_write_is_visible_on_close_only(
    az: Azurite, container: str, proxy: RangeProxy, make: Make
) -> None:
    data = os.urandom(1_300_000)
    url = f"az://{container}/out/big.bin"
    source = make(**_through(az, proxy, block_size=256 << 10))
    with source.create(url) as out:
        for pos in range(0, len(data), 100_003):  # odd chunks straddle block boundaries
            out.write(data[pos : pos + 100_003])
        assert not az.blob_exists(container, "out/big.bin")  # 4 blocks uploaded, none committed
    assert az.get_blob(container, "out/big.bin") == data
    assert proxy.requests[("PUT", f"/{az.account_name}/{container}/out/big.bin")] == 6  # 5 blocks + list
    small = f"az://{container}/out/small.bin"
    with source.create(small) as out:  # under one block: one Put Blob at close
        out.write(b"tiny")
    assert az.get_blob(container, "out/small.bin") == b"tiny"


def test_abort_and_exceptions_leave_no_blob(az: Azurite, container: str, make: Make) -> None:
    source = make(**az.options_for(block_size=256 << 10))
    out = source.create(f"az://{container}/gone/aborted.bin")
    out.write(os.urandom(700_000))  # two blocks uploaded
    out.abort()  # type: ignore[attr-defined]
    assert out.closed
    with pytest.raises(RuntimeError, match="boom"):
        with source.create(f"az://{container}/gone/raised.bin") as failing:
            failing.write(os.urandom(600_000))
            raise RuntimeError("boom")
    assert not az.blob_exists(container, "gone/aborted.bin")
    assert not az.blob_exists(container, "gone/raised.bin")
    assert list(source.list_objects(f"az://{container}/gone/")) == []


def test_a_block_upload_cut_by_the_network_is_retried(
    az: Azurite, container: str, proxy: RangeProxy, make: Make
) -> None:
    data = os.urandom(600_000)
    proxy.plan(Cut(0))  # the first connection's answer never arrives
    source = make(**_through(az, proxy, block_size=256 << 10, retries=4))
    with source.create(f"az://{container}/retried.bin") as out:
        out.write(data)
    assert az.get_blob(container, "retried.bin") == data
    assert (
        proxy.requests[("PUT", f"/{az.account_name}/{container}/retried.bin")] == 5
    )  # 3 blocks + 1 again + list


ODD = [
    "a b",
    "q?x=1",
    "frag#top",
    "pct%20lit",
    "plus+sign",
    "ü日本",
    "semi;colon",
    "at@sign",
    "tilde~",
    "x&y=z",
]


def test_keys_with_special_characters_round_trip(az: Azurite, container: str) -> None:
    opts = az.storage_options
    for stem in ODD:
        url = f"az://{container}/odd dir/{stem}.bin"
        with create_url(url, storage_options=opts) as out:
            out.write(stem.encode())
        assert az.get_blob(container, f"odd dir/{stem}.bin") == stem.encode()  # the URL's key, whole
        with open_url(url, offset=1, storage_options=opts) as stream:
            assert stream.read() == stem.encode()[1:]
    source = get_source(f"az://{container}/", opts)
    assert sorted(x.key for x in source.list_objects(f"az://{container}/odd dir/")) == sorted(
        f"{s}.bin" for s in ODD
    )


# -- credentials ----------------------------------------------------------------------------------


def test_connection_string_in_the_environment(
    az: Azurite, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = az.put_blob(container, "env/conn.bin", b"from the connection string")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", az.connection_string)
    with open_url(url) as stream:  # no storage_options at all
        assert stream.read() == b"from the connection string"
    source = get_source(url)
    assert isinstance(source, AzureSource) and source.credential.kind == "shared key"
    assert az.account_key not in repr(source)


def test_account_name_and_key_in_the_environment(
    az: Azurite, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = az.put_blob(container, "env/key.bin", b"from name and key")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", az.account_name)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", az.account_key)
    with open_url(url, storage_options={"endpoint_url": az.endpoint_url}) as stream:
        assert stream.read() == b"from name and key"
    # an explicit credential wins over the environment: a wrong key there is not used
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "AAAA" + az.account_key[4:])
    sas = az.sas_token(container, "r")
    with open_url(url, storage_options={"endpoint_url": az.endpoint_url, "sas_token": sas}) as stream:
        assert stream.read() == b"from name and key"


def test_sas_tokens_read_refuse_writes_and_expire_without_showing_sig(
    az: Azurite, container: str, caplog: pytest.LogCaptureFixture, make: Make
) -> None:
    url = az.put_blob(container, "sas/shard.bin", b"sas bytes")
    read_only = az.sas_token(container, permissions="rl")
    sig = dict(p.split("=", 1) for p in read_only.split("&"))["sig"]
    opts = {"account_name": az.account_name, "endpoint_url": az.endpoint_url, "retries": 1}
    source = make(**opts, sas_token=read_only)
    messages = [repr(source)]
    with caplog.at_level(logging.DEBUG, logger="shardstream"):
        with source.open(url) as stream:
            assert stream.read() == b"sas bytes"
        assert [x.key for x in source.list_objects(f"az://{container}/sas/")] == ["shard.bin"]
        with pytest.raises(AccessDeniedError) as denied:
            with source.create(f"az://{container}/sas/new.bin") as out:
                out.write(b"x")
        messages.append(str(denied.value))
        assert "SAS token expired or lacks permission" in str(denied.value) and "sp=rl" in str(denied.value)
        assert not az.blob_exists(container, "sas/new.bin")
        expired = make(**opts, sas_token=az.sas_token(container, "rl", datetime.timedelta(hours=-1)))
        with pytest.raises(AccessDeniedError, match="SAS token expired at se=") as old:
            expired.open(url)
        messages.append(str(old.value))
    for text in [*messages, caplog.text]:
        assert sig not in text and read_only not in text


def test_a_wrong_account_key_is_access_denied_naming_shared_key(
    az: Azurite, container: str, make: Make
) -> None:
    url = az.put_blob(container, "key/x.bin", b"x")
    wrong = "AAAA" + az.account_key[4:]
    source = make(**az.options_for(account_key=wrong, retries=1))
    for call in (source.open, source.stat):
        with pytest.raises(AccessDeniedError) as info:
            call(url)
        msg = str(info.value)
        assert "shared key" in msg and "account_key" in msg and url in msg
        assert wrong not in msg and az.account_key not in msg


def test_a_wrong_account_name_is_named(az: Azurite, container: str, make: Make) -> None:
    url = az.put_blob(container, "acct/x.bin", b"x")
    source = make(
        account_name="nosuchaccount",
        account_key=az.account_key,
        endpoint_url=az.endpoint_url.replace(az.account_name, "nosuchaccount"),
        retries=1,
    )
    with pytest.raises(ShardNotFoundError, match="account 'nosuchaccount'"):
        source.open(url)


def test_abfs_urls_carry_the_account_in_the_host(az: Azurite, container: str, make: Make) -> None:
    az.put_blob(container, "dir/a.bin", b"abfs")
    host = f"{az.account_name}.dfs.core.windows.net"
    assert parse_azure_url(f"abfss://{container}@{host}/dir/a.bin") == (
        az.account_name,
        container,
        "dir/a.bin",
    )
    assert parse_azure_url(f"az://{container}/dir/a.bin?x#y") == (None, container, "dir/a.bin?x#y")
    opts = {"account_key": az.account_key, "endpoint_url": az.endpoint_url}  # no account_name
    for scheme in ("abfs", "abfss"):
        with open_url(f"{scheme}://{container}@{host}/dir/a.bin", storage_options=opts) as stream:
            assert stream.read() == b"abfs"
    named = make(**az.storage_options)
    with pytest.raises(ConfigurationError, match="names account 'other'"):
        named.open(f"abfs://{container}@other.dfs.core.windows.net/dir/a.bin")


def test_missing_azure_identity_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "azure.identity", None)
    with pytest.raises(ImportError, match=r"pip install 'shardstream\[azure\]'"):
        AzureSource(account_name="someaccount")  # no key, SAS or connection string: Entra ID


def test_bearer_tokens_are_cached_renewed_before_expiry_and_fetched_once(make: Make) -> None:
    """The Bearer credential asks a TokenCredential (here a plain object with ``get_token``) for
    the storage scope, reuses a token until five minutes before it expires, and lets one thread
    of many fetch it."""
    calls: list[str] = []
    lifetime = [3600.0]

    class Tokens:
        def get_token(self, scope: str) -> Any:
            calls.append(scope)
            time.sleep(0.05)
            return SimpleNamespace(token=f"t{len(calls)}", expires_on=time.time() + lifetime[0])

    source = make(account_name="someaccount", credential=Tokens())
    assert source.credential.kind == "bearer token"
    headers: dict[str, str] = {}
    threads = [
        threading.Thread(target=source.credential.authorize, args=("GET", "/c/b", [], {})) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    source.credential.authorize("GET", "/c/b", [], headers)
    assert calls == ["https://storage.azure.com/.default"] and headers["Authorization"] == "Bearer t1"
    lifetime[0] = 100.0  # the next token expires within five minutes: renewed on every use
    source.credential._expires = 0.0  # type: ignore[attr-defined]
    source.credential.authorize("GET", "/c/b", [], headers)
    source.credential.authorize("GET", "/c/b", [], headers)
    assert len(calls) == 3 and headers["Authorization"] == "Bearer t3"


# -- the dataset layer and processes ----------------------------------------------------------------


def test_shardwriter_dataset_and_objectstream_round_trip(az: Azurite, container: str) -> None:
    opts = az.storage_options
    with ss.ShardWriter(f"az://{container}/prefix/train-%06d.tar", maxcount=4, storage_options=opts) as sink:
        for i in range(12):
            sink.write({"__key__": f"k{i:03d}", "txt": f"sample {i}"})
    assert sorted(x.key for x in get_source("az://", opts).list_objects(f"az://{container}/prefix/")) == [
        "_info.json",  # ShardWriter's index, and its shards' offsets sidecars
        *(f"_offsets/train-{i:06d}.tar.bin" for i in range(3)),
        *(f"train-{i:06d}.tar" for i in range(3)),
    ]
    spec = f"az://{container}/prefix/train-{{000000..000002}}.tar"
    ds = ss.ShardStream(spec, shuffle_shards=False, storage_options=opts, cache=None)
    assert [(s["__key__"], s["txt"]) for s in ds] == [
        (f"k{i:03d}", f"sample {i}".encode()) for i in range(12)
    ]
    for i in range(5):
        az.put_blob(container, f"objs/{i:03d}.txt", f"object {i}".encode())
        az.put_blob(container, f"objs/{i:03d}.cls", str(i).encode())
    stream = ss.ObjectStream(f"az://{container}/objs/", storage_options=opts, shuffle=False)
    assert [(s["__key__"], s["txt"], s["cls"]) for s in stream] == [
        (f"{i:03d}", f"object {i}".encode(), str(i).encode()) for i in range(5)
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_adopts_the_source_with_connections_of_its_own(
    az: Azurite, container: str, proxy: RangeProxy
) -> None:
    url = az.put_blob(container, "fork/one.bin", b"x" * 5000)
    opts = _through(az, proxy)
    source: Any = get_source(url, opts)
    with source.open(url) as stream:
        assert stream.read() == b"x" * 5000  # leaves one idle keep-alive connection in the pool

    def child() -> None:
        assert get_source(url, opts) is source  # adopted: fork_safe
        assert not source.pool.idle.count()  # the parent's connection is not the child's
        with source.open(url) as got:
            assert got.read() == b"x" * 5000

    try:
        assert fork_child(child)[0] == 0
        with source.open(url) as again:  # the parent's idle connection still works, untouched
            assert again.read() == b"x" * 5000
        assert proxy.connections == 2
    finally:
        forget_sources("az")
        source.close()


ERRORS = [
    (404, "BlobNotFound", ShardNotFoundError, "blob does not exist"),
    (404, "ContainerNotFound", ShardNotFoundError, "container 'box' does not exist"),
    (404, "ResourceNotFound", ShardNotFoundError, "account name 'acct'"),
    (403, "AuthenticationFailed", AccessDeniedError, "shared key signature was refused"),
    (403, "AuthorizationPermissionMismatch", AccessDeniedError, "shared key"),
    (412, "ConditionNotMet", ObjectChangedError, "changed while it was being read"),
    (429, None, TransientSourceError, "retried"),
    (500, "InternalError", TransientSourceError, "retried"),
    (503, "ServerBusy", TransientSourceError, "retried"),
    (400, "InvalidHeaderValue", SourceError, "InvalidHeaderValue"),
]


@pytest.mark.parametrize(
    ("status", "code", "kind", "text"), ERRORS, ids=[f"{s}-{c}" for s, c, _, _ in ERRORS]
)
def test_every_azure_error_maps_to_its_class_naming_url_account_and_credential(
    status: int, code: str | None, kind: type[Exception], text: str
) -> None:
    url = "az://box/dir/shard.tar"
    error = azure_error(status, code, url, account="acct", credential=SharedKey("acct", "a2V5"))
    assert type(error) is kind and text in str(error)
    assert url in str(error) and "'acct'" in str(error) and "shared key" in str(error)
    assert "a2V5" not in str(error)
