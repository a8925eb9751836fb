"""Pipeline telemetry in one process: the verdict names the slow stage or the slow loop, the
counts are exact, it is plain data, and when it is off nothing is wrapped."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstream as ss
from shardstream.handlers import ignore_and_continue
from shardstream.telemetry.report import format_table, summarize, verdict

ShardFactory = Callable[..., tuple[str, list[str]]]


def slow_map(sample: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.002)
    return sample


def _timed_generators(ds: Any) -> list[str]:
    live = ds._live
    assert live is not None and live.nodes
    return [getattr(n._it, "gi_code", None) and n._it.gi_code.co_name for n in live.nodes]


def test_a_slow_map_stage_is_named_the_bottleneck(make_shards: ShardFactory) -> None:
    spec, keys = make_shards(counts=[40, 40])
    ds = ss.ShardStream(spec, telemetry=True).decode().map(slow_map).to_tuple("__key__", "txt")
    got = [key for key, _ in ds]
    assert sorted(got) == sorted(keys)
    stats = json.loads(json.dumps(ds.stats()))  # plain data
    assert stats["verdict"].startswith("loader-bound: "), stats["verdict"]
    assert "slowest stage: map slow_map (" in stats["verdict"]
    by_name = {s["stage"].partition(":")[2]: s for s in stats["stages"]}
    assert by_name["map slow_map"]["share"] > 0.7
    assert by_name["map slow_map"]["kind"] == "map" and by_name["decode"]["kind"] == "decode"
    # 80 sleeps of 2 ms, timed one by one (warm-up) then sampled: a sleep is never shorter, so
    # only a lower bound holds on a loaded machine (no upper bound: load only adds time).
    assert by_name["map slow_map"]["time_s"] > 0.08
    assert by_name["map slow_map"]["time_s"] == max(s["time_s"] for s in stats["stages"])
    assert stats["samples"] == 80 and by_name["map slow_map"]["items"] == 80


def test_a_slow_training_loop_is_training_bound(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[50, 50])
    ds = ss.ShardStream(spec, telemetry=True).to_tuple("__key__", "txt").batched(10)
    batches = 0
    for _ in ds:
        time.sleep(0.02)  # the "training step"
        batches += 1
    assert batches == 10
    stats = ds.stats()
    assert stats["verdict"].startswith("training-bound: "), stats["verdict"]
    assert stats["wait_share"] < 0.3 and stats["wall_s"] >= 0.18  # (sleeps: lower bounds only)


def test_counts_bytes_io_and_tar_are_reported(make_shards: ShardFactory, tmp_path: Path) -> None:
    spec, keys = make_shards(counts=[30, 20, 25])
    ds = ss.ShardStream(spec, shuffle_shards=False, telemetry=True).to_tuple("__key__", "txt").batched(8)
    assert sum(len(b[0]) for b in ds) == 75
    stats = ds.stats()
    sizes = sum(p.stat().st_size for p in (tmp_path / "data").glob("*.tar"))
    assert stats["samples"] == 75 and stats["opens"] == 3
    assert 0 < stats["bytes"] <= sizes and stats["samples_per_s"] > 0 and stats["bytes_per_s"] > 0
    kinds = [s["kind"] for s in stats["stages"]]
    assert kinds[:2] == ["io", "tar"] and "fields" in kinds and "batch" in kinds
    assert {s["stage"]: s["items"] for s in stats["stages"]}["6:batched"] == 10
    assert stats["cache"] == {"hits": 0, "misses": 0} and stats["retries"] == stats["throttles"] == 0
    assert abs(sum(s["share"] for s in stats["stages"]) - 1) < 1e-6
    table = format_table(stats)
    assert "3:read tar" in table and "wait for data (loop)" in table and stats["verdict"] in table


def test_off_wraps_nothing_and_says_how_to_turn_it_on(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[10])
    ds = ss.ShardStream(spec).map(slow_map)
    it = iter(ds)
    next(it)
    names = _timed_generators(ds)
    assert "clocked" not in names and "timed_map" not in names
    it.close()  # type: ignore[attr-defined]
    stats = json.loads(json.dumps(ds.stats()))
    assert stats["telemetry"] is False and "SHARDSTREAM_TELEMETRY=1" in stats["verdict"]
    on = ss.ShardStream(spec).map(slow_map).batched(2).with_telemetry()
    it = iter(on)
    next(it)
    assert {"clocked", "timed_map"} <= set(_timed_generators(on))
    it.close()  # type: ignore[attr-defined]


def test_counts_are_exact_at_every_moment_and_the_reader_is_timed_by_the_map_after_it(
    make_shards: ShardFactory,
) -> None:
    # Untimed items pass in runs (1 to 255 items); a count read in the middle of a run, at its
    # end, or after the consumer stopped is still exact.
    spec, _ = make_shards(counts=[600, 400])
    ds = ss.ShardStream(spec, shuffle_shards=False, telemetry=True).decode().map(lambda s: s)
    it = iter(ds)
    names = None
    for k in range(1, 1001):
        next(it)
        if names is None:
            names = _timed_generators(ds)
        if k in (1, 63, 64, 65, 200, 333, 517, 999):
            by_kind = {s["kind"]: s["items"] for s in ds.stats()["stages"] if s["kind"] in ("decode", "map")}
            assert ds.stats()["samples"] == k and by_kind == {"decode": k, "map": k}, k
    # The reading node has no timing layer of its own: the decode loop times its pulls (the
    # last node is timed as a whole: the consumer's wait).
    assert names is not None and names[-4:] == ["_run", "_run", "timed_map", "clocked"], names
    assert ds.stats()["stages"][1]["stage"] == "3:read tar"
    it.close()  # type: ignore[attr-defined]
    assert ds.stats()["samples"] == 1000
    # Stopped in the middle of the second epoch's runs: exact too.
    for k, _ in enumerate(ds, 1):
        if k == 777:
            break
    assert ds.stats()["samples"] == 1777
    # A reader followed by something else than a map keeps its layer.
    shuffled = ss.ShardStream(spec, telemetry=True).shuffle(10).to_tuple("__key__", "txt")
    assert len(list(shuffled)) == 1000 and shuffled.stats()["samples"] == 1000


def test_the_environment_turns_it_on(make_shards: ShardFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, _ = make_shards(counts=[10, 5])
    monkeypatch.setenv("SHARDSTREAM_TELEMETRY", "1")
    ds = ss.ShardStream(spec)
    assert len(list(ds)) == 15
    assert ds.stats()["telemetry"] is True and ds.stats()["samples"] == 15
    assert ss.ShardStream(spec, telemetry=False).stats()["telemetry"] is False  # explicit wins


def test_skips_are_counted_the_same_with_and_without_telemetry(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[100])

    def flaky(sample: dict[str, Any]) -> dict[str, Any]:
        if int(sample["__key__"][-5:]) % 7 == 0:
            raise ValueError("bad sample")
        return sample

    results = []
    for telemetry in (False, True):
        ds = ss.ShardStream(spec, shuffle_shards=False, telemetry=telemetry).map(
            flaky, handler=ignore_and_continue
        )
        keys = [s["__key__"] for s in ds]
        stats = ds.stats()
        (entry,) = [s for s in stats["stages"] if s["skipped"]]
        assert entry["stage"] == "5:map flaky" and entry["last_error"] == "ValueError: bad sample"
        assert stats["skipped"] == ds.skipped == 15
        results.append(keys)
    assert results[0] == results[1] and len(results[0]) == 85


def test_a_periodic_log_line(make_shards: ShardFactory, caplog: pytest.LogCaptureFixture) -> None:
    spec, _ = make_shards(counts=[30])
    ds = ss.ShardStream(spec).map(slow_map).with_telemetry(log_interval=0.01)
    with caplog.at_level(logging.INFO, logger="shardstream.telemetry.recorder"):
        assert len(list(ds)) == 30
    lines = [r.getMessage() for r in caplog.records if r.name == "shardstream.telemetry.recorder"]
    assert lines and lines[0].startswith(f"telemetry (pipeline {os.getpid()}): ")
    assert "samples/s" in lines[-1] and "slowest stage: map slow_map" in lines[-1]


def test_compose_counts_apart_and_epochs_add_up(make_shards: ShardFactory) -> None:
    spec, _ = make_shards(counts=[12])
    base = ss.ShardStream(spec, telemetry=True)
    mapped = base.map(slow_map)
    assert len(list(mapped)) == 12 and len(list(mapped)) == 12  # two epochs
    assert mapped.stats()["samples"] == 24
    assert base.stats()["samples"] == 0  # its own counters: it was not iterated


def test_the_verdict_on_synthetic_reports() -> None:
    def view(own: float, busy: float) -> dict[str, Any]:
        return {
            "wall_s": 10.0, "first_item_s": 0.0, "busy_s": busy, "worker_s": busy, "samples": 100,
            "batches": 0, "bytes": 0, "opens": 1, "retries": 2, "throttles": 1,
            "cache": {"hits": 1, "misses": 0},
            "stages": [{"stage": "5:map f", "kind": "map", "time_s": own, "items": 100, "skipped": 0}],
        }  # fmt: skip

    bound = summarize([view(6.0, 8.3)], wall_s=10.0, wait_s=8.3)
    assert (
        bound["verdict"]
        == "loader-bound: 83% of wall time waiting for data; slowest stage: map f (72% of pipeline time)"
    )
    added = summarize([view(1.0, 1.0), view(1.0, 1.0)], wall_s=10.0, wait_s=0.5, consumer="worker")
    assert added["retries"] == 4 and added["cache"]["hits"] == 2 and added["stages"][0]["time_s"] == 2.0
    assert added["verdict"].startswith("training-bound: 5% of wall time waiting for data;")
    idle = {**bound, "workers": [{"utilisation": 0.2}, {"utilisation": 0.3}]}
    assert "workers were busy only 25%" in verdict(idle, "worker")
    assert summarize([])["verdict"].startswith("no data yet")


def test_a_map_with_rare_long_calls_keeps_its_time(make_shards: ShardFactory) -> None:
    """Calls preempted on a busy host take many times the usual: a map whose calls take a few
    microseconds or more is timed at every call, so that the rare long ones count where they
    happened, not in the next stage's time (``batched`` was blamed for the decode)."""
    spec, _ = make_shards(counts=[600, 600])
    calls = 0

    def stalls(sample: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        end = time.perf_counter() + (0.02 if calls % 37 == 0 else 0.00003)  # every 37th: 20 ms
        while time.perf_counter() < end:
            pass
        return sample

    ds = (
        ss.ShardStream(spec, shuffle_shards=False, telemetry=True)
        .map(stalls)
        .to_tuple("__key__", "cls")
        .batched(8)
    )
    assert sum(len(keys) for keys, _ in ds) == 1200
    by_kind = {s["kind"]: s for s in ds.stats()["stages"]}
    long_calls = 1200 // 37 * 0.02  # seconds at least (busy waits: load only adds time)
    assert by_kind["map"]["time_s"] >= 0.9 * long_calls, by_kind
    assert by_kind["batch"]["time_s"] < 0.2 * by_kind["map"]["time_s"], by_kind


def test_a_run_on_threads_is_shared_among_its_stages() -> None:
    """A run of per-sample stages on a loader's threads is timed as one node; its stages get its
    time by the pool's samples of their calls, and the items each one saw."""
    from shardstream.telemetry.report import process_view

    schema = [
        ("3:read", "read", "inclusive"),
        ("5:decode", "decode", "part"),
        ("6:map f", "map", "part"),
        ("7:to_tuple", "fields", "part"),
        ("7:run on threads", "run", "run"),
    ]
    ms = 1_000_000
    head = (0, 1000 * ms, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0)  # first, last, io, bytes, opens, collate, ...
    read = (24, 100 * ms, 0)
    run = (18, 500 * ms, 0)  # 18 items out, 500 ms with everything upstream
    sampled = (0, 3 * ms, 0), (0, 1 * ms, 6), (0, 0, 0)  # (items, sampled wall ns, skipped)
    view = process_view(schema, head + read + sum(sampled, ()) + run)
    rows = {s["stage"]: (round(s["time_s"], 6), s["items"], s["skipped"]) for s in view["stages"]}
    assert rows == {
        "3:read tar": (0.1, 24, 0),
        "3:io": (0.0, 24, 0),
        "5:decode": (0.3, 24, 0),
        "6:map f": (0.1, 24, 6),
        "7:to_tuple": (0.0, 18, 0),
    }
    assert view["busy_s"] == 0.5 and view["samples"] == 24
    unsampled = process_view(schema, head + read + (0, 0, 0) * 3 + run)  # before any sample
    assert [s["time_s"] for s in unsampled["stages"][2:]] == pytest.approx([0.4 / 3] * 3)
