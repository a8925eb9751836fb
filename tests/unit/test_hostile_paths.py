"""Names from data never become paths outside their destination (issue 43): ``unpack``, ``pack``,
the writers, an index's offsets sidecars and the cache's names, fed hostile shards and URLs.

Hostile shards are built with the stdlib ``tarfile`` (our writers refuse such keys). Each test
snapshots every path under ``tmp_path`` and checks that nothing appeared outside the destination.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import random
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from shardstream.cache.layout import Layout
from shardstream.cache.naming import cache_name, check_name, url_to_cache_name
from shardstream.cache.store import ShardCache
from shardstream.cli.__main__ import main
from shardstream.cli._pack import unpack
from shardstream.errors import ConfigurationError, UnsafePathError
from shardstream.paths import check_relative_path
from shardstream.tar.index import write_index
from shardstream.tar.sharded_writer import ShardWriter
from shardstream.tar.writer import TarWriter

#: Member names that must not become files: climbing out, absolute (filled in with a path under
#: tmp_path, see _member), an empty component, and NUL (only a PAX header can carry it).
HOSTILE = {
    "dotdot": "../../evil.txt",
    "inner-dotdot": "sub/../../../evil.txt",
    "absolute": "{root}/abs-evil.txt",
    "empty-component": "a//evil.txt",
    "nul": "ev\0il.txt",
}


def _files(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def _write_tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    """A tar of regular members ``(name, data)`` (names set through PAX, exactly as given) and
    link members ``TarInfo``, in order."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
                continue
            name, data = member
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.pax_headers = {"path": name}  # kept whole: no ustar truncation at NUL
            tar.addfile(info, io.BytesIO(data))
    return path


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _hostile_shard(root: Path, case: str) -> tuple[Path, str]:
    """``root/shards/{case}.tar``: a good sample, links pointing out of any destination, then the
    hostile member. Returns the shard and the hostile member's name."""
    name = HOSTILE[case].format(root=root)
    (root / "shards").mkdir(parents=True, exist_ok=True)
    shard = _write_tar(
        root / "shards" / f"{case}.tar",
        [
            ("good.txt", b"fine"),
            _link("link.txt", str(root / "linked"), tarfile.SYMTYPE),
            _link("hard.txt", "../../../hard-target", tarfile.LNKTYPE),
            (name, b"evil"),
        ],
    )
    return shard, name


def _assert_nothing_outside(tmp_path: Path, before: set[Path], dst: Path) -> None:
    # dst itself and the directories above it may be made; nothing else outside dst
    new = {p for p in _files(tmp_path) - before if dst not in p.parents and p != dst and p not in dst.parents}
    assert not new, f"written outside {dst}: {sorted(map(str, new))}"
    links = [p for p in _files(dst) if p.is_symlink() or (p.is_file() and p.stat().st_nlink > 1)]
    assert not links, f"links created: {links}"  # the shards' link members are never extracted


# -- unpack ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_unpack_refuses_a_hostile_member_and_writes_nothing_outside(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    shard, name = _hostile_shard(root, case)
    dst = root / "deep" / "out"  # "../../evil.txt" from here is root/evil.txt
    before = _files(tmp_path)
    assert main(["unpack", str(shard), str(dst)]) == 1
    err = capsys.readouterr().err
    assert f"member {name!r} in {shard}" in err  # the member and the shard
    assert "rename the sample" in err and "re-pack the shard" in err  # the fix
    _assert_nothing_outside(tmp_path, before, dst)
    assert (dst / "good.txt").read_bytes() == b"fine"  # the samples before it were written


