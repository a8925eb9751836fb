"""Loader telemetry: WebLoader and ss.Loader with real DataLoader worker processes, ss.Loader's
thread mode, over local files and HTTP, and ``shardstream bench --profile``."""

from __future__ import annotations

import json
import logging
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
    ds = ss.ShardStream(spec).to_tuple("__key__", "txt").batched(8)
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
    ds = ss.ShardStream(spec).map(slow_map).to_tuple("__key__", "txt").batched(4)
    with ss.WebLoader(ds, batch_size=None, num_workers=2, telemetry=True) as loader:
        assert sum(len(b[0]) for b in loader) == 48
    verdict = loader.stats()["verdict"]
    assert verdict.startswith("loader-bound: ") and "slowest stage: map slow_map (" in verdict, verdict


def test_a_slow_training_loop_is_training_bound(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[40, 40])
    ds = ss.ShardStream(spec).to_tuple("__key__", "txt")
    with ss.WebLoader(ds, batch_size=8, num_workers=2, telemetry=True) as loader:
        for _ in loader:
            time.sleep(0.25)  # the training step: the workers keep the queue full meanwhile
    stats = loader.stats()
    assert stats["verdict"].startswith("training-bound: "), stats["verdict"]
    assert stats["batches"] == 10 and stats["samples"] == 80


