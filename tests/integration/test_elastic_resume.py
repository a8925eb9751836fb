"""Elastic resume: another num_workers, or another world size with the same global batch.

The rest of the epoch must be exactly the samples the interrupted run had not yielded (as a
multiset: none twice, none lost), with every rank still yielding the same number of batches.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _procs import run_spawned
from _resume_cases import keys, make, write_shards

import shardstream as ss
from shardstream.errors import StateError
from shardstream.testing import free_port

CUTS = (1, 3, 6, 9)
# 3 workers on a 2-core machine: torch warns about it, the test wants exactly that
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("elastic"))


def _epoch(loader: ss.WebLoader) -> list[str]:
    return [k for batch in loader for k in keys(batch)]


@pytest.mark.parametrize("case", ["shuffled", "equal", "webdataset"])
@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (2, 0), (0, 2)])
def test_another_num_workers_continues_with_exactly_the_unseen_samples(
    urls: list[str], case: str, before: int, after: int
) -> None:
    full = Counter(_epoch(make(case, urls, before)))
    for cut in CUTS:
        loader = make(case, urls, before)
        it = iter(loader)
        seen = [k for _ in range(cut) for k in keys(next(it))]
        state = json.loads(json.dumps(loader.state_dict()))
        loader.close()
        resumed = make(case, urls, after)
        resumed.load_state_dict(state)
        rest = _epoch(resumed)
        assert Counter(seen) + Counter(rest) == full, f"{case} {before}->{after} workers, cut at {cut}"
        if case == "equal":  # the rank still yields its planned number of batches
            assert cut + len([b for b in make(case, urls, after)]) > 0
            assert len(rest) == sum(full.values()) - len(seen)
        # the state of an elastically resumed loader restores exactly with its own num_workers
        again = make(case, urls, after)
        again.load_state_dict(state)
        it = iter(again)
        first = keys(next(it)) if rest else []
        mid = json.loads(json.dumps(again.state_dict()))
        again.close()
        final = make(case, urls, after)
        final.load_state_dict(mid)
        assert first + _epoch(final) == rest, f"{case}: re-saving after an elastic resume"


def test_another_global_batch_is_refused_naming_both(urls: list[str]) -> None:
    loader = make("equal", urls, 2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    loader.close()
    other = ss.WebLoader(
        ss.ShardStream(urls, seed=5, split=ss.SplitPolicy("equal", batch_size=5))
        .to_tuple("__key__")
        .batched(5),
        batch_size=None,
        num_workers=2,
    )
    with pytest.raises(StateError, match="split_batch: saved 4, now 5"):
        other.load_state_dict(state)


def test_a_world_size_change_needs_every_ranks_state(urls: list[str]) -> None:
    loader = make("equal", urls, 2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    loader.close()
    # as if saved by rank 0 of 2 with half the batch (the same global batch)
    state = {**state, "rank": 0, "world_size": 2, "fingerprint": {**state["fingerprint"], "split_batch": 2}}
    with pytest.raises(StateError, match="needs every rank's state"):
        make("equal", urls, 2).load_state_dict(state)


def test_a_stage_that_cannot_be_resplit_is_named(urls: list[str]) -> None:
    def build(workers: int) -> ss.WebLoader:
        ds = ss.ShardStream(urls, seed=3).rsample(0.7).to_tuple("__key__").batched(4)
        return ss.WebLoader(ds, batch_size=None, num_workers=workers)

    loader = build(2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    loader.close()
    with pytest.raises(StateError, match="stage _RandomSample .* cannot be re-split"):
        build(1).load_state_dict(state)
    build(2).load_state_dict(state)  # the same workers: exact, accepted


# -- another world size, with real ranks (gloo) ------------------------------------------------
GLOBAL_BATCH = 6
STOP_AT = 3
COUNTS = [13, 17, 11, 19, 23, 9, 15, 21]


def _rank_main(
    rank: int, world: int, port: int, urls: list[str], phase: str, state_file: str, out: str
) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    try:
        batch = GLOBAL_BATCH // world

        def loader() -> ss.WebLoader:
            ds = ss.ShardStream(urls, seed=9, split=ss.SplitPolicy("equal", batch_size=batch))
            return ss.WebLoader(ds.to_tuple("__key__").batched(batch), batch_size=None, num_workers=2)

        report: dict[str, Any] = {}
        if phase == "stop":
            report["full"] = [k for b in loader() for k in b[0]]
            interrupted = loader()
            it = iter(interrupted)
            report["seen"] = [k for _ in range(STOP_AT) for k in next(it)[0]]
            states: list[Any] = [None] * world
            dist.all_gather_object(states, interrupted.state_dict())  # each rank's own state
            interrupted.close()
            if rank == 0:
                Path(state_file).write_text(json.dumps(states))
        else:
            resumed = loader()
            resumed.load_state_dict(json.loads(Path(state_file).read_text()))
            rest, batches = [], 0
            for b in resumed:
                rest += list(b[0])
                batches += 1
                step = torch.ones(1)
                dist.all_reduce(step)  # a rank with an extra batch would wait here alone
            counts = torch.tensor([batches])
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)
            report.update(rest=rest, batches=batches, max_batches=int(counts.item()))
        Path(out).write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()


def _run_ranks(tmp: Path, world: int, urls: list[str], phase: str) -> list[dict[str, Any]]:
    port = free_port()
    outs = [str(tmp / f"{phase}{r}.json") for r in range(world)]
    args = [(r, world, port, urls, phase, str(tmp / "states.json"), outs[r]) for r in range(world)]
    assert run_spawned(_rank_main, args, timeout=150) == [0] * world
    return [json.loads(Path(o).read_text()) for o in outs]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
@pytest.mark.timeout(400)
def test_two_ranks_resume_on_three_with_the_same_global_batch(tmp_path: Path) -> None:
    urls = []
    for s, n in enumerate(COUNTS):
        with ss.ShardWriter(str(tmp_path / f"w{s}-%02d.tar"), maxcount=1000) as sink:
            for i in range(n):
                sink.write({"__key__": f"w{s}_{i:03d}", "cls": i})
        urls.append(str(tmp_path / f"w{s}-00.tar"))
    before = _run_ranks(tmp_path, 2, urls, "stop")
    after = _run_ranks(tmp_path, 3, urls, "resume")
    full = Counter(k for r in before for k in r["full"])
    seen = Counter(k for r in before for k in r["seen"])
    rest = Counter(k for r in after for k in r["rest"])
    assert seen + rest == full
    assert len({r["batches"] for r in after} | {r["max_batches"] for r in after}) == 1
    # 2 ranks x 3 = 3 ranks x 2: the remaining global batches are the uninterrupted run's
    assert after[0]["batches"] == len(before[0]["full"]) // (GLOBAL_BATCH // 2) - STOP_AT


def test_a_rank_state_loaded_on_another_rank_is_refused(urls: list[str]) -> None:
    def build(rank: int) -> ss.WebLoader:
        world = ss.World(rank=rank, world_size=2)
        ds = ss.ShardStream(urls, seed=5, world=world, split=ss.SplitPolicy("equal", batch_size=2))
        return ss.WebLoader(ds.to_tuple("__key__").batched(2), batch_size=None, num_workers=0)

    loader = build(1)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    with pytest.raises(StateError, match="saved on rank 1 of 2 and is loaded on rank 0 of 2"):
        build(0).load_state_dict(state)
    build(1).load_state_dict(state)
    build(0).load_state_dict([state, state | {"rank": 0}])  # every rank's states: each takes its own


def test_each_rank_keeps_its_own_rest_over_other_workers(urls: list[str]) -> None:
    """The same world size, another num_workers: a rank re-splits its own rest over its own new
    workers (before issue 26 it kept one world-size share of it: samples were lost)."""

    def build(rank: int, workers: int) -> ss.WebLoader:
        world = ss.World(rank=rank, world_size=2)
        ds = ss.ShardStream(urls, seed=5, world=world, split=ss.SplitPolicy("equal", batch_size=4))
        return ss.WebLoader(ds.to_tuple("__key__").batched(4), batch_size=None, num_workers=workers)

    for rank in (0, 1):
        full = Counter(_epoch(build(rank, 2)))
        loader = build(rank, 2)
        it = iter(loader)
        seen = [k for _ in range(2) for k in keys(next(it))]
        state = json.loads(json.dumps(loader.state_dict()))
        loader.close()
        resumed = build(rank, 3)
        resumed.load_state_dict(state)
        assert Counter(seen) + Counter(_epoch(resumed)) == full, f"rank {rank}"