def test_unpack_error_names_the_key_and_keeps_credentials_out(tmp_path: Path, http_server: Any) -> None:
    shard, _ = _hostile_shard(tmp_path / "root", "dotdot")
    (Path(http_server.root) / "hostile-43.tar").write_bytes(shard.read_bytes())
    host = http_server.url.removeprefix("http://")
    url = f"http://user:s3cr3t@{host}/hostile-43.tar?X-Amz-Signature=zz"  # the server ignores both
    with pytest.raises(UnsafePathError) as info:
        unpack(url, str(tmp_path / "out"))
    message = str(info.value)
    assert "member '../../evil.txt'" in message and "__key__ '../../evil'" in message
    assert "s3cr3t" not in message and "=zz" not in message
    assert f"http://***@{host}/hostile-43.tar?X-Amz-Signature=***" in message
    assert info.value.name == "../../evil.txt" and isinstance(info.value, ValueError)
    again = pickle.loads(pickle.dumps(info.value))  # travels from a worker process or a Ray task
    assert str(again) == message and again.name == info.value.name and again.url == info.value.url


def test_unpack_cli_process_refuses_traversal(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shard, name = _hostile_shard(root, "dotdot")
    dst = root / "deep" / "out"
    before = _files(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "shardstream.cli", "unpack", str(shard), str(dst)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert f"member {name!r} in {shard} has a '..' component" in result.stderr
    assert "re-pack the shard" in result.stderr
    _assert_nothing_outside(tmp_path, before, dst)


# -- pack and the writers ----------------------------------------------------------------------------

BAD_KEYS = ["../../evil", "/etc/evil", "a//b", "sub/../../evil", "x\0y", "a/"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_writers_refuse_unsafe_keys(tmp_path: Path, key: str) -> None:
    target = tmp_path / "out" / "one.tar"
    target.parent.mkdir()
    before = _files(tmp_path)
    with pytest.raises(UnsafePathError) as info, TarWriter(str(target)) as sink:
        sink.write({"__key__": key, "txt": "x"})
    message = str(info.value)
    assert f"sample __key__ {key!r} in {target}" in message and "relative key" in message
    assert _files(tmp_path) == before  # the shard cut short is not published
    with pytest.raises(UnsafePathError), ShardWriter(str(tmp_path / "out" / "s-%06d.tar")) as writer:
        writer.write({"__key__": "ok", "txt": "x"})
        writer.write({"__key__": key, "txt": "x"})


def test_writer_refuses_a_field_that_makes_the_member_unsafe() -> None:
    with pytest.raises(UnsafePathError, match=r"field 'x/\.\./\.\./y\.txt' of sample 'k'"):
        TarWriter(io.BytesIO()).encode({"__key__": "k", "x/../../y.txt": b"data"})
    with pytest.raises(UnsafePathError, match="NUL"):
        TarWriter(io.BytesIO()).encode({"__key__": "k", "t\0xt": b"data"})


def test_pack_refuses_a_prefix_that_climbs_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "root" / "objects"
    src.mkdir(parents=True)
    (src / "a.txt").write_bytes(b"a")
    dst = tmp_path / "root" / "deep" / "shards"
    before = _files(tmp_path)
    assert main(["pack", str(src), str(dst), "--prefix", "../../evil"]) == 1
    err = capsys.readouterr().err
    assert "--prefix makes the shard name '../../evil-000000.tar'" in err and "DST" in err
    _assert_nothing_outside(tmp_path, before, dst)


# -- index sidecars --------------------------------------------------------------------------------


def test_an_index_entry_cannot_put_its_sidecar_outside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "root" / "deep" / "data"
    data.mkdir(parents=True)
    # An index with offsets inline (version 1 allows it): rewriting it moves them to
    # _offsets/{url}.bin, here root/evil.tar.bin.
    hostile = {"url": "../../../evil.tar", "samples": 1, "bytes": 2048, "offsets": [0], "sizes": [1024]}
    index = {"format": "shardstream-index", "version": 1, "shards": [hostile]}
    (data / "_info.json").write_text(json.dumps(index))
    before = _files(tmp_path)
    with pytest.raises(UnsafePathError) as info:
        write_index(str(data), [])
    message = str(info.value)
    assert f"index entry '../../../evil.tar' in {data} has a '..' component" in message
    assert f"shardstream index {data}" in message
    # ShardWriter merges its shards into that index: the refusal is its "could not write the
    # index" warning, and the shards stay.
    with ShardWriter(str(data / "d-%06d.tar"), mtime=0) as sink:
        sink.write({"__key__": "k", "txt": "x"})
    assert "could not write the shard index" in caplog.text and "'../../../evil.tar'" in caplog.text
    _assert_nothing_outside(tmp_path, before, data)


# -- the cache's names -------------------------------------------------------------------------------

#: Pieces of URL paths and hosts that an escape would be made of, raw and percent-encoded.
_PIECES = [
    "..", ".", "", "/", "//", "\\", "..\\..", "%2e%2e", "%2E%2E%2F", "%2F", "%00", "\0", "~", "?", "#",
    "?x=1", "#frag", "@", ":", ".shardstream", "a", "b.tar", " ", "%", "%25", "é", "..%2f", "....",
]  # fmt: skip
_SCHEMES = ["s3", "gs", "http", "https", "file", "hf", "az", "abfs", "pipe:curl ", "", "x-y"]


def _fuzz_urls(n: int) -> list[str]:
    rng = random.Random(43)
    urls = []
    for _ in range(n):
        scheme = rng.choice(_SCHEMES)
        host = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 2)))
        path = "/".join("".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 3))) for _ in range(4))
        head = f"{scheme}://{host}/" if scheme and not scheme.startswith("pipe") else ""
        if scheme.startswith("pipe"):
            head = f"{scheme}http://{host}/"
        urls.append(head + path)
    return urls