def test_off_by_default(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[8])
    with ss.WebLoader(ss.ShardStream(spec), batch_size=4, num_workers=0) as loader:
        assert len(list(loader)) == 2
    assert loader.stats() == {
        "telemetry": False,
        "verdict": "telemetry is off: WebLoader(..., telemetry=True) or SHARDSTREAM_TELEMETRY=1",
        "restarts": {"count": 0, "causes": {}, "budget": 3, "recent": []},  # kept with telemetry off
        "worker_pids": [],
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
    ds = ss.ShardStream(
        urls, shuffle_shards=False, cache=ss.CachePolicy(str(tmp_path / "cache")), telemetry=True
    )
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
    ds = ss.ShardStream(spec).to_tuple("__key__", "txt").batched(4)
    with ss.WebLoader(ds, batch_size=None, num_workers=2, telemetry=True) as loader:
        assert sorted(key for batch in loader for key in batch[0]) == sorted(keys)
    stats = loader.stats()
    items = {s["stage"].partition(":")[2] or s["stage"]: s["items"] for s in stats["stages"]}
    assert items["read tar"] == items["to_tuple"] == 42, items
    assert items["batched"] == items["collate"] == stats["batches"] == 12, items
    assert [w["samples"] for w in stats["workers"]] == [21, 21]


def _jpeg_shards(directory: Path, samples: int, per_shard: int, size: int = 96) -> str:
    from shardstream.cli._demo import synthetic_jpeg

    with ss.ShardWriter(str(directory / "j-%06d.tar"), maxcount=per_shard) as sink:
        for i in range(samples):
            sink.write({"__key__": f"k{i:04d}", "jpg": synthetic_jpeg(i, size=size), "cls": i % 10})
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
    ds = ss.ShardStream(spec, shuffle_shards=False).decode("rgb8").to_tuple("jpg", "cls")
    with ss.Loader(ds, batch_size=8, num_workers=2, telemetry=True) as loader:
        assert sum(len(labels) for _, labels in loader) == 40
        stats = loader.stats()
    stages = {s["stage"].partition(":")[2] or s["stage"]: s for s in stats["stages"]}
    assert "decode" not in stages and "collate" not in stages, list(stages)
    decode = stages["decode (into the batch)"]
    assert decode["kind"] == "decode" and decode["items"] == 40 and decode["time_s"] > 0
    assert "decode (into the batch)" in stats["verdict"] or "slowest stage: decode" not in stats["verdict"]


# -- ss.Loader's thread mode -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_jpegs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """40 JPEGs of 384 pixels: decoding one takes about a millisecond, far more than reading it,
    so the decode is the slowest stage by a wide margin."""
    return _jpeg_shards(tmp_path_factory.mktemp("big-jpegs"), 40, 10, size=384)


def _by_name(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["stage"].partition(":")[2] or s["stage"]: s for s in stats["stages"]}


@pytest.mark.parametrize("persistent", [True, False])
def test_thread_mode_stats_keep_every_epoch_after_the_loader_closes(big_jpegs: str, persistent: bool) -> None:
    """Each epoch runs a copy of the pipeline (a new one per epoch without persistent workers):
    the loader keeps what they measured, as WebLoader keeps its workers' counters."""
    ds = ss.ShardStream(big_jpegs, shuffle_shards=False).decode("rgb8").to_tuple("jpg", "cls")
    with ss.Loader(ds, batch_size=8, num_threads=2, persistent_workers=persistent, telemetry=True) as loader:
        for _ in range(2):
            assert sum(len(labels) for _, labels in loader) == 40
        inside = json.loads(json.dumps(loader.stats()))
    after = json.loads(json.dumps(loader.stats()))
    assert after == inside  # closing the loader changes nothing of what it measured
    assert after["telemetry"] is True and after["samples"] == 80 and after["batches"] == 10
    assert after["wall_s"] > 0 and after["wait_s"] > 0 and after["first_item_s"] > 0
    decode = _by_name(after)["decode (into the batch)"]
    assert decode["items"] == 80 and decode["time_s"] > 0
    assert after["verdict"].startswith(("loader-bound: ", "training-bound: ")), after["verdict"]
    assert ds.stats()["telemetry"] is False  # the dataset itself is left alone


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_mode_reports_the_decode_into_the_batch(big_jpegs: str, threads: int) -> None:
    """The JPEGs are decoded by the batch maker (on the pool with 2 threads): its time is the
    decode's, as in process mode, and the verdict names it as the slowest stage."""
    ds = ss.ShardStream(big_jpegs, shuffle_shards=False).decode("rgb8").to_tuple("jpg", "cls")
    with ss.Loader(ds, batch_size=8, num_threads=threads, telemetry=True) as loader:
        assert sum(len(labels) for _, labels in loader) == 40
        stats = loader.stats()
    stages = _by_name(stats)
    assert "decode" not in stages and "collate" not in stages, list(stages)
    decode = stages["decode (into the batch)"]
    assert decode["kind"] == "decode" and decode["items"] == 40 and stats["batches"] == 5
    slowest = max(stats["stages"], key=lambda s: s["time_s"])
    assert slowest["stage"] == decode["stage"], stats["stages"]
    assert "slowest stage: decode (into the batch) (" in stats["verdict"], stats["verdict"]


def flaky(sample: dict[str, Any]) -> dict[str, Any]:
    if int(sample["__key__"][1:]) % 4 == 1:  # (the first sample passes: the pool times it)
        raise ValueError("bad sample")
    return sample


def _flaky_pipeline(spec: str) -> Any:
    return (
        ss.ShardStream(spec, shuffle_shards=False)
        .decode("rgb8")
        .map(flaky, handler=ss.ignore_and_continue)
        .to_tuple("jpg", "cls")
    )


def _per_sample_rows(stats: dict[str, Any]) -> dict[str, int]:
    return {s["stage"]: s["items"] for s in stats["stages"] if s["kind"] in ("decode", "map", "fields")}


def test_thread_mode_numbers_its_stages_as_the_pipeline_does(tmp_path: Path) -> None:
    """The stages run on the threads as one node report a row each, under the pipeline's own
    numbers and item counts (those of the pipeline iterated alone), which ``threads`` uses too."""
    spec = _jpeg_shards(tmp_path, 24, 12)
    alone = _flaky_pipeline(spec).with_telemetry()
    assert len(list(alone)) == 18
    with ss.Loader(_flaky_pipeline(spec), batch_size=6, num_threads=2, telemetry=True) as loader:
        assert sum(len(labels) for _, labels in loader) == 18
        stats = loader.stats()
    expected = {"5:decode": 24, "6:map flaky": 24, "7:to_tuple": 18}
    assert _per_sample_rows(stats) == _per_sample_rows(alone.stats()) == expected
    assert [s["stage"] for s in stats["threads"]] == list(expected)
    row = next(s for s in stats["stages"] if s["stage"] == "6:map flaky")
    assert row["skipped"] == stats["skipped"] == 6 and row["last_error"] == "ValueError: bad sample"
    # The map reads the decoded values: the decode does not defer, and the batch maker is its own row.
    assert {"3:io", "3:read tar", "collate"} <= {s["stage"] for s in stats["stages"]}


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_mode_without_telemetry_keeps_its_skip_counts(tmp_path: Path, threads: int) -> None:
    spec = _jpeg_shards(tmp_path, 24, 12)
    with ss.Loader(_flaky_pipeline(spec), batch_size=6, num_threads=threads) as loader:
        assert sum(len(labels) for _, labels in loader) == 18
    stats = loader.stats()
    assert stats["telemetry"] is False and stats["skipped"] == 6
    skipped = {s["stage"]: s["skipped"] for s in stats["stages"]}
    assert skipped == {"5:decode": 0, "6:map flaky": 6, "7:to_tuple": 0}
    assert stats["verdict"] == "telemetry is off: ss.Loader(..., telemetry=True) or SHARDSTREAM_TELEMETRY=1"


def test_ss_loader_names_itself_when_telemetry_is_off(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[8])
    with ss.Loader(ss.ShardStream(spec), batch_size=4, num_workers=1) as loader:
        assert len(list(loader)) == 2
    assert (
        loader.stats()["verdict"]
        == "telemetry is off: ss.Loader(..., telemetry=True) or SHARDSTREAM_TELEMETRY=1"
    )


def test_the_environment_turns_thread_mode_telemetry_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    spec = _jpeg_shards(tmp_path, 24, 12)
    monkeypatch.setenv("SHARDSTREAM_TELEMETRY", "1")
    monkeypatch.setenv("SHARDSTREAM_TELEMETRY_INTERVAL", "0.000001")  # a line at every batch
    ds = ss.ShardStream(spec, shuffle_shards=False).decode("rgb8").to_tuple("jpg", "cls")
    with caplog.at_level(logging.INFO, logger="shardstream"):
        with ss.Loader(ds, batch_size=6, num_threads=2) as loader:
            assert sum(len(labels) for _, labels in loader) == 24
    stats = loader.stats()
    assert stats["telemetry"] is True and stats["samples"] == 24 and stats["batches"] == 4
    assert _by_name(stats)["decode (into the batch)"]["items"] == 24
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("telemetry (")]
    # The loader logs its report (its loop's wait, every copy's counters), as WebLoader does.
    assert lines and all(line.startswith("telemetry (loader): ") for line in lines), lines
    assert "24 samples" in lines[-1]
    with ss.Loader(ds, batch_size=6, num_threads=2, telemetry=False) as off:  # explicit wins
        assert sum(len(labels) for _, labels in off) == 24
    assert off.stats()["telemetry"] is False


