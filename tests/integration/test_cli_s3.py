"""``shardstream ls | stat | verify | index`` over S3 (SeaweedFS on loopback), good and broken."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from _servers import SeaweedS3

from shardstream.cli import main
from shardstream.tar.index import read_index_entries
from shardstream.tar.sharded_writer import ShardWriter
from shardstream.tar.writer import TarWriter

pytestmark = pytest.mark.s3


def _options(s3: SeaweedS3) -> list[str]:
    return [f"--storage-option={k}={v}" for k, v in s3.storage_options.items()]


def _shard_bytes(samples: list[dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    with TarWriter(buf) as w:
        for sample in samples:
            w.write(sample)
    return buf.getvalue()


def _read(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def test_s3_dataset_good_then_broken(
    s3_server: SeaweedS3, s3_bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    opts = _options(s3_server)
    prefix = f"s3://{s3_bucket}/train"
    with ShardWriter(f"{prefix}/d-%06d.tar", maxcount=10, storage_options=s3_server.storage_options) as sink:
        for i in range(30):
            sink.write({"__key__": f"k{i:04d}", "txt": f"text {i}", "json": {"i": i}})
    spec = f"{prefix}/d-{{000000..000002}}.tar"

    # ls of the prefix: the shards come from the _info.json ShardWriter wrote (S3 is not listed)
    assert main(["ls", f"{prefix}/", "--json", *opts]) == 0
    listed = _read(capsys)
    assert [s["url"] for s in listed["shards"]] == [f"{prefix}/d-{i:06d}.tar" for i in range(3)]
    assert listed["total"]["samples"] == 30
    assert main(["stat", spec, "--json", *opts]) == 0
    txt, js = sum(len(f"text {i}") for i in range(30)), sum(len(json.dumps({"i": i})) for i in range(30))
    assert _read(capsys)["total"]["extensions"] == {"json": [30, js], "txt": [30, txt]}

    # index (with offsets) to S3, then verify clean
    assert main(["index", spec, *opts]) == 0
    assert capsys.readouterr().out == f"wrote {prefix}/_info.json: 3 shards, 30 samples\n"
    entries = read_index_entries(prefix, storage_options=s3_server.storage_options, offsets=True)
    assert [len(e.get("offsets", [])) for e in entries] == [10, 10, 10]
    assert main(["verify", spec, "--decode", "json", *opts]) == 0
    assert capsys.readouterr().out.endswith("1 index, decoded json: 0 problems\n")

    # break it: truncate shard 1, corrupt a header of shard 2, add a shard with a duplicate key
    good1 = s3_server.get_object(s3_bucket, "train/d-000001.tar")
    s3_server.put_object(s3_bucket, "train/d-000001.tar", good1[:3000])
    good2 = bytearray(s3_server.get_object(s3_bucket, "train/d-000002.tar"))
    good2[1024 + 100] ^= 0x10
    s3_server.put_object(s3_bucket, "train/d-000002.tar", bytes(good2))
    s3_server.put_object(s3_bucket, "train/d-000003.tar", _shard_bytes([{"__key__": "k0005", "txt": "dup"}]))
    # ls checks the index's sizes (one listing of the prefix) and reads the cut shard instead
    assert main(["ls", f"{prefix}/", "--json", *opts]) == 1
    captured = capsys.readouterr()
    rows = {r["url"]: r for r in json.loads(captured.out)["shards"]}
    assert [r["from"] for r in rows.values()] == ["index", "scan", "index"]
    assert rows[f"{prefix}/d-000001.tar"]["bytes"] == 3000
    cut = f"problem: {prefix}/d-000001.tar: index says {len(good1):,} bytes, the shard has 3,000"
    assert cut in captured.err
    assert main(["verify", f"{prefix}/d-{{000000..000003}}.tar", "--json", *opts]) == 1
    problems = {(p["url"], p["offset"]): p["problem"] for p in _read(capsys)["problems"]}
    assert any(url == f"{prefix}/d-000001.tar" and "truncated" in text for (url, _), text in problems.items())
    assert problems[(f"{prefix}/d-000002.tar", 1024)].startswith("bad tar header checksum")
    assert problems[(f"{prefix}/d-000003.tar", 0)].startswith("duplicate key 'k0005'")
    assert problems[(f"{prefix}/_info.json", None)] == "index out of date: it does not list d-000003.tar"
    # index refuses the broken dataset and leaves the old index alone
    assert main(["index", f"{prefix}/", *opts]) == 1
    assert "no index written" in capsys.readouterr().err
    assert len(read_index_entries(prefix, storage_options=s3_server.storage_options)) == 3


def test_s3_prefix_without_index_is_listed(
    s3_server: SeaweedS3, s3_bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = _shard_bytes([{"__key__": "a", "txt": "x"}])
    s3_server.put_object(s3_bucket, "x/a.tar", shard)
    s3_server.put_object(s3_bucket, "x/notes.txt", b"not a shard")
    s3_server.put_object(s3_bucket, "x/deeper/b.tar", shard)  # not directly under the prefix
    s3_server.put_object(s3_bucket, "y/notes.txt", b"no shards here")
    assert main(["ls", f"s3://{s3_bucket}/y/", *_options(s3_server)]) == 1
    assert "holds no shards" in capsys.readouterr().err
    assert main(["ls", f"s3://{s3_bucket}/x/", "--no-header", *_options(s3_server)]) == 0
    assert capsys.readouterr().out.split() == ["1", f"{len(shard):,}", "txt:1", f"s3://{s3_bucket}/x/a.tar"]
    assert main(["index", f"s3://{s3_bucket}/x/a.tar", *_options(s3_server)]) == 0
    capsys.readouterr()
    assert main(["ls", f"s3://{s3_bucket}/x/", "--no-header", *_options(s3_server)]) == 0
    assert capsys.readouterr().out.split() == ["1", f"{len(shard):,}", "txt:1", f"s3://{s3_bucket}/x/a.tar"]