def test_no_url_gives_a_cache_name_outside_the_cache(tmp_path: Path) -> None:
    # cache_name percent-encodes separators, escapes "." and "..", and hashes queries and pipe
    # commands: whatever the URL, the name is a safe relative path inside the cache's root.
    layout = Layout(str(tmp_path / "cache"))
    for url in _fuzz_urls(4000):
        name = cache_name(url)
        check_relative_path(name, what="cache name", url=url, fix="-")
        path = os.path.normpath(layout.data(name))
        assert os.path.dirname(path).startswith(layout.root) and path != layout.root, (url, name)
        assert not any(p.startswith(".") for p in name.split("/")), (url, name)  # not bookkeeping


def test_url_to_name_results_are_checked_by_the_one_function(tmp_path: Path) -> None:
    for bad in ("a\0b.tar", "x/", "a//b.tar"):
        with pytest.raises(UnsafePathError, match="url_to_name returned"):
            check_name(bad, "s3://b/x.tar")
    cache = ShardCache(str(tmp_path / "cache"), url_to_name=lambda url: "shards\0x.tar")
    with pytest.raises(UnsafePathError):
        cache.path_for("s3://b/x.tar")
    with pytest.raises(ConfigurationError, match="dot-prefixed"):
        check_name(".shardstream/x", "s3://b/x.tar")  # the cache's own rule, on top


def test_webdataset_cache_naming_refuses_names_that_climb_out() -> None:
    # The last ndir + 1 components of the path: "a//b.tar" with ndir=1 gave "/b.tar", which
    # os.path.join(cache_dir, name) turns into /b.tar.
    climbing = [("http://h/a//b.tar", 1), ("http://h/x/../..", 1), ("s3://b/..", 0), ("/p/../q.tar", 1)]
    for url, ndir in climbing:
        with pytest.raises(UnsafePathError) as info:
            url_to_cache_name(url, ndir)
        assert "url_to_cache_name" in str(info.value) and url in str(info.value)
    assert url_to_cache_name("http://example.com/") == ""  # WebDataset's value for no path, kept
    assert url_to_cache_name("http://h/path/to/file.txt", ndir=1) == "to/file.txt"
