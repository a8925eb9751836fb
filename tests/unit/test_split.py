"""WebDataset-compatible splitters: take_every arithmetic and its errors."""

from __future__ import annotations

import pytest

from shardstream.errors import SplitError
from shardstream.readers.shardlists import single_node_only, split_by_node, split_by_worker
from shardstream.shards.split import take_every

SHARDS = [{"url": f"s{i}"} for i in range(5)]


def test_take_every_partitions_and_is_lazy() -> None:
    parts = [list(take_every(SHARDS, i, 3)) for i in range(3)]
    assert [len(p) for p in parts] == [2, 2, 1]
    assert sorted(s["url"] for p in parts for s in p) == sorted(s["url"] for s in SHARDS)
    endless = take_every(iter(int, 1), 0, 2)  # an endless stream works
    assert next(endless) == 0


def test_empty_reader_error_names_the_numbers_and_fixes() -> None:
    with pytest.raises(SplitError) as info:
        list(take_every(SHARDS[:2], 3, 4, what="worker"))
    message = str(info.value)
    assert "worker 3 of 4 got no shards" in message and "2 shards for 4 workers" in message
    assert "resampled=True" in message


def test_split_by_node_uses_the_launcher_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    assert list(split_by_node(SHARDS)) == SHARDS
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert [s["url"] for s in split_by_node(SHARDS)] == ["s1", "s3"]
    assert list(split_by_worker(SHARDS)) == SHARDS  # main process: one reader


def test_single_node_only_refuses_multi_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    assert list(single_node_only(SHARDS)) == SHARDS
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SplitError, match="split_by_node"):
        single_node_only(SHARDS)