def test_bench_profile_in_thread_mode_names_the_decode_into_the_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--threads 2`` with no worker process: the report is read after the loader is closed."""
    spec = _jpeg_shards(tmp_path, 48, 12)
    png = tmp_path / "profile.png"
    args = ["bench", spec, "--threads", "2", "--batch-size", "8", "--decode", "rgb8"]
    args += ["--to-tuple", "jpg", "cls", "--profile", "--profile-png", str(png)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "ss.Loader, 0 workers, 2 threads per process, decode rgb8" in out and "samples:          48" in out
    rows = [line for line in out.splitlines() if line[:1].isdigit() and ":" in line[:4]]
    decode = [line for line in rows if "decode" in line]
    assert len(decode) == 1 and "decode (into the batch)" in decode[0], rows
    assert not any(line.startswith("collate ") for line in out.splitlines())
    assert "wait for data (loop)" in out and f"profile plot: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args, "--json"]) == 0
    profile = json.loads(capsys.readouterr().out)["profile"]
    assert profile["report"]["samples"] == 48 and profile["report"]["telemetry"] is True
    decoded = next(s for s in profile["report"]["stages"] if s["kind"] == "decode")
    assert decoded["stage"].endswith("decode (into the batch)") and decoded["items"] == 48


def test_a_profile_without_timings_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A report without timings (telemetry off: the stages' skip counters only) is named, not
    drawn: neither the snapshots nor the outputs fail on it."""
    from shardstream.cli._bench import _profile_outputs
    from shardstream.cli._profile import Timeline, no_timings

    off = {
        "telemetry": False,
        "stages": [{"stage": "3:read", "skipped": 0}],
        "verdict": "telemetry is off: X",
    }
    timeline = Timeline(lambda: off)
    assert timeline.take() is off and timeline.points[0]["stages"] == {}
    assert no_timings(off) == (
        "the loader reported no timings (telemetry is off: X), so there is no table or plot to show"
    )
    png = tmp_path / "never.png"
    _profile_outputs({"report": off, "timeline": timeline.points}, str(png), table=True)
    assert capsys.readouterr().out == f"\nprofile: {no_timings(off)}\n" and not png.exists()
