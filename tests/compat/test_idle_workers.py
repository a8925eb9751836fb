"""Fewer shards than DataLoader workers: the extra workers yield nothing (real worker processes).

WebDataset 1.0.2's ``DataPipeline(..., split_by_worker, ...)`` lets them yield nothing and its
``WebDataset`` class raises "No samples found"; shardstream reads the epoch in both, logs once that
workers are idle, and still raises when the epoch is empty as a whole. Between ranks a rank
without shards would hang DDP, so ``split_by_node`` raises there.
"""

from __future__ import annotations

import logging
from types import ModuleType

import pytest
import webdataset as wds
from _wds_both import loader_items

import shardstream as ss
from shardstream.errors import SplitError
from shardstream.pipeline.base import ListNode, RunContext
from shardstream.readers.shardlists import idle_worker
from shardstream.shards.world import World

# torch warns when there are more workers than CPUs (as on small CI machines).
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SHARDS = [{"url": f"s{i}"} for i in range(3)]


def recipe(lib: ModuleType, spec: str) -> ModuleType:
    return lib.DataPipeline(
        lib.SimpleShardList(spec),
        lib.split_by_worker,
        lib.tarfile_to_samples(),
        lib.to_tuple("__key__", "cls"),
    )


def test_one_shard_eight_workers_pipeline_agrees(both: tuple[str, ModuleType], make_shards) -> None:
    name, lib = both
    spec, keys = make_shards([20])
    got = [key for key, _ in loader_items(recipe(lib, spec), num_workers=8)]
    assert got == keys  # worker 0 reads the one shard; the seven others yield nothing
    if name == "shardstream":
        with ss.WebLoader(recipe(ss, spec), batch_size=None, num_workers=8) as loader:
            assert [key for key, _ in loader] == keys


@pytest.mark.parametrize("kind", ["WebDataset", "ShardStream"])
def test_one_shard_eight_workers_dataset(kind: str, make_shards) -> None:
    spec, keys = make_shards([20])
    ds = ss.WebDataset(spec, shardshuffle=False) if kind == "WebDataset" else ss.ShardStream(spec)
    with ss.WebLoader(ds.to_tuple("__key__", "cls"), batch_size=None, num_workers=8) as loader:
        assert sorted(key for key, _ in loader) == keys


def test_webdataset_class_raises_there(make_shards) -> None:
    spec, _ = make_shards([20])
    with pytest.raises(ValueError, match="No samples found"):
        loader_items(wds.WebDataset(spec, shardshuffle=False), num_workers=2)


def test_an_epoch_without_samples_still_raises(make_shards) -> None:
    spec, _ = make_shards([0, 0])  # valid tar files with no member
    with pytest.raises(ValueError, match="No samples"):
        loader_items(wds.WebDataset(spec, shardshuffle=False), num_workers=2)
    with ss.WebLoader(ss.WebDataset(spec, shardshuffle=False), batch_size=None, num_workers=2) as loader:
        with pytest.raises(ValueError, match="no samples in this epoch"):
            list(loader)


def test_an_empty_shard_list_raises_in_every_worker() -> None:
    assert list(wds.DataPipeline([[]], wds.split_by_worker)) == []  # WebDataset: nothing, silently
    with pytest.raises(SplitError, match="shard list of this epoch is empty"):
        list(ss.DataPipeline([[]], ss.split_by_worker))


def test_idle_worker_is_marked_and_logged_once(caplog: pytest.LogCaptureFixture, monkeypatch) -> None:
    from shardstream.readers import shardlists

    monkeypatch.setattr(shardlists, "_idle_logged", False)
    nodes = []
    with caplog.at_level(logging.INFO, logger="shardstream.readers.shardlists"):
        for _ in range(2):  # two epochs in one process
            for worker in range(8):
                ctx = RunContext(0, World().with_worker(worker, 8))
                nodes.append(ss.split_by_worker.build(ListNode(SHARDS), ctx))
    assert [idle_worker(n) for n in nodes[:8]] == [False] * 3 + [True] * 5
    assert [list(n) for n in nodes[:4]] == [[SHARDS[0]], [SHARDS[1]], [SHARDS[2]], []]
    logged = [r.getMessage() for r in caplog.records if "get no shard" in r.getMessage()]
    assert len(logged) == 1  # once, though two epochs each had five idle workers
    assert logged[0].startswith(
        "5 of 8 DataLoader workers get no shard (the epoch has 3): they yield nothing"
    )


def test_a_rank_without_shards_still_raises() -> None:
    ctx = RunContext(0, World(rank=3, world_size=4))
    with pytest.raises(SplitError, match="rank 3 of 4 got no shards"):
        list(ss.split_by_node.build(ListNode(SHARDS), ctx))
