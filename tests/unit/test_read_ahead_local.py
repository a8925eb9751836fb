"""Read-ahead with local shards: the next shard is taken from the list (and kept in the state), but
nothing is opened ahead; a stream that came with the shard taken ahead is closed on an early stop.
The remote behaviour is in ``tests/integration/test_read_ahead.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import shardstream as ss


def expand(spec: str) -> list[str]:
    from braceexpand import braceexpand

    return list(braceexpand(spec))


def test_local_shards_are_taken_ahead_but_not_opened_in_a_thread(make_shards) -> None:
    spec, keys = make_shards(counts=[5, 5, 5])
    pipeline = ss.DataPipeline(ss.SimpleShardList(expand(spec)), ss.ReadShards())
    it = iter(pipeline)
    assert next(it)["__key__"] == keys[0]
    state = pipeline.state_dict()
    assert state["nodes"][0] == {"next": 2}  # the shard list is past the shard taken ahead
    assert state["nodes"][1]["ahead"] is True
    assert not [t for t in threading.enumerate() if t.name == "shardstream-open-ahead"]
    restored = ss.DataPipeline(ss.SimpleShardList(expand(spec)), ss.ReadShards())
    restored.load_state_dict(state)
    assert [s["__key__"] for s in restored] == keys[1:]


def test_without_read_ahead_nothing_is_taken_early(make_shards) -> None:
    spec, _ = make_shards(counts=[5, 5])
    pipeline = ss.DataPipeline(ss.SimpleShardList(expand(spec)), ss.ReadShards(read_ahead=False))
    next(iter(pipeline))
    state = pipeline.state_dict()
    assert state["nodes"][0] == {"next": 1} and "ahead" not in state["nodes"][1]


def test_an_early_stop_closes_the_stream_of_the_shard_taken_ahead(make_shards) -> None:
    spec, _ = make_shards(counts=[5, 5, 5])
    opened: list[Any] = []

    def url_opener(shards: Iterator[Any]) -> Iterator[dict[str, Any]]:
        for shard in shards:  # SimpleShardList yields {"url": ...} dicts
            stream = open(shard["url"], "rb")  # noqa: SIM115 - the reading stage closes it
            opened.append(stream)
            yield {**shard, "stream": stream}

    it = iter(ss.DataPipeline(ss.SimpleShardList(expand(spec)), url_opener, ss.ReadShards()))
    next(it)
    assert len(opened) == 2  # shard 0 being read, shard 1 taken ahead with its stream
    it.close()  # type: ignore[attr-defined]
    assert all(stream.closed for stream in opened)


def test_the_datasets_pass_read_ahead_to_their_reading_stage(make_shards) -> None:
    spec, _ = make_shards(counts=[5, 5])
    urls = expand(spec)
    for ds in (ss.WebDataset(urls, read_ahead=False), ss.ShardStream(urls, read_ahead=False)):
        readers = [stage for stage in ds.pipeline if isinstance(stage, ss.ReadShards)]
        assert [r.read_ahead for r in readers] == [False]
    assert [r.read_ahead for r in ss.WebDataset(urls).pipeline if isinstance(r, ss.ReadShards)] == [True]
    planned = ss.ShardStream(
        urls, split=ss.SplitPolicy("equal", index={u: 5 for u in urls}), read_ahead=False
    )
    assert planned.planned is not None and planned.planned.read_ahead is False
