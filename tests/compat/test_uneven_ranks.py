"""WebDataset's multi-GPU recipe (split_by_node, split_by_worker, no split=) on uneven shards.

Ranks get the same shards and batch counts as in WebDataset 1.0.2 (its meaning is kept); when the
shards' sample counts are in an ``_info.json`` beside them, rank 0 warns once with the per-rank
counts and the fixes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import webdataset as wds
from _wds_both import wds_items

import shardstream as ss
from shardstream.readers import shardlists
from shardstream.tar.index import IndexEntry, write_index

COUNTS = [3, 40, 12, 25, 7]  # rank 0 of 2: shards 0, 2, 4 (22 samples); rank 1: 1, 3 (65)


@pytest.fixture
def uneven(make_shards, monkeypatch: pytest.MonkeyPatch) -> str:
    spec, _ = make_shards(COUNTS)
    urls = ss.expand_urls(spec)
    entries = [
        IndexEntry(url=Path(u).name, samples=n, bytes=Path(u).stat().st_size)
        for u, n in zip(urls, COUNTS, strict=True)
    ]
    write_index(str(Path(urls[0]).parent), entries)
    monkeypatch.setattr(shardlists, "_INDEXES", {})  # a fresh process, as far as the check knows
    monkeypatch.setattr(shardlists, "_uneven_checked", False)
    return spec


def recipe(lib: ModuleType, spec: str) -> Any:
    return lib.DataPipeline(
        lib.SimpleShardList(spec),
        lib.split_by_node,
        lib.split_by_worker,
        lib.tarfile_to_samples(),
        lib.to_tuple("__key__", "cls"),
        lib.batched(4),
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "split_by_node gives" in r.getMessage()]


def test_ranks_get_what_webdataset_gives_them(uneven: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    per_rank = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        ours = [list(keys) for keys, _ in recipe(ss, uneven)]
        theirs = [list(keys) for keys, _ in wds_items(recipe(wds, uneven))]
        assert ours == theirs
        per_rank.append(len(ours))
    assert per_rank == [6, 17]  # the imbalance WebDataset has too (and DDP hangs on)


def test_rank_zero_warns_once_with_the_counts_and_the_fix(
    uneven: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    pipeline = recipe(ss, uneven)
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        for _ in range(2):  # two epochs
            assert len(list(pipeline)) == 6
    [message] = warnings_of(caplog)
    assert "2 ranks" in message and "rank 0: 22, rank 1: 65 samples" in message
    assert "split='equal'" in message and "unless with_epoch(n) caps" in message


def build_in_worker(pipeline: Any, spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Build split_by_node as rank 0 of 2 in DataLoader worker 0 of 2, iterating ``pipeline``."""
    import torch.utils.data

    info = SimpleNamespace(dataset=pipeline, id=0, num_workers=2)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
    ctx = ss.RunContext(0, ss.World(rank=0, world_size=2).with_worker(0, 2))
    ss.split_by_node.build(ss.SimpleShardList(spec).build(None, ctx), ctx)


def test_in_a_dataloader_worker_it_counts_batches_per_worker(
    uneven: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        build_in_worker(recipe(ss, uneven), uneven, monkeypatch)
    [message] = warnings_of(caplog)
    # rank 0: shards 0, 4 (10) and 2 (12) -> 3 + 3 batches; rank 1: 1 (40) and 3 (25) -> 10 + 7.
    assert "rank 0: 6, rank 1: 17 batches of 4 per DataLoader worker" in message


def test_in_a_dataloader_worker_with_epoch_is_safe(
    uneven: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        build_in_worker(recipe(ss, uneven).with_epoch(5), uneven, monkeypatch)
    assert warnings_of(caplog) == []


@pytest.mark.parametrize("case", ["one rank", "balanced", "no index"])
def test_no_warning_when_safe_or_unknown(
    case: str, make_shards, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    counts = [10, 10, 10, 10] if case == "balanced" else COUNTS
    spec, _ = make_shards(counts)
    urls = ss.expand_urls(spec)
    if case != "no index":
        entries = [
            IndexEntry(url=Path(u).name, samples=n, bytes=1) for u, n in zip(urls, counts, strict=True)
        ]
        write_index(str(Path(urls[0]).parent), entries)
    reads: list[str] = []
    real = shardlists.read_index
    monkeypatch.setattr(shardlists, "read_index", lambda d, **kw: reads.append(d) or real(d, **kw))
    monkeypatch.setattr(shardlists, "_INDEXES", {})
    monkeypatch.setattr(shardlists, "_uneven_checked", False)
    monkeypatch.setenv("WORLD_SIZE", "1" if case == "one rank" else "2")
    monkeypatch.setenv("RANK", "0")
    pipeline = recipe(ss, spec)
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        for _ in range(3):
            list(pipeline)
    assert warnings_of(caplog) == []
    assert len(reads) <= 1  # the index is read at most once per process, not every epoch
