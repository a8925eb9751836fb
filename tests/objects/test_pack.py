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
    back = {s["__key__"]: s for s in ss.ShardStream(spec, shuffle_shards=False, cache=None)}
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


def test_the_index_is_written_in_groups_and_kept_when_pack_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 local samples of 1 KB in shards of ~2 samples: the index is rewritten once per group of
    4 finished shards (not once per shard), and when an object is missing part-way, pack fails
    naming it while every shard finished before it is in the index, so a run started again
    writes only the rest."""
    from shardstream.cli import _pack
    from shardstream.tar import index as tar_index

    src = tmp_path / "objects"
    src.mkdir()
    lines = []
    for i in range(40):
        key = f"s{i:03d}.txt"
        if i != 29:  # listed in the manifest, never written: the fetch fails
            (src / key).write_bytes(bytes([65 + i % 26]) * 1000)
        lines.append(json.dumps({"key": key, "size": 1000}))
    manifest = tmp_path / "keys.jsonl"
    manifest.write_text("\n".join(lines) + "\n")

    writes: list[int] = []
    real = tar_index.write_index

    def counted(url: str, entries: object, **kw: object) -> str:
        entries = list(entries)  # type: ignore[call-overload]
        writes.append(len(entries))
        return real(url, entries, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(tar_index, "write_index", counted)
    monkeypatch.setattr(_pack._IndexUpdates, "EVERY", 4)
    out = tmp_path / "shards"
    with pytest.raises(Exception, match="s029.txt"):
        _pack.pack(str(src), str(out), shard_size=3 * 1024, manifest=str(manifest))
    recorded = [e["url"] for e in read_index_entries(str(out))]
    # 2 samples a shard: shards 0-13 hold samples 0-27 and were finished; shard 14 (28, 29) failed
    assert recorded == [f"shard-{k:06d}.tar" for k in range(14)]
    assert writes == [4, 4, 4, 2], "groups of 4, then the rest when pack failed"

    (src / "s029.txt").write_bytes(bytes([65 + 29 % 26]) * 1000)
    writes.clear()
    assert _pack.pack(str(src), str(out), shard_size=3 * 1024, manifest=str(manifest)) == (6, 14, 40)
    assert writes == [4, 2]
    assert sum(e["samples"] for e in read_index_entries(str(out))) == 40
