"""Resuming after the shards were rewritten under the same names: refused, or restarted on request.

The defect: a 1,000-sample epoch cut at 370, its shards rewritten, resumed by seeking to the old
byte offset and yielded 715 samples of the new shards without a word. A saved position now pins
the sample before it (key and offset); a restore re-reads that sample and refuses with a
StateError naming the shard when it is not there any more, or, with
``.if_shards_changed("restart")``, starts the saved epoch afresh with a warning.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import shardstream as ss
from shardstream.errors import StateError
from shardstream.tar import ShardWriter


def _write(root: Path, payload: int, tag: str) -> list[str]:
    with ShardWriter(str(root / "s-%02d.tar"), maxcount=200) as sink:
        for i in range(1000):
            sink.write({"__key__": f"{tag}{i:04d}", "txt": "x" * (payload + i % 7)})
    return [str(root / f"s-{k:02d}.tar") for k in range(5)]


def _make(urls: list[str], case: str) -> Any:
    if case == "equal":
        return ss.ShardStream(urls, split=ss.SplitPolicy("equal", batch_size=10), seed=1)
    if case == "shuffled":
        return ss.ShardStream(urls, seed=1).shuffle(20)
    return ss.ShardStream(urls, seed=1)


@pytest.mark.parametrize("case", ["shards", "equal", "shuffled"])
def test_rewritten_shards_are_refused_or_restarted(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    urls = _write(tmp_path, 100, "a")
    ds = _make(urls, case)
    it = iter(ds)
    for _ in range(370):
        next(it)
    state = json.loads(json.dumps(ds.state_dict()))
    it.close()  # type: ignore[attr-defined]

    # Untouched shards: the pin checks out and the epoch continues.
    same = _make(urls, case)
    same.load_state_dict(state)
    assert len(list(same)) == 630

    _write(tmp_path, 150, "b")  # same names and counts, other bytes: every offset moves
    refused = _make(urls, case)
    refused.load_state_dict(state)
    with pytest.raises(StateError, match=r"s-0\d\.tar|saved positions") as info:
        list(refused)
    if case != "shuffled":  # (a shuffle buffer's positions are checked first, with their own message)
        assert "changed since the state was saved" in str(info.value) and "if_shards_changed" in str(
            info.value
        )

    restarted = _make(urls, case).if_shards_changed("restart")
    restarted.load_state_dict(state)
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        keys = [s["__key__"] for s in restarted]
    assert len(keys) == 1000 and all(k.startswith("b") for k in keys)
    assert any("restarts from its beginning" in r.getMessage() for r in caplog.records)


def test_a_loader_worker_refuses_a_rewritten_shard(tmp_path: Path) -> None:
    urls = _write(tmp_path, 100, "a")
    loader = ss.WebLoader(ss.ShardStream(urls, seed=1).batched(10), batch_size=None, num_workers=2)
    it = iter(loader)
    for _ in range(17):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    _write(tmp_path, 150, "b")
    resumed = ss.WebLoader(ss.ShardStream(urls, seed=1).batched(10), batch_size=None, num_workers=2)
    resumed.load_state_dict(state)
    with pytest.raises(StateError, match="changed since the state was saved"):
        list(resumed)
    resumed.close()
