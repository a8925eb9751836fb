"""The ``hf://`` source against the Hub stand-in (:mod:`shardstream.testing.hub`), and the
stand-in's faithfulness: ``huggingface_hub``'s own client (``hf_hub_download``, ``HfFileSystem``,
``HfApi``) reads it as it reads the Hub.

Each test uses repos of its own in the session's stand-in (``hub_server``), or a stand-in of its
own where it changes the server's settings. Real sockets, no mocks.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import Cut, FaultProxy

import shardstream
from shardstream.errors import (
    AccessDeniedError,
    ConfigurationError,
    ObjectChangedError,
    ShardNotFoundError,
)
from shardstream.sources import create_url, forget_sources, get_source
from shardstream.sources.hf import HFPath, HFSource, parse_hf_url
from shardstream.tar.writer import TarWriter
from shardstream.testing.hub import HubStandIn

ProxyFactory = Callable[[str], FaultProxy]
_count = iter(range(1_000_000))


@pytest.fixture(autouse=True)
def no_developer_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No token file of the developer's is found; huggingface_hub sends no telemetry, uses no Xet."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "hf-home" / "no-token"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.delenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", raising=False)


def _repo(hub: HubStandIn, **flags: Any) -> str:
    repo = f"org/repo-{next(_count)}"
    hub.add_repo(repo, **flags)
    return repo


class _Closing:
    """``with _Closing(source) as source:`` closes the source afterwards."""

    def __init__(self, source: HFSource) -> None:
        self.source = source

    def __enter__(self) -> HFSource:
        return self.source

    def __exit__(self, *exc: object) -> None:
        self.source.close()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_all(stream: Any, chunk: int = 1 << 16) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    while n := stream.readinto(buf):
        out += buf[:n]
    return bytes(out)


def _resolves(hub: HubStandIn, repo: str, path: str = "") -> list[Any]:
    return [r for r in hub.hub_log if r.path.startswith(f"/datasets/{repo}/resolve/") and path in r.path]


# -- URLs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("hf://datasets/org/name/a/b.tar", HFPath("dataset", "org/name", "main", "a/b.tar")),
        ("hf://datasets/org/name@v1.0/b.tar", HFPath("dataset", "org/name", "v1.0", "b.tar")),
        ("hf://datasets/org/name@refs/pr/12/x/b.tar", HFPath("dataset", "org/name", "refs/pr/12", "x/b.tar")),
        (
            "hf://datasets/org/name@refs/convert/parquet/p",
            HFPath("dataset", "org/name", "refs/convert/parquet", "p"),
        ),
        ("hf://datasets/org/name@feature%2Fx/b.tar", HFPath("dataset", "org/name", "feature/x", "b.tar")),
        ("hf://org/model/config.json", HFPath("model", "org/model", "main", "config.json")),
        ("hf://models/org/model@abc/w.bin", HFPath("model", "org/model", "abc", "w.bin")),
        ("hf://spaces/org/app/app.py", HFPath("space", "org/app", "main", "app.py")),
        ("hf://datasets/org/name/", HFPath("dataset", "org/name", "main", "")),
    ],
)
def test_urls_are_taken_apart_as_hffilesystem_does(url: str, expected: HFPath) -> None:
    assert parse_hf_url(url) == expected


def test_bad_urls_say_what_an_hf_url_looks_like() -> None:
    for url in ("hf://datasets/only-org", "hf://x", "hf://datasets/org/name@/f"):
        with pytest.raises(ConfigurationError, match="hf://"):
            parse_hf_url(url)
    with pytest.raises(ConfigurationError, match="folder"):
        HFSource(endpoint="http://127.0.0.1:9", token=False).open("hf://datasets/org/name/dir/")
    with pytest.raises(ConfigurationError, match="upload them with huggingface_hub"):
        create_url(
            "hf://datasets/org/name/out-000000.tar", storage_options={"endpoint": "http://127.0.0.1:9"}
        )
    with pytest.raises(ConfigurationError, match="not an http"):
        HFSource(endpoint="ftp://example.org")


# -- reading ----------------------------------------------------------------------------------------


def test_whole_ranged_and_stat_with_the_cdn_url_reused(hub_server: HubStandIn) -> None:
    repo = _repo(hub_server)
    data = random.Random(1).randbytes(3_000_001)
    small = b"a small file the Hub serves itself\n" * 10
    hub_server.add_file(repo, "data/shard-000000.tar", data)
    hub_server.add_file(repo, "README.md", small, lfs=False)
    url, small_url = f"hf://datasets/{repo}/data/shard-000000.tar", f"hf://datasets/{repo}/README.md"
    with _Closing(HFSource(endpoint=hub_server.endpoint, token=False)) as source:
        with source.open(url) as stream:
            assert _read_all(stream) == data
        for offset, length in ((0, 10), (1_234_567, 1000), (2_999_990, None), (3_000_001, 5), (5, 0)):
            end = len(data) if length is None else offset + length
            with source.open(url, offset=offset, length=length) as stream:
                assert stream.read() == data[offset:end]
        info = source.stat(url)
        assert info.size == len(data) and info.etag == f'"{_sha256(data)}"'
        # the signed CDN URL of the first open served every later read: one resolve of the file
        assert len(_resolves(hub_server, repo, "shard-000000.tar")) == 2  # the first GET and the stat's HEAD
        with source.open(small_url, offset=2, length=5) as stream:
            assert stream.read() == small[2:7]
        with source.open(small_url) as stream:
            assert stream.read() == small
        with source.open(small_url, offset=len(small) + 5, length=3) as stream:  # 416 from the Hub
            assert stream.read() == b""
        assert source.stat(small_url).size == len(small)


def test_token_reaches_the_hub_and_never_the_cdn(hub_server: HubStandIn) -> None:
    repo = _repo(hub_server, private=True)
    data = os.urandom(200_000)
    hub_server.add_file(repo, "train/a.tar", data)
    url = f"hf://datasets/{repo}/train/a.tar"
    hub_server.clear_logs()
    with _Closing(HFSource(endpoint=hub_server.endpoint, token=hub_server.token)) as source:
        with source.open(url) as stream:
            assert stream.read() == data
        source._forget(parse_hf_url(url))  # resolve again: a second redirect to the CDN
        with source.open(url, offset=100, length=100) as stream:
            assert stream.read() == data[100:200]
        assert source.stat(url).size == len(data)
        assert [k.key for k in source.list_objects(f"hf://datasets/{repo}/train/")] == ["a.tar"]
    mine = [r for r in hub_server.hub_log if repo in r.path]
    assert len(mine) == 4 and all(r.authorized for r in mine)
    cdn = [r for r in hub_server.cdn_log if _sha256(data) in r.path]
    assert len(cdn) == 2 and not any(r.authorized for r in cdn)


def test_a_cut_mid_body_resumes_at_the_byte_offset_on_the_cdn(
    hub_server: HubStandIn, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(hub_server.cdn_url)
    repo = _repo(hub_server, cdn_origin=proxy.url)
    data = os.urandom(1_500_000)
    hub_server.add_file(repo, "cuts/shard.tar", data)
    cuts = [300, 5000, 65_536, 300_000, 700_001]
    proxy.plan(*(Cut(c) for c in cuts))
    hub_server.clear_logs()
    with _Closing(HFSource(endpoint=hub_server.endpoint, token=False, retries=20)) as source:
        with source.open(f"hf://datasets/{repo}/cuts/shard.tar") as stream:
            got = _read_all(stream, 100_003)
            retries = stream.retries  # type: ignore[attr-defined]
    assert got == data
    assert len(cuts) - 1 <= retries <= len(cuts)
    blob = f"/blobs/{_sha256(data)}"
    assert proxy.gets(blob) == retries + 1
    starts = [int(r.headers.get("range", "bytes=0-").split("=")[1].split("-")[0]) for r in hub_server.cdn_log]
    assert starts[0] == 0 and starts == sorted(starts) and all(0 < s < len(data) for s in starts[1:])
    assert len(_resolves(hub_server, repo)) == 1  # resumes went straight to the cached CDN URL


def test_an_expired_or_revoked_cdn_url_is_resolved_again(tmp_path: Path) -> None:
    with HubStandIn(tmp_path / "hub") as hub:
        data = os.urandom(50_000)
        hub.add_file("org/ds", "a.bin", data)
        url = "hf://datasets/org/ds/a.bin"
        with _Closing(HFSource(endpoint=hub.endpoint, token=False)) as source:
            assert source.open(url).read() == data
            assert source.open(url).read() == data
            assert len(_resolves(hub, "org/ds")) == 1
            hub.rotate_signing_key()  # the cached URL is refused (403) by the CDN: resolved once more
            assert source.open(url, offset=7, length=3).read() == data[7:10]
            assert len(_resolves(hub, "org/ds")) == 2 and len(hub.cdn_log) == 4
        hub.url_ttl = 2  # URLs signed from now on say Expires=now+2
        hub.clear_logs()
        with _Closing(HFSource(endpoint=hub.endpoint, token=False)) as source:
            assert source.open(url).read() == data
            time.sleep(2.1)  # past the URL's Expires: not even tried at the CDN
            assert source.open(url).read() == data
        assert len(_resolves(hub, "org/ds")) == 2 and len(hub.cdn_log) == 2


def test_a_file_replaced_while_read_is_object_changed(
    hub_server: HubStandIn, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(hub_server.cdn_url)
    repo = _repo(hub_server, cdn_origin=proxy.url)
    hub_server.add_file(repo, "s.tar", os.urandom(400_000))
    proxy.plan(Cut(250_000))
    with _Closing(HFSource(endpoint=hub_server.endpoint, token=False, retries=5)) as source:
        stream = source.open(f"hf://datasets/{repo}/s.tar")
        assert len(stream.read(100_000)) == 100_000
        hub_server.add_file(repo, "s.tar", os.urandom(400_000))  # a new commit on main
        hub_server.rotate_signing_key()
        with pytest.raises(ObjectChangedError, match="changed while it was being read"):
            stream.read()
        stream.close()


def test_transient_answers_of_hub_and_cdn_are_retried(hub_server: HubStandIn) -> None:
    repo = _repo(hub_server)
    data = os.urandom(10_000)
    hub_server.add_file(repo, "t.bin", data)
    url = f"hf://datasets/{repo}/t.bin"
    with _Closing(HFSource(endpoint=hub_server.endpoint, token=False, retries=4)) as source:
        hub_server.fail_next("hub", 503)
        hub_server.fail_next("cdn", 500)
        with source.open(url) as stream:
            assert stream.read() == data
            assert stream.retries == 2  # type: ignore[attr-defined]
        hub_server.fail_next("hub", 429)
        assert source.stat(url).size == len(data)
        hub_server.fail_next("hub", 502)
        assert [k.key for k in source.list_objects(f"hf://datasets/{repo}/")] == ["t.bin"]


# -- errors -----------------------------------------------------------------------------------------


def test_private_and_gated_repos_say_what_to_do(
    hub_server: HubStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    private = _repo(hub_server, private=True)
    gated = _repo(hub_server, gated=True)
    for repo in (private, gated):
        hub_server.add_file(repo, "a.bin", b"x" * 100)
    hub_server.add_token("hf_other_user_token", repos=[])
    anonymous = HFSource(endpoint=hub_server.endpoint, token=False)
    other = HFSource(endpoint=hub_server.endpoint, token="hf_other_user_token")
    wrong = HFSource(endpoint=hub_server.endpoint, token="hf_not_a_token")
    cases = [
        (anonymous, private, "private or gated: set HF_TOKEN"),
        (anonymous, gated, "gated: accept its conditions on"),
        (other, gated, "gated: accept its conditions on"),
        (wrong, private, "the token was refused"),
    ]
    with caplog.at_level(logging.DEBUG, logger="shardstream"):
        for source, repo, message in cases:
            url = f"hf://datasets/{repo}/a.bin"
            for call in (source.open, source.stat):
                with pytest.raises(AccessDeniedError, match=message) as info:
                    call(url)
                assert url in str(info.value)
            with pytest.raises(AccessDeniedError, match=message):
                list(source.list_objects(f"hf://datasets/{repo}/"))
        with pytest.raises(ShardNotFoundError, match="does not exist, or the token has no access"):
            other.open(f"hf://datasets/{private}/a.bin")
    shown = caplog.text + repr(other) + repr(wrong)
    assert "hf_other_user_token" not in shown and "hf_not_a_token" not in shown
    for source in (anonymous, other, wrong):
        source.close()


def test_missing_file_repo_and_revision_are_not_found_naming_which(hub_server: HubStandIn) -> None:
    repo = _repo(hub_server)
    hub_server.add_file(repo, "a.bin", b"x")
    cases = [
        (f"hf://datasets/{repo}/nope.bin", "there is no 'nope.bin' at revision 'main'"),
        (f"hf://datasets/{repo}@v9/a.bin", "has no revision 'v9'"),
        ("hf://datasets/org/no-such-repo/a.bin", "dataset repo 'org/no-such-repo' does not exist"),
        (f"hf://{repo}/a.bin", f"model repo '{repo}' does not exist"),  # a dataset read as a model
    ]
    with _Closing(HFSource(endpoint=hub_server.endpoint, token=hub_server.token)) as source:
        for url, message in cases:
            for call in (source.open, source.stat):
                with pytest.raises(ShardNotFoundError, match=message) as info:
                    call(url)
                assert url in str(info.value)
        with pytest.raises(ShardNotFoundError, match="there is no folder 'missing' at revision 'main'"):
            list(source.list_objects(f"hf://datasets/{repo}/missing/"))


def test_revisions_with_a_slash_round_trip(hub_server: HubStandIn) -> None:
    repo = _repo(hub_server)
    hub_server.add_file(repo, "d/a.bin", b"main")
    for branch, body in (("refs/pr/1", b"pull request"), ("feature/x", b"feature")):
        hub_server.add_branch(repo, branch)
        hub_server.add_file(repo, "d/a.bin", body, revision=branch)
    commit = hub_server.commit_of(repo, "refs/pr/1")
    with _Closing(HFSource(endpoint=hub_server.endpoint, token=False)) as source:
        read = {
            rev: source.open(f"hf://datasets/{repo}{rev}/d/a.bin").read()
            for rev in ("", "@main", "@refs/pr/1", "@refs%2Fpr%2F1", "@feature%2Fx", f"@{commit}")
        }
        assert read == {
            "": b"main",
            "@main": b"main",
            "@refs/pr/1": b"pull request",
            "@refs%2Fpr%2F1": b"pull request",
            "@feature%2Fx": b"feature",
            f"@{commit}": b"pull request",
        }
        listed = list(source.list_objects(f"hf://datasets/{repo}@refs/pr/1/d/"))
        assert [(k.key, k.size) for k in listed] == [("a.bin", len(b"pull request"))]
    assert any("/resolve/refs%2Fpr%2F1/d/a.bin" in r.path for r in hub_server.hub_log)
    assert any("/resolve/feature%2Fx/d/a.bin" in r.path for r in hub_server.hub_log)


# -- listing ----------------------------------------------------------------------------------------


def test_listing_a_folder_with_nested_files_over_several_pages(
    hub_server: HubStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub_server, "page_size", 3)
    repo = _repo(hub_server, private=True)
    files = {f"train/{d}/{i:03d}.tar": os.urandom(100 + i) for d in ("a", "b/c") for i in range(4)}
    files["train/top.tar"] = b"top"
    files["test/other.tar"] = b"not listed"
    for path, data in files.items():
        hub_server.add_file(repo, path, data, lfs=path != "train/top.tar")
    hub_server.clear_logs()
    with _Closing(HFSource(endpoint=hub_server.endpoint, token=hub_server.token)) as source:
        listed = sorted(source.list_objects(f"hf://datasets/{repo}/train/"), key=lambda k: k.key)
        every = {k.key for k in source.list_objects(f"hf://datasets/{repo}/")}
    expected = sorted((p[len("train/") :], len(d)) for p, d in files.items() if p.startswith("train/"))
    assert [(k.key, k.size) for k in listed] == expected
    assert all(k.etag == _sha256(files["train/" + k.key]) for k in listed if k.key != "top.tar")
    assert every == set(files)
    pages = [r for r in hub_server.hub_log if "/tree/" in r.path]
    assert len(pages) >= 2 + 3 and all(r.authorized for r in pages)  # (9 files + 4 folders) / 3 a page


def test_objects_listing_uses_the_hf_listing(hub_server: HubStandIn) -> None:
    from shardstream.objects._listing import list_prefix

    repo = _repo(hub_server)
    for i in range(3):
        hub_server.add_file(repo, f"img/{i}.jpg", bytes([i]) * (i + 1))
    manifest = list_prefix(f"hf://datasets/{repo}/img/", {"endpoint": hub_server.endpoint, "token": False})
    assert list(manifest.keys) == ["0.jpg", "1.jpg", "2.jpg"] and list(manifest.sizes) == [1, 2, 3]


# -- configuration ----------------------------------------------------------------------------------


def test_token_and_endpoint_from_the_environment(
    hub_server: HubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(hub_server, private=True)
    hub_server.add_file(repo, "a.bin", b"secret bytes")
    url = f"hf://datasets/{repo}/a.bin"
    monkeypatch.setenv("HF_ENDPOINT", hub_server.endpoint)

    def read(**options: Any) -> bytes:
        with _Closing(HFSource(**options)) as source, source.open(url) as stream:
            assert hub_server.token not in repr(source) and source.endpoint == hub_server.endpoint
            return stream.read()

    with pytest.raises(AccessDeniedError):
        read()
    token_file = tmp_path / "token"
    token_file.write_text(hub_server.token + "\n")
    monkeypatch.setenv("HF_TOKEN_PATH", str(token_file))  # the file `hf auth login` writes
    assert read() == b"secret bytes"
    with pytest.raises(AccessDeniedError):
        read(token=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    with pytest.raises(AccessDeniedError):
        read()
    assert read(token=True) == b"secret bytes"
    monkeypatch.delenv("HF_HUB_DISABLE_IMPLICIT_TOKEN")
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "none"))
    monkeypatch.setenv("HF_TOKEN", hub_server.token)
    assert read() == b"secret bytes"


def test_dataset_reads_shards_from_the_hub(hub_server: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(hub_server, private=True)
    expected = []
    for shard in range(3):
        buf = io.BytesIO()
        with TarWriter(buf) as writer:
            for i in range(4):
                key = f"s{shard}_{i}"
                writer.write({"__key__": key, "txt": f"text {shard} {i}"})
                expected.append((key, f"text {shard} {i}"))
        hub_server.add_file(repo, f"train-{shard:06d}.tar", buf.getvalue())
    monkeypatch.setenv("HF_ENDPOINT", hub_server.endpoint)
    monkeypatch.setenv("HF_TOKEN", hub_server.token)
    forget_sources("hf")  # a shared hf source built under another environment must not serve this
    try:
        dataset = shardstream.ShardStream(
            f"hf://datasets/{repo}/train-{{000000..000002}}.tar", shuffle_shards=False
        )
        got = [
            (s["__key__"], s["txt"].decode() if isinstance(s["txt"], bytes) else s["txt"]) for s in dataset
        ]
        assert sorted(got) == sorted(expected)
        assert isinstance(get_source("hf://datasets/x/y/z"), HFSource)
    finally:
        for source in forget_sources("hf"):
            source.close()


# -- faithfulness: huggingface_hub's own client against the stand-in --------------------------------


@pytest.fixture
def hfh(tmp_path: Path) -> Iterator[Any]:
    """``huggingface_hub`` with its telemetry and Xet off (also set as constants: it reads them at import)."""
    import huggingface_hub
    from huggingface_hub import constants

    for name in ("HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DISABLE_XET"):
        if hasattr(constants, name):
            setattr(constants, name, True)
    yield huggingface_hub


def test_hf_hub_download_gets_the_exact_bytes(hub_server: HubStandIn, hfh: Any, tmp_path: Path) -> None:
    repo = _repo(hub_server, private=True)
    big, small = os.urandom(1_000_003), b'{"small": "json"}'
    hub_server.add_file(repo, "data/big.tar", big)
    hub_server.add_file(repo, "config.json", small, lfs=False)
    hub_server.add_branch(repo, "refs/pr/1")
    hub_server.add_file(repo, "data/big.tar", b"pr version", revision="refs/pr/1")
    hub_server.clear_logs()

    def download(filename: str, revision: str | None = None) -> bytes:
        path = hfh.hf_hub_download(
            repo,
            filename,
            repo_type="dataset",
            revision=revision,
            token=hub_server.token,
            endpoint=hub_server.endpoint,
            cache_dir=str(tmp_path / "cache"),
        )
        return Path(path).read_bytes()

    assert download("data/big.tar") == big
    assert download("config.json") == small
    assert download("data/big.tar", revision="refs/pr/1") == b"pr version"
    assert download("data/big.tar", revision=hub_server.commit_of(repo, "refs/pr/1")) == b"pr version"
    assert hub_server.cdn_log and not any(r.authorized for r in hub_server.cdn_log)
    assert all(r.authorized for r in hub_server.hub_log if repo in r.path)


def test_hffilesystem_lists_globs_and_reads_ranges(
    hub_server: HubStandIn, hfh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub_server, "page_size", 2)
    repo = _repo(hub_server)
    files = {"train/a.tar": os.urandom(70_000), "train/sub/b.tar": os.urandom(500), "README.md": b"# readme"}
    for path, data in files.items():
        hub_server.add_file(repo, path, data, lfs=path.endswith(".tar"))
    fs = hfh.HfFileSystem(endpoint=hub_server.endpoint, token=hub_server.token, skip_instance_cache=True)
    root = f"datasets/{repo}"
    assert sorted(fs.ls(root, detail=False)) == [f"{root}/README.md", f"{root}/train"]
    assert sorted(fs.find(root)) == sorted(f"{root}/{p}" for p in files)
    assert sorted(fs.glob(f"{root}/**/*.tar")) == [f"{root}/train/a.tar", f"{root}/train/sub/b.tar"]
    assert fs.info(f"{root}/train/a.tar")["size"] == 70_000
    with fs.open(f"{root}/train/a.tar", "rb", block_size=4096) as f:
        f.seek(12_345)
        assert f.read(1000) == files["train/a.tar"][12_345:13_345]
    with fs.open(f"{root}/train/a.tar", "rb") as f:
        assert f.read() == files["train/a.tar"]
    assert fs.cat(f"{root}/README.md") == b"# readme"
    # and our listing agrees with huggingface_hub's over the same pages
    ours = HFSource(endpoint=hub_server.endpoint, token=False)
    assert {k.key for k in ours.list_objects(f"hf://{root}/")} == set(files)
    ours.close()


def test_huggingface_hub_fails_as_against_the_hub(hub_server: HubStandIn, hfh: Any, tmp_path: Path) -> None:
    from huggingface_hub import errors

    private = _repo(hub_server, private=True)
    gated = _repo(hub_server, gated=True)
    for repo in (private, gated):
        hub_server.add_file(repo, "a.bin", b"x")
    hub_server.add_token("hf_no_access_token", repos=[])

    def download(repo: str, filename: str = "a.bin", token: Any = False, revision: str | None = None) -> Any:
        return hfh.hf_hub_download(
            repo,
            filename,
            repo_type="dataset",
            revision=revision,
            token=token,
            endpoint=hub_server.endpoint,
            cache_dir=str(tmp_path / "cache"),
        )

    with pytest.raises(errors.RepositoryNotFoundError):
        download(private)
    with pytest.raises(errors.RepositoryNotFoundError):
        download(private, token="hf_no_access_token")
    with pytest.raises(errors.GatedRepoError):
        download(gated)
    with pytest.raises(errors.GatedRepoError):
        download(gated, token="hf_no_access_token")
    with pytest.raises(errors.RevisionNotFoundError):
        download(private, token=hub_server.token, revision="no-such-branch")
    with pytest.raises(errors.EntryNotFoundError):
        download(private, "missing.bin", token=hub_server.token)
    api = hfh.HfApi(endpoint=hub_server.endpoint, token=hub_server.token)
    info = api.dataset_info(private)
    assert info.sha == hub_server.commit_of(private) and [s.rfilename for s in info.siblings] == ["a.bin"]
    with pytest.raises(errors.RepositoryNotFoundError):
        hfh.HfApi(endpoint=hub_server.endpoint, token=False).dataset_info(private)
