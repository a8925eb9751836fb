"""``shardstream pack`` / ``unpack``: objects -> shards -> objects, resumable, read back equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _prefix import Prefix

import shardstream as ss
from shardstream.cli.__main__ import main
from shardstream.cli._pack import plan_shards
from shardstream.tar.index import read_index_entries

pytestmark = pytest.mark.s3


def test_plan_is_pure_and_respects_the_size() -> None:
    sizes = [[100, 3], [5000], [10], [700, 700], [1]]
    shards = plan_shards(sizes, 5 * 1024)
    assert shards == plan_shards(sizes, 5 * 1024)
    assert [list(r) for r in shards] == [[0], [1], [2, 3, 4]]  # 5000 B alone exceeds the target
    assert plan_shards([], 1024) == []


def test_pack_read_back_resume_and_unpack(
    samples40: Prefix, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s3 = samples40.s3
    opts = [f"--storage-option=endpoint_url={s3.endpoint_url}"] + [
        f"--storage-option={k}={v}" for k, v in s3.storage_options.items() if k != "endpoint_url"
    ]
    out = tmp_path / "shards"
    assert main(["pack", samples40.url, str(out), "--shard-size", "8KB", *opts]) == 0
    entries = read_index_entries(str(out))
    names = [e["url"] for e in entries]
    assert names == [f"shard-{k:06d}.tar" for k in range(len(names))] and len(names) > 3
    assert sum(e["samples"] for e in entries) == 40
    assert all(e["bytes"] <= 8000 + 1024 for e in entries)
    spec = f"{out}/shard-{{000000..{len(names) - 1:06d}}}.tar"
    back = {s["__key__"]: s for s in ss.Dataset(spec, shuffle_shards=False, cache=None)}
    assert sorted(back) == [samples40.key(i) for i in range(40)]
    for i in range(40):
        sample = back[samples40.key(i)]
        assert {k: v for k, v in sample.items() if not k.startswith("__")} == samples40.expected(i)

    # An interrupted run: the last shard and its index entry are missing. Only it is written again.
    last = out / names[-1]
    kept = {n: (out / n).stat().st_mtime_ns for n in names[:-1]}
    last_bytes = last.read_bytes()
    last.unlink()
    index = json.loads((out / "_info.json").read_text())
    index["shards"] = [s for s in index["shards"] if s["url"] != names[-1]]
    (out / "_info.json").write_text(json.dumps(index))
    capsys.readouterr()
    assert main(["pack", samples40.url, str(out), "--shard-size", "8KB", *opts]) == 0
    assert f"(1 written, {len(names) - 1} already complete)" in capsys.readouterr().out
    assert last.read_bytes() == last_bytes  # deterministic content
    assert {n: (out / n).stat().st_mtime_ns for n in names[:-1]} == kept

    objects = tmp_path / "objects"
    assert main(["unpack", spec, str(objects)]) == 0
    again = ss.ObjectDataset(str(objects))  # its _manifest.jsonl: no listing needed
    assert len(again) == 40
    assert {k: v for k, v in again[11].items() if not k.startswith("__")} == samples40.expected(11)


def test_ray_engine_missing_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "shardstream.ray", None)  # as if not installed
    assert main(["pack", str(tmp_path), str(tmp_path / "out"), "--engine", "ray"]) == 2
    assert "pip install 'shardstream[ray]'" in capsys.readouterr().err
