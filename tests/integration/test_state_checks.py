"""Incomplete, foreign or future states are refused before anything runs; older ones are migrated.

The defects these guard against: ``{"epoch": 0}`` (a state that lost its position) silently
restarted the epoch, and a state without its fingerprint skipped every check, so one saved from a
5-shard dataset and loaded into a 4-shard one yielded a wrong number of samples without a word.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import shardstream as ss
from shardstream.errors import StateError
from shardstream.tar import ShardWriter


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("states")
    with ShardWriter(str(root / "s-%02d.tar"), maxcount=200) as sink:
        for i in range(1000):
            sink.write({"__key__": f"{i:04d}", "txt": str(i)})
    return sorted(str(p) for p in root.glob("s-*.tar"))


def _dataset(urls: list[str]) -> ss.ShardStream:
    return ss.ShardStream(urls, seed=3)


def _cut(urls: list[str], n: int) -> tuple[list[str], dict[str, Any]]:
    ds = _dataset(urls)
    it = iter(ds)
    head = [next(it)["__key__"] for _ in range(n)]
    state = json.loads(json.dumps(ds.state_dict()))
    rest = [s["__key__"] for s in it]
    return head + rest, state


def _rest(ds: ss.ShardStream) -> list[str]:
    return [s["__key__"] for s in ds]


def test_a_whole_state_resumes_and_incomplete_ones_are_refused(urls: list[str]) -> None:
    full, state = _cut(urls, 230)
    assert state["version"] == 1 and "nodes" in state and "fingerprint" in state
    resumed = _dataset(urls)
    resumed.load_state_dict(state)
    assert full[:230] + _rest(resumed) == full

    cases = {
        "no position": ({k: v for k, v in state.items() if k != "nodes"}, "incomplete or corrupted"),
        "only an epoch": ({"epoch": 0}, "no 'fingerprint'"),
        "no fingerprint": ({k: v for k, v in state.items() if k != "fingerprint"}, "no 'fingerprint'"),
        "no epoch": ({k: v for k, v in state.items() if k != "epoch"}, "no valid 'epoch'"),
        "two positions": ({**state, "replay": 3}, "exactly one of"),
        "nodes not a list": ({**state, "nodes": {"a": 1}}, "list of node states"),
        "a newer version": ({**state, "version": 7}, "version 7"),
        "not a dict": ([state], "not a pipeline state"),
    }
    for name, (bad, message) in cases.items():
        ds = _dataset(urls)
        with pytest.raises(StateError, match=message):
            ds.load_state_dict(bad)
        assert len(_rest(ds)) == 1000, f"{name}: a refused state must leave the dataset as it was"


def test_a_state_is_refused_by_a_dataset_with_other_shards(urls: list[str]) -> None:
    _, state = _cut(urls, 230)
    with pytest.raises(StateError, match="nshards: saved 5, now 4"):
        _dataset(urls[:4]).load_state_dict(state)


def test_a_state_from_before_versions_is_migrated(urls: list[str]) -> None:
    full, state = _cut(urls, 230)
    legacy = {k: v for k, v in state.items() if k != "version"}
    resumed = _dataset(urls)
    resumed.load_state_dict(legacy)
    assert full[:230] + _rest(resumed) == full
    # An old state taken between epochs named only its epoch (and its fingerprint): the start.
    ds = _dataset(urls)
    list(ds)
    between = {k: v for k, v in ds.state_dict().items() if k not in ("version", "start")}
    assert between["epoch"] == 1
    fresh = _dataset(urls)
    fresh.load_state_dict(between)
    ds.set_epoch(1)
    assert _rest(fresh) == _rest(ds)


@pytest.mark.parametrize("kind", ["web", "threads"])
def test_loader_states_are_checked_worker_by_worker(urls: list[str], kind: str) -> None:
    def make() -> Any:
        ds = _dataset(urls).batched(10)
        if kind == "web":
            return ss.WebLoader(ds, batch_size=None, num_workers=0)
        return ss.Loader(ds, batch_size=None, num_threads=2)

    loader = make()
    full = [list(b["__key__"]) for b in loader]
    loader = make()
    it = iter(loader)
    head = [list(next(it)["__key__"]) for _ in range(23)]
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    assert state["version"] == 2

    broken = {**state, "workers": [{k: v for k, v in state["workers"][0].items() if k != "nodes"}]}
    with pytest.raises(StateError, match="worker 0 of rank 0: the state is incomplete"):
        make().load_state_dict(broken)
    with pytest.raises(StateError, match="version 9"):
        make().load_state_dict({**state, "version": 9})
    with pytest.raises(StateError, match=r"missing \['fingerprint'\]"):
        make().load_state_dict({k: v for k, v in state.items() if k != "fingerprint"})

    resumed = make()
    resumed.load_state_dict(state)
    assert head + [list(b["__key__"]) for b in resumed] == full
    # Version 1 (its start positions named only the epoch) is migrated.
    v1 = {**state, "version": 1, "workers": [{"epoch": state["epoch"]}]}
    migrated = make()
    migrated.load_state_dict(v1)
    assert [list(b["__key__"]) for b in migrated] == full
