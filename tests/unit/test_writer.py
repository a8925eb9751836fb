"""Tests for TarWriter, ShardWriter and the _info.json index."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from shardstream.errors import ConfigurationError, UnsafeOperationError
from shardstream.sources.memory import memory_store
from shardstream.tar.index import INDEX_NAME, read_index, read_index_entries, write_index
from shardstream.tar.sharded_writer import ShardWriter
from shardstream.tar.writer import END_OF_ARCHIVE, TarWriter, check_key


def _members(path: Path | str) -> list[tuple[str, bytes]]:
    with tarfile.open(path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]


def _sample(i: int, payload: int = 10) -> dict[str, object]:
    return {"__key__": f"s{i:05d}", "txt": f"text {i}", "cls": i, "bin": bytes([i % 256]) * payload}


def test_tarwriter_members_sorted_and_readable(tmp_path: Path) -> None:
    path = tmp_path / "a.tar"
    with TarWriter(str(path)) as writer:
        writer.write({"__key__": "dir.v1/k0", "txt": "héllo", "cls": 3, "seg.png": b"\x89PNG"})
    assert _members(path) == [
        ("dir.v1/k0.cls", b"3"),
        ("dir.v1/k0.seg.png", b"\x89PNG"),
        ("dir.v1/k0.txt", "héllo".encode()),
    ]


def test_write_returns_bytes_and_size_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "a.tar"
    total = 0
    with TarWriter(str(path)) as writer:
        for i in range(5):
            total += writer.write(_sample(i, payload=700))
    # per sample: three 512-byte headers, txt and cls padded to 512, 700 bytes padded to 1024
    assert total == 5 * (3 * 512 + 512 + 512 + 1024)
    assert path.stat().st_size == total + END_OF_ARCHIVE


def test_deterministic_output(tmp_path: Path) -> None:
    outputs = []
    for name in ("one.tar", "two.tar"):
        with TarWriter(str(tmp_path / name)) as writer:
            for i in range(3):
                writer.write(_sample(i))
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    with tarfile.open(tmp_path / "one.tar") as tar:
        info = tar.getmembers()[0]
    assert (info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode) == (
        0,
        0,
        0,
        "bigdata",
        "bigdata",
        0o444,
    )


def test_deterministic_gzip_output(tmp_path: Path) -> None:
    outputs = []
    for name in ("one.tar.gz", "two.tar.gz"):
        with TarWriter(str(tmp_path / name)) as writer:
            writer.write(_sample(1))
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    assert outputs[0][:2] == b"\x1f\x8b"
    assert _members(tmp_path / "one.tar.gz")[0] == ("s00001.bin", b"\x01" * 10)


def test_explicit_mtime_and_owner(tmp_path: Path) -> None:
    path = tmp_path / "a.tar"
    with TarWriter(str(path), user="alice", group="staff", mode=0o640, mtime=1234567.8) as writer:
        writer.write({"__key__": "k", "txt": "x"})
    with tarfile.open(path) as tar:
        info = tar.getmembers()[0]
    assert (info.mtime, info.uname, info.gname, info.mode) == (1234567, "alice", "staff", 0o640)


def test_long_names_use_pax(tmp_path: Path) -> None:
    key = "d" * 80 + "/" + "k" * 120
    path = tmp_path / "long.tar"
    with TarWriter(str(path)) as writer:
        writer.write({"__key__": key, "txt": "long"})
        writer.write({"__key__": "short", "txt": "s"})
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [key + ".txt", "short.txt"]
        assert members[0].pax_headers.get("path") == key + ".txt"
    # the short name's header is plain ustar
    raw = path.read_bytes()
    assert raw.count(b"ustar\x0000") >= 2


def test_ustar_format_rejects_long_names_clearly(tmp_path: Path) -> None:
    with TarWriter(io.BytesIO(), format="ustar") as writer:
        with pytest.raises(ConfigurationError, match="format=None"):
            writer.write({"__key__": "k" * 200, "txt": "x"})


@pytest.mark.parametrize("key", ["img.001", "a/b.c", "x."])
def test_dotted_keys_rejected(key: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_key(key)
    assert repr(key) in str(info.value)
    assert "dot" in str(info.value)
    with TarWriter(io.BytesIO()) as writer, pytest.raises(ValueError, match="dot"):
        writer.write({"__key__": key, "txt": "x"})


def test_dots_in_directories_are_fine() -> None:
    assert check_key("train.v2/000001") == "train.v2/000001"


@pytest.mark.parametrize("bad", [None, 3, b"bytes", ""])
def test_bad_key_types(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="__key__"):
        check_key(bad)


def test_missing_key_is_clear_error() -> None:
    with (
        TarWriter(io.BytesIO()) as writer,
        pytest.raises(ConfigurationError, match=r"\['txt'\] has no '__key__'"),
    ):
        writer.write({"txt": "x"})


def test_unencodable_field_names_field() -> None:
    with TarWriter(io.BytesIO()) as writer, pytest.raises(ValueError, match="'weird'"):
        writer.write({"__key__": "k", "weird": object()})
    with TarWriter(io.BytesIO(), encoder=False) as writer, pytest.raises(ConfigurationError, match="'cls'"):
        writer.write({"__key__": "k", "cls": 3})


def test_pickle_needs_opt_in(tmp_path: Path) -> None:
    with TarWriter(io.BytesIO()) as writer, pytest.raises(UnsafeOperationError, match="allow_pickle=True"):
        writer.write({"__key__": "k", "pyd": {"a": 1}})
    path = tmp_path / "p.tar"
    with TarWriter(str(path), allow_pickle=True) as writer:
        writer.write({"__key__": "k", "pyd": {"a": 1}})
    assert _members(path)[0][0] == "k.pyd"


def test_keep_meta(tmp_path: Path) -> None:
    path = tmp_path / "m.tar"
    with TarWriter(str(path), keep_meta=True) as writer:
        writer.write({"__key__": "k", "_meta": "m", "txt": "x"})
    assert [n for n, _ in _members(path)] == ["k._meta", "k.txt"]
    path2 = tmp_path / "n.tar"
    with TarWriter(str(path2)) as writer:
        writer.write({"__key__": "k", "_meta": "m", "txt": "x"})
    assert [n for n, _ in _members(path2)] == ["k.txt"]


def test_stream_target_left_open_and_memory_url() -> None:
    stream = io.BytesIO()
    writer = TarWriter(stream)
    writer.write({"__key__": "k", "txt": "x"})
    writer.close()
    writer.close()  # idempotent
    assert not stream.closed
    assert tarfile.open(fileobj=io.BytesIO(stream.getvalue())).getnames() == ["k.txt"]
    with TarWriter("memory://writer-test/a.tar") as writer:
        writer.write({"__key__": "k", "txt": "x"})
    data = memory_store.pop("memory://writer-test/a.tar")
    assert tarfile.open(fileobj=io.BytesIO(data)).getnames() == ["k.txt"]


def test_write_after_close_fails() -> None:
    writer = TarWriter(io.BytesIO())
    writer.close()
    with pytest.raises(ConfigurationError, match="closed"):
        writer.write({"__key__": "k", "txt": "x"})


def test_gz_field_is_compressed_deterministically(tmp_path: Path) -> None:
    path = tmp_path / "g.tar"
    with TarWriter(str(path)) as writer:
        writer.write({"__key__": "k", "json.gz": {"a": 1}})
    name, data = _members(path)[0]
    assert name == "k.json.gz"
    assert json.loads(gzip.decompress(data)) == {"a": 1}
    assert data[4:8] == b"\0\0\0\0"  # gzip mtime


# ---------------------------------------------------------------- ShardWriter


def test_shardwriter_maxcount_and_index(tmp_path: Path) -> None:
    finished: list[str] = []
    pattern = str(tmp_path / "out" / "train-%04d.tar")
    with ShardWriter(pattern, maxcount=4, post=finished.append) as sink:
        for i in range(10):
            sink.write(_sample(i))
    names = [pattern % i for i in range(3)]
    assert finished == names
    assert [len(_members(n)) // 3 for n in names] == [4, 4, 2]
    assert read_index(str(tmp_path / "out")) == {
        "train-0000.tar": 4,
        "train-0001.tar": 4,
        "train-0002.tar": 2,
    }
    doc = json.loads((tmp_path / "out" / INDEX_NAME).read_text())
    assert doc["format"] == "shardstream-index" and doc["version"] == 1
    assert [s["bytes"] for s in doc["shards"]] == [os.path.getsize(n) for n in names]


def test_shardwriter_never_exceeds_maxsize(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    maxsize = 20_000
    pattern = str(tmp_path / "s-%03d.tar")
    sizes = [int(x) for x in rng.integers(100, 6000, size=60)]
    with ShardWriter(pattern, maxcount=1000, maxsize=maxsize) as sink:
        for i, size in enumerate(sizes):
            sink.write({"__key__": f"k{i:03d}", "bin": b"x" * size})
    shards = sorted(p for p in tmp_path.glob("s-*.tar"))
    assert len(shards) > 3
    seen = []
    for shard in shards:
        assert shard.stat().st_size <= maxsize, shard
        seen += [len(data) for _, data in _members(shard)]
    assert seen == sizes
    # each shard was full: the next sample would not have fit
    counts = read_index(str(tmp_path))
    assert sum(counts.values()) == 60


def test_shardwriter_oversized_sample_gets_own_shard(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pattern = str(tmp_path / "s-%03d.tar")
    with ShardWriter(pattern, maxsize=10_000) as sink:
        sink.write({"__key__": "small0", "bin": b"a" * 100})
        sink.write({"__key__": "huge", "bin": b"b" * 50_000})
        sink.write({"__key__": "small1", "bin": b"c" * 100})
    names = [[n for n, _ in _members(pattern % i)] for i in range(3)]
    assert names == [["small0.bin"], ["huge.bin"], ["small1.bin"]]
    assert os.path.getsize(pattern % 1) > 10_000
    assert os.path.getsize(pattern % 0) <= 10_000
    assert "huge" in caplog.text


def test_shardwriter_start_shard_and_opener(tmp_path: Path) -> None:
    opened: list[io.BytesIO] = []
    store: dict[str, bytes] = {}

    class Stream(io.BytesIO):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.target = name

        def close(self) -> None:
            store[self.target] = self.getvalue()
            super().close()

    def opener(name: str) -> io.BytesIO:
        stream = Stream(name)
        opened.append(stream)
        return stream

    with ShardWriter("x-%02d.tar", maxcount=1, start_shard=5, opener=opener) as sink:
        sink.write(_sample(0))
        sink.write(_sample(1))
    assert sorted(store) == ["x-05.tar", "x-06.tar"]
    assert all(s.closed for s in opened)
    assert not (tmp_path / INDEX_NAME).exists()


def test_shardwriter_bad_pattern() -> None:
    with pytest.raises(ConfigurationError, match="placeholder"):
        ShardWriter("no-placeholder.tar")


def test_index_merges_patterns_in_one_directory(tmp_path: Path) -> None:
    for split, n in (("train", 3), ("val", 2)):
        with ShardWriter(str(tmp_path / f"{split}-%03d.tar"), maxcount=2) as sink:
            for i in range(n):
                sink.write(_sample(i))
    assert read_index(str(tmp_path)) == {"train-000.tar": 2, "train-001.tar": 1, "val-000.tar": 2}
    assert read_index(str(tmp_path / INDEX_NAME)) == read_index(str(tmp_path) + "/")


def test_index_on_memory_url() -> None:
    with ShardWriter("memory://idx-test/part-%d.tar", maxcount=2) as sink:
        for i in range(3):
            sink.write(_sample(i))
    try:
        assert read_index("memory://idx-test") == {"part-0.tar": 2, "part-1.tar": 1}
    finally:
        for key in [k for k in memory_store if k.startswith("memory://idx-test")]:
            del memory_store[key]


def test_read_index_rejects_foreign_json(tmp_path: Path) -> None:
    (tmp_path / INDEX_NAME).write_text('{"shards": []}')
    with pytest.raises(ConfigurationError, match="not a shardstream index"):
        read_index(str(tmp_path))
    (tmp_path / INDEX_NAME).write_text('{"format": "shardstream-index", "version": 99, "shards": []}')
    with pytest.raises(ConfigurationError, match="version 99"):
        read_index_entries(str(tmp_path))
    write_index(str(tmp_path), [{"url": "a.tar", "samples": 1, "bytes": 2}])
    assert read_index(str(tmp_path)) == {"a.tar": 1}
