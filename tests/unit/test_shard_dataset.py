"""ShardDataset over local shards, and the offsets and sizes every writer records in _info.json.

Round trips: every sample of a written shard, read alone by its byte range, equals the sample
the streaming reader yields. Indexes built three ways (ShardWriter, ``shardstream index``, the
pass ShardDataset makes when an index lacks them) agree. Errors name the URL, key and offset.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from _components import require_module

import shardstream as ss
from shardstream.cli.__main__ import main
from shardstream.datasets._ranges import RangeReader, plan_runs
from shardstream.errors import ConfigurationError
from shardstream.sources import SchemeRouter
from shardstream.tar.index import read_index_entries
from shardstream.tar.sample_range import RangeMismatch, parse_sample


def _sample(i: int) -> dict[str, Any]:
    # Uneven sizes (some past one 512-byte block, one with a name long enough for a PAX header)
    # so that offsets and sizes are not all alike.
    key = f"k{i:05d}" if i % 17 else f"long/{'x' * 120}/k{i:05d}"
    return {"__key__": key, "txt": "t" * (i * 37 % 1500), "cls": i, "json": {"i": i}}


def _write(directory: Path, n: int = 120, per_shard: int = 40, **kw: Any) -> str:
    with ss.ShardWriter(str(directory / "part-%06d.tar"), maxcount=per_shard, **kw) as sink:
        for i in range(n):
            sink.write(_sample(i))
    return str(directory / f"part-{{000000..{-(-n // per_shard) - 1:06d}}}.tar")


def _streamed(spec: str) -> list[dict[str, Any]]:
    return list(ss.ShardStream(spec, shuffle_shards=False, cache=None))


def test_writer_records_offsets_and_sizes_and_every_range_is_its_sample(tmp_path: Path) -> None:
    spec = _write(tmp_path)
    entries = read_index_entries(str(tmp_path), offsets=True)
    for entry in entries:
        assert len(entry["offsets"]) == len(entry["sizes"]) == entry["samples"] == 40
        assert entry["offsets"][0] == 0
        assert sum(entry["sizes"]) + 1024 == entry["bytes"] == (tmp_path / entry["url"]).stat().st_size
    streamed = _streamed(spec)
    for entry in entries:
        data = (tmp_path / entry["url"]).read_bytes()
        url = str(tmp_path / entry["url"])
        for offset, size in zip(entry["offsets"], entry["sizes"], strict=True):
            sample = parse_sample(data[offset : offset + size], url, offset, local_path=url)
            assert sample in streamed
    ds = ss.ShardDataset(spec)
    assert len(ds) == 120
    assert ds.__getitems__(list(range(120))) == streamed
    assert [ds[i] for i in (119, 0, 57, -1)] == [streamed[119], streamed[0], streamed[57], streamed[-1]]


def test_index_command_writes_the_writers_offsets_and_sizes(tmp_path: Path) -> None:
    spec = _write(tmp_path)
    written = {e["url"]: e for e in read_index_entries(str(tmp_path), offsets=True)}
    os.remove(tmp_path / "_info.json")
    assert main(["index", spec]) == 0
    indexed = {e["url"]: e for e in read_index_entries(str(tmp_path), offsets=True)}
    assert set(indexed) == set(written)
    for name, entry in written.items():
        assert indexed[name]["offsets"] == entry["offsets"]
        assert indexed[name]["sizes"] == entry["sizes"]


def test_missing_offsets_are_built_in_one_pass_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = _write(tmp_path, index=False)
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        ds = ss.ShardDataset(spec)
    assert "3 of 3 shards have no per-sample offsets" in caplog.text
    assert "shardstream index" in caplog.text
    assert ds.__getitems__([5, 100, 41, 0]) == [_streamed(spec)[i] for i in (5, 100, 41, 0)]


def test_compressed_shards_are_refused_with_the_reason(tmp_path: Path) -> None:
    with ss.ShardWriter(str(tmp_path / "z-%06d.tar.gz"), maxcount=10) as sink:
        for i in range(5):
            sink.write(_sample(i))
    entry = read_index_entries(str(tmp_path), offsets=True)[0]
    assert "offsets" in entry and "sizes" not in entry  # ranges of a gzip stream cannot be read alone
    with pytest.raises(ConfigurationError, match="is compressed; random access reads a sample's byte range"):
        ss.ShardDataset(str(tmp_path / "z-000000.tar.gz"))


def test_a_stale_index_names_url_key_offset_and_the_fix(tmp_path: Path) -> None:
    spec = _write(tmp_path, n=40)
    index = (tmp_path / "_info.json").read_text()
    # The shard is rewritten with other samples; its old index stays.
    with ss.ShardWriter(str(tmp_path / "part-%06d.tar"), maxcount=40, index=False) as sink:
        for i in range(40):
            sink.write({"__key__": f"new{i:04d}", "bin": b"z" * (3000 + 3 * i)})
    (tmp_path / "_info.json").write_text(index)
    ds = ss.ShardDataset(spec)
    with pytest.raises(ConfigurationError) as err:
        ds[20]
    message = str(err.value)
    url, offset, size = ds.locate(20)
    assert url in message and f"bytes {offset}-{offset + size - 1}" in message
    assert "stale" in message and f"shardstream index {tmp_path}" in message
    assert "but those bytes are not one sample" in message


def test_parse_sample_refuses_ranges_that_are_not_one_sample(tmp_path: Path) -> None:
    _write(tmp_path, n=4, per_shard=4)
    entry = read_index_entries(str(tmp_path), offsets=True)[0]
    data = (tmp_path / entry["url"]).read_bytes()
    o, s = entry["offsets"], entry["sizes"]
    with pytest.raises(RangeMismatch, match="2\\+ keys") as two:
        parse_sample(data[o[1] : o[2] + s[2]], "x.tar", o[1])
    assert two.value.keys == ["k00001", "k00002"]
    with pytest.raises(RangeMismatch, match="no end-of-archive marker|truncated"):
        parse_sample(data[o[1] : o[1] + s[1] - 512], "x.tar", o[1])  # its last data block is cut
    with pytest.raises(RangeMismatch, match="checksum") as shifted:
        parse_sample(data[o[1] + 512 : o[2]], "x.tar", o[1] + 512)
    assert shifted.value.offset == o[1] + 512


def test_plan_runs_coalesces_neighbours_of_one_shard_only() -> None:
    requests = [("a", 100, 50), ("b", 150, 10), ("a", 0, 100), ("a", 160, 40), ("a", 400, 10)]
    runs = {(r.url, r.start, r.end): r.members for r in plan_runs(requests)}
    assert runs == {
        ("a", 0, 150): (2, 0),
        ("a", 160, 200): (3,),
        ("a", 400, 410): (4,),
        ("b", 150, 160): (1,),
    }
    wide = {(r.url, r.start, r.end) for r in plan_runs(requests, coalesce_gap=10)}
    assert wide == {("a", 0, 200), ("a", 400, 410), ("b", 150, 160)}


def test_range_reader_lru_is_bounded_in_bytes_and_survives_pickling(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 40)
    reader = RangeReader(SchemeRouter(), lru_bytes=250)
    url = str(path)
    assert reader.read([(url, 0, 100), (url, 1000, 100)]) == [bytes(range(100)), path.read_bytes()[1000:1100]]
    assert reader.read([(url, 1000, 100)]) and reader.stats.lru_hits == 1
    reader.read([(url, 2000, 100)])  # 300 bytes held > 250: the oldest range goes
    reader.read([(url, 0, 100)])
    assert reader.stats.lru_hits == 1 and reader.stats.requests == 4  # (0, 100) was read again
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.stats.requests == 0 and copy.read([(url, 5, 3)]) == [bytes([5, 6, 7])]


def test_decode_and_transform_hooks(tmp_path: Path) -> None:
    spec = _write(tmp_path, n=10, per_shard=10)
    ds = ss.ShardDataset(spec, decode="pil", transform=lambda s: (s["cls"], s["json"]["i"], s["txt"]))
    assert ds[7] == (7, 7, "t" * (7 * 37 % 1500))
    assert ds.__getitems__([1, 2]) == [(1, 1, "t" * 37), (2, 2, "t" * 74)]


def test_out_of_range_and_bad_arguments(tmp_path: Path) -> None:
    spec = _write(tmp_path, n=10, per_shard=10)
    ds = ss.ShardDataset(spec)
    with pytest.raises(IndexError, match="sample number 10 is out of range for 10 samples"):
        ds[10]
    with pytest.raises(ConfigurationError, match="window=0"):
        ss.ShardDataset(spec, window=0)


def test_pack_writes_offsets_and_sizes(tmp_path: Path) -> None:
    from shardstream.cli._pack import pack

    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(30):
        (objects / f"s{i:03d}.txt").write_text("x" * (i * 53))
        (objects / f"s{i:03d}.cls").write_text(str(i))
    out = tmp_path / "packed"
    pack(str(objects), str(out), shard_size=8 << 10)
    entries = read_index_entries(str(out), offsets=True)
    assert len(entries) > 2 and all(len(e["sizes"]) == e["samples"] for e in entries)
    spec = f"{out}/shard-{{000000..{len(entries) - 1:06d}}}.tar"
    ds = ss.ShardDataset(spec)
    assert ds.__getitems__(list(range(len(ds)))[::-1]) == _streamed(spec)[::-1]


def test_ray_shard_entries_have_sizes_that_match_their_samples(tmp_path: Path) -> None:
    pa = require_module("pyarrow", "Ray's Arrow rows (pyarrow, with ray[data])")
    from shardstream.ray._tasks import assign_shards, encode_rows, write_shard
    from shardstream.ray._write import entry_with_sizes

    rows = pa.table({"__key__": [f"r{i:03d}" for i in range(12)], "txt": ["y" * (i * 99) for i in range(12)]})
    encoded = assign_shards(encode_rows(rows), first_keys=["r000"])
    row = write_shard(encoded, dst=str(tmp_path), prefix="ray").to_pylist()[0]
    entry = entry_with_sizes(row)
    assert sum(entry["sizes"]) + 1024 == entry["bytes"]
    (tmp_path / "_info.json").write_text(
        json.dumps({"format": "shardstream-index", "version": 1, "shards": [dict(entry)]})
    )
    spec = str(tmp_path / "ray-000000.tar")
    assert ss.ShardDataset(spec).__getitems__(list(range(12))) == _streamed(spec)
