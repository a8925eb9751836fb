"""WebLoader telemetry with real DataLoader worker processes, over local files and HTTP, and
``shardstream bench --profile``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstream as ss
from shardstream.cli import main

ShardFactory = Callable[..., tuple[str, list[str]]]


def slow_map(sample: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.005)
    return sample


def test_loader_stats_add_up_both_workers(make_shards: ShardFactory) -> None:
    spec, keys = make_shards(counts=[40, 40, 40, 40])
    ds = ss.Dataset(spec).to_tuple("__key__", "txt").batched(8)
    with ss.WebLoader(ds, batch_size=None, num_workers=2, telemetry=True) as loader:
        seen = [key for keys_, _ in loader for key in keys_]
    assert sorted(seen) == sorted(keys)
    stats = json.loads(json.dumps(loader.stats()))  # plain data
    workers = {w["worker"]: w for w in stats["workers"]}
    assert set(workers) == {0, 1}
    assert workers[0]["samples"] == workers[1]["samples"] == 80  # two shards each
    assert stats["samples"] == 160 and stats["batches"] == 20 and stats["opens"] == 4
    kinds = {s["kind"] for s in stats["stages"]}
    assert {"io", "tar", "fields", "batch", "collate"} <= kinds
    assert {s["stage"]: s["items"] for s in stats["stages"]}["collate"] == 20
    assert stats["wall_s"] > 0 and 0 <= stats["wait_share"] <= 1


def test_a_slow_map_in_the_workers_is_the_bottleneck(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[24, 24])
    ds = ss.Dataset(spec).map(slow_map).to_tuple("__key__", "txt").batched(4)
    with ss.WebLoader(ds, batch_size=None, num_workers=2, telemetry=True) as loader:
        assert sum(len(b[0]) for b in loader) == 48
    verdict = loader.stats()["verdict"]
    assert verdict.startswith("loader-bound: ") and "slowest stage: map slow_map (" in verdict, verdict


def test_a_slow_training_loop_is_training_bound(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[40, 40])
    ds = ss.Dataset(spec).to_tuple("__key__", "txt")
    with ss.WebLoader(ds, batch_size=8, num_workers=2, telemetry=True) as loader:
        for _ in loader:
            time.sleep(0.25)  # the training step: the workers keep the queue full meanwhile
    stats = loader.stats()
    assert stats["verdict"].startswith("training-bound: "), stats["verdict"]
    assert stats["batches"] == 10 and stats["samples"] == 80


def test_off_by_default(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[8])
    with ss.WebLoader(ss.Dataset(spec), batch_size=4, num_workers=0) as loader:
        assert len(list(loader)) == 2
    assert loader.stats() == {
        "telemetry": False,
        "verdict": "telemetry is off: WebLoader(..., telemetry=True) or SHARDSTREAM_TELEMETRY=1",
    }


def test_retries_throttles_and_cache_hits_over_http(
    http_server: Any, make_shards: ShardFactory, tmp_path: Path
) -> None:
    spec, _ = make_shards(counts=[10, 10])
    urls = [
        http_server.write(f"telemetry/{p.name}", p.read_bytes())
        for p in sorted((tmp_path / "data").glob("*.tar"))
    ]
    http_server.fail(f"telemetry/{Path(urls[0]).name}", 503, times=1)
    ds = ss.Dataset(urls, shuffle_shards=False, cache=ss.CachePolicy(str(tmp_path / "cache")), telemetry=True)
    assert len(list(ds)) == 20  # a miss each, one 503 retried
    first = ds.stats()
    assert first["cache"] == {"hits": 0, "misses": 2}
    assert first["retries"] == 1 and first["throttles"] == 1
    assert len(list(ds)) == 20  # the second epoch reads the cache
    second = ds.stats()
    assert second["cache"] == {"hits": 2, "misses": 2} and second["samples"] == 40


def test_bench_profile_prints_the_table_and_writes_a_png(
    make_shards: ShardFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image

    spec, _ = make_shards(counts=[30, 30])
    png = tmp_path / "profile.png"
    args = ["bench", spec, "--workers", "2", "--batch-size", "6", "--profile", "--profile-png", str(png)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "samples:          60" in out
    assert "stage" in out and "kind" in out and "wait for data (loop)" in out
    assert "worker 0" in out and "worker 1" in out
    assert any(line.startswith(("loader-bound: ", "training-bound: ")) for line in out.splitlines())
    assert f"profile plot: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1000, 700)
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    report = result["profile"]["report"]
    assert report["samples"] == 60 and len(report["workers"]) == 2 and result["profile"]["timeline"]


def test_stage_counts_include_each_worker_s_last_partial_batch(make_shards: ShardFactory) -> None:
    spec, keys = make_shards(counts=[21, 21])  # a worker each: 5 batches of 4, then one of 1
    ds = ss.Dataset(spec).to_tuple("__key__", "txt").batched(4)
    with ss.WebLoader(ds, batch_size=None, num_workers=2, telemetry=True) as loader:
        assert sorted(key for batch in loader for key in batch[0]) == sorted(keys)
    stats = loader.stats()
    items = {s["stage"].partition(":")[2] or s["stage"]: s["items"] for s in stats["stages"]}
    assert items["read tar"] == items["to_tuple"] == 42, items
    assert items["batched"] == items["collate"] == stats["batches"] == 12, items
    assert [w["samples"] for w in stats["workers"]] == [21, 21]


def _jpeg_shards(directory: Path, samples: int, per_shard: int) -> str:
    from shardstream.cli._demo import synthetic_jpeg

    with ss.ShardWriter(str(directory / "j-%06d.tar"), maxcount=per_shard) as sink:
        for i in range(samples):
            sink.write({"__key__": f"k{i:04d}", "jpg": synthetic_jpeg(i, size=96), "cls": i % 10})
    return str(directory / f"j-{{000000..{samples // per_shard - 1:06d}}}.tar")


def test_bench_profile_names_the_decode_into_the_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ss.Loader decodes JPEGs straight into the batch: the batch maker's time is the
    decode's, reported (and drawn) as one stage, ``decode (into the batch)``."""
    spec = _jpeg_shards(tmp_path, 48, 12)
    png = tmp_path / "profile.png"
    args = ["bench", spec, "--workers", "2", "--batch-size", "8", "--decode", "rgb8"]
    args += ["--to-tuple", "jpg", "cls", "--profile", "--profile-png", str(png)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "ss.Loader, 2 workers, 1 thread per process, decode rgb8" in out and "samples:          48" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit() and ":" in line[:4]}
    decode = [name for name in rows if "decode" in rows[name]]
    assert len(decode) == 1 and rows[decode[0]].split("decode (into the batch)")[1].split()[0] == "decode"
    assert not any(
        line.startswith(("collate ", "batched ")) or ":batched " in line for line in out.splitlines()
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args, "--json"]) == 0
    profile = json.loads(capsys.readouterr().out)["profile"]
    drawn = {name for point in profile["timeline"] for name in point["stages"]}  # what the plot stacks
    assert [name for name in drawn if "decode" in name] == [decode[0] + " (into the batch)"]
    assert "collate" not in drawn
    decoded = next(s for s in profile["report"]["stages"] if s["kind"] == "decode")
    assert decoded["items"] == 48 and decoded["time_s"] > 0


def test_loader_stats_name_the_decode_into_the_batch(tmp_path: Path) -> None:
    spec = _jpeg_shards(tmp_path, 40, 10)
    ds = ss.Dataset(spec, shuffle_shards=False).decode("rgb8").to_tuple("jpg", "cls")
    with ss.Loader(ds, batch_size=8, num_workers=2, telemetry=True) as loader:
        assert sum(len(labels) for _, labels in loader) == 40
        stats = loader.stats()
    stages = {s["stage"].partition(":")[2] or s["stage"]: s for s in stats["stages"]}
    assert "decode" not in stages and "collate" not in stages, list(stages)
    decode = stages["decode (into the batch)"]
    assert decode["kind"] == "decode" and decode["items"] == 40 and decode["time_s"] > 0
    assert "decode (into the batch)" in stats["verdict"] or "slowest stage: decode" not in stats["verdict"]
