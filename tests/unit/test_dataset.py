"""The native ShardStream and its value objects, and WebDataset as a facade over it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import shardstream as ss
from shardstream.cache import CachedSource
from shardstream.errors import ConfigurationError
from shardstream.pipeline.shuffle import detshuffle
from shardstream.readers.read_shards import ReadShards
from shardstream.sources import SchemeRouter


def _keys(items: object) -> list[str]:
    return [s["__key__"] for s in items]  # type: ignore[attr-defined]


@pytest.fixture
def spec(make_shards) -> str:  # type: ignore[no-untyped-def]
    spec, _ = make_shards([5, 5, 5, 5])
    return str(spec)


def test_fluent_methods_keep_the_native_type(spec: str) -> None:
    ds = ss.ShardStream(spec).shuffle(10).decode().map(lambda s: s).batched(2)
    assert isinstance(ds, ss.ShardStream)
    assert sum(len(b["__key__"]) for b in ds) == 20


def test_default_split_gives_each_rank_its_own_shards(spec: str) -> None:
    everything = sorted(_keys(ss.ShardStream(spec, shuffle_shards=False)))
    halves = [sorted(_keys(ss.ShardStream(spec, world=ss.World(r, 2)))) for r in (0, 1)]
    assert sorted(halves[0] + halves[1]) == everything
    assert not set(halves[0]) & set(halves[1])


def test_explicit_world_reaches_the_sample_shuffle(spec: str) -> None:
    """One world for every stage: the shuffle seeds from the explicit rank, not the detected one."""
    one = ss.ShardStream(
        spec, world=ss.World(0, 2), shuffle_shards=False, split=ss.SplitPolicy(node_splitter=None)
    )
    other = ss.ShardStream(
        spec, world=ss.World(1, 2), shuffle_shards=False, split=ss.SplitPolicy(node_splitter=None)
    )
    assert sorted(_keys(one.shuffle(20))) == sorted(_keys(other.shuffle(20)))
    assert _keys(one.shuffle(20)) != _keys(other.shuffle(20))


def test_split_policy_validates_and_plans(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown"):
        ss.SplitPolicy("bogus")
    with pytest.raises(ConfigurationError, match="ignored"):
        ss.SplitPolicy("shards", epoch_size=10)
    ds = ss.ShardStream(spec, split=ss.SplitPolicy("equal", batch_size=4), world=ss.World(0, 2))
    assert len(ds) == 8 and len(ds.batched(4)) == 2 and len(list(ds)) == 8
    endless = ss.ShardStream(spec, split="resampled")
    assert len([s for _, s in zip(range(50), endless, strict=False)]) == 50


def test_cache_policy_wraps_the_source(spec: str, tmp_path: Path) -> None:
    assert isinstance(ss.ShardStream(spec, cache=None).source, SchemeRouter)
    cached = ss.ShardStream(spec, cache=ss.CachePolicy(str(tmp_path / "cache"), "1G"))
    assert isinstance(cached.source, CachedSource)
    assert ss.CachePolicy(str(tmp_path), 0).enabled is False
    assert ss.CachePolicy(str(tmp_path), "2K").size_bytes == 2048
    assert len(list(cached)) == 20  # local shards are read in place through the cache layer


def test_webdataset_arguments_have_effects(spec: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="shardstream.readers.read_shards"):
        list(ss.WebDataset(spec, shardshuffle=False, verbose=True))
    assert sum("opening shard" in r.getMessage() for r in caplog.records) == 4
    det = ss.WebDataset(spec, shardshuffle=3, detshuffle=True, seed=1)
    assert any(isinstance(stage, detshuffle) for stage in det.pipeline)
    assert _keys(det) != _keys(ss.WebDataset(spec, shardshuffle=False))
    assert sorted(_keys(det)) == sorted(_keys(ss.WebDataset(spec, shardshuffle=False)))


@pytest.mark.parametrize(
    "make",
    [
        lambda spec: ss.WebDataset(spec, mode="bogus"),
        lambda spec: ss.WebDataset(spec, batch_size=4),
        lambda spec: ss.WebDataset(spec, unknown_argument=1),
        lambda spec: ss.xdecode(defaults=False),
        lambda spec: ss.info(stream=object()),
    ],
)
def test_an_argument_without_effect_raises(spec: str, make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((TypeError, ValueError)):
        make(spec)


def test_arguments_webdataset_also_ignores_warn_once(spec: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        for _ in range(2):
            assert len(list(ss.WebDataset(spec).shuffle(10, handler=ss.warn_and_continue))) > 0
            assert len(list(ss.ResampledShards(spec, nshards=3, deterministic=False))) == 3
    messages = [r.getMessage() for r in caplog.records]
    assert sum("shuffle(handler=...) has no effect" in m for m in messages) <= 1
    assert sum("deterministic=False) has no effect" in m for m in messages) <= 1


def test_worker_seed_and_silent_with_length(spec: str, caplog: pytest.LogCaptureFixture) -> None:
    a = [d["url"] for d in ss.ResampledShards(spec, nshards=12, worker_seed=lambda: 5)]
    b = [d["url"] for d in ss.ResampledShards(spec, nshards=12, worker_seed=lambda: 6)]
    assert a != b
    with caplog.at_level(logging.INFO, logger="shardstream.pipeline.pipeline"):
        ss.WebDataset(spec).with_length(3)
        ss.WebDataset(spec).with_length(3, silent=True)
    assert sum("declares len() only" in r.getMessage() for r in caplog.records) == 1


def test_webdataset_delegates_to_the_native_builder(spec: str) -> None:
    ds = ss.WebDataset(spec, shardshuffle=True)
    assert isinstance(ds, ss.ShardStream)
    assert [type(s).__name__ for s in ds.pipeline] == [
        "SimpleShardList",
        "ShardShuffle",
        "Splitter",
        "Splitter",
        "ReadShards",
        "CheckEmpty",
    ]
    assert isinstance(ds.pipeline[4], ReadShards)
