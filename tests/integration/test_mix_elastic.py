"""ss.Mix resumed elastically: another num_workers (WebLoader's DataLoader workers, ss.Loader
threads <-> processes) and another world size (gloo ranks, every rank's state).

Per source, the samples yielded before the restore plus those after it are the uninterrupted
epoch's (the old shape's): none twice, none lost. With split="equal" sources every rank yields
the same number of batches (an all_reduce after every batch: a rank with another count fails the
collective). What cannot be re-split exactly is refused, naming why.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _mix_cases import make as make_case
from _mix_cases import write_shards
from _procs import run_spawned

import shardstream as ss
from shardstream.errors import StateError
from shardstream.testing import free_port

# 3 workers on a 2-core machine: torch warns about it, the test wants exactly that
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("mix-elastic"))


def mixture(
    urls: list[str], stop: str, *, split: Any = None, shuffle_in: int | None = None, batch: int = 4
) -> Any:
    """Source 0 is shards 0-3, source 1 shards 4-7 (keys ``s<shard>_<i>``); ``shuffle_in``: a
    shuffle inside source ``shuffle_in``."""
    split = split if split is not None else ss.SplitPolicy("equal", batch_size=batch)
    sources = [ss.ShardStream(urls[:4], seed=5, split=split), ss.ShardStream(urls[4:], seed=6, split=split)]
    if shuffle_in is not None:
        sources[shuffle_in] = sources[shuffle_in].shuffle(10)
    return ss.Mix(sources, weights=[0.6, 0.4], stop=stop, seed=2).to_tuple("__key__", "cls")


def loader(urls: list[str], stop: str, workers: int, *, after: bool = False, **kw: Any) -> ss.WebLoader:
    """``after``: a shuffle buffer after the mixture (its positions name source and pass)."""
    pipe = mixture(urls, stop, **kw)
    if after:
        pipe = pipe.shuffle(7)
    return ss.WebLoader(pipe.batched(4), batch_size=None, num_workers=workers)


def source_of(key: str) -> int:
    return int(int(key[1 : key.index("_")]) >= 4)


def by_source(keys: list[str]) -> dict[int, Counter[str]]:
    return {s: Counter(k for k in keys if source_of(k) == s) for s in (0, 1)}


def _keys(batches: Any) -> list[str]:
    try:
        return [k for b in batches for k in b[0]]
    finally:
        batches.close()


def _seen_and_state(made: Any, n: int) -> tuple[list[str], dict[str, Any]]:
    it = iter(made)
    seen = [k for _ in range(n) for k in next(it)[0]]
    state = json.loads(json.dumps(made.state_dict()))
    made.close()
    return seen, state


@pytest.mark.parametrize(
    ("stop", "after"), [("first_exhausted", False), ("all_exhausted", True), ("longest", False)]
)
@pytest.mark.parametrize(("before", "then"), [(2, 3), (3, 1)])
def test_another_num_workers_yields_each_sources_rest_exactly(
    urls: list[str], stop: str, after: bool, before: int, then: int
) -> None:
    full_keys = _keys(loader(urls, stop, before, after=after))
    full, n = by_source(full_keys), -(-len(full_keys) // 4)
    for cut in (1, n // 2, n - 1):
        seen, state = _seen_and_state(loader(urls, stop, before, after=after), cut)
        resumed = loader(urls, stop, then, after=after)
        resumed.load_state_dict(state)
        rest = _keys(resumed)
        assert by_source(seen + rest) == full, f"{stop}: {before} -> {then} workers after {cut} batches"
    # an elastically resumed loader's own state restores exactly with its num_workers, and
    # elastically again with another
    seen, state = _seen_and_state(loader(urls, stop, before, after=after), n // 2)
    resumed = loader(urls, stop, then, after=after)
    resumed.load_state_dict(state)
    more, again = _seen_and_state(resumed, 2)
    exact = loader(urls, stop, then, after=after)
    exact.load_state_dict(again)
    elastic = loader(urls, stop, before, after=after)
    elastic.load_state_dict(again)
    rest = _keys(exact)
    assert by_source(seen + more + rest) == full
    assert by_source(seen + more + _keys(elastic)) == full


@pytest.mark.parametrize(("before", "then"), [("threads", "processes"), ("processes", "threads")])
def test_ss_loader_threads_and_processes_resume_each_other(urls: list[str], before: str, then: str) -> None:
    full = by_source(_keys(make_case("equal", urls, before)))
    n = -(-sum(map(sum, (c.values() for c in full.values()))) // 4)
    for cut in (1, n // 2):
        seen, state = _seen_and_state(make_case("equal", urls, before), cut)
        resumed = make_case("equal", urls, then, 1)
        resumed.load_state_dict(state)
        assert by_source(seen + _keys(resumed)) == full, f"{before} -> {then} after {cut} batches"


def test_an_endless_mixture_reads_every_pass_of_every_source_once(urls: list[str]) -> None:
    """stop="never": the rest of every old worker's passes, up to the highest pass any had
    reached, then the new world's next passes (shard-list sources: counts unknown)."""
    sizes = {0: sum([9, 14, 11, 17]), 1: sum([12, 20, 6, 15])}
    for cut in (1, 12, 40):
        seen, state = _seen_and_state(loader(urls, "never", 2, split="shards"), cut)
        passes = [m["nodes"][0]["passes"] for m in state["workers"] if m is not None]
        top = [max(p[s] for p in passes) for s in (0, 1)]
        resumed = loader(urls, "never", 1, split="shards")
        resumed.load_state_dict(state)
        it = iter(resumed)
        rest = [k for _ in range(120) for k in next(it)[0]]
        resumed.close()
        for s in (0, 1):
            mine = [k for k in seen if source_of(k) == s]
            after = [k for k in rest if source_of(k) == s][: (top[s] + 1) * sizes[s] - len(mine)]
            counts = Counter(mine + after)
            assert len(counts) == sizes[s] and set(counts.values()) == {top[s] + 1}, (cut, s, top)


def test_what_cannot_be_resplit_exactly_is_refused_naming_why(urls: list[str]) -> None:
    # a source that shuffles inside, cut part-way by first_exhausted: which samples is the shuffle's
    _, state = _seen_and_state(loader(urls, "first_exhausted", 2, shuffle_in=1), 3)
    with pytest.raises(StateError, match="source 1 of the mixture shuffles its samples.*Shuffle after"):
        loader(urls, "first_exhausted", 3, shuffle_in=1).load_state_dict(state)
    loader(urls, "first_exhausted", 2, shuffle_in=1).load_state_dict(state)  # exact: accepted
    # shard lists: where the old workers would have stopped depends on counts nobody knows
    for stop in ("first_exhausted", "all_exhausted"):
        _, state = _seen_and_state(loader(urls, stop, 2, split="shards"), 1)
        with pytest.raises(StateError, match="source 0 .* shard list .* counts are unknown"):
            loader(urls, stop, 1, split="shards").load_state_dict(state)
    # an endless stream's with_epoch windows continue across epochs

    def windows(workers: int) -> ss.WebLoader:
        pipe = mixture(urls, "never").with_epoch(30).batched(4)
        return ss.WebLoader(pipe, batch_size=None, num_workers=workers)

    _, state = _seen_and_state(windows(2), 2)
    with pytest.raises(StateError, match="with_epoch"):
        windows(1).load_state_dict(state)


def test_sources_with_their_own_world_are_not_moved_between_ranks(urls: list[str]) -> None:
    from shardstream.readers import resplit_mixture

    split = ss.SplitPolicy("equal", batch_size=4)
    own = ss.World(rank=0, world_size=1)
    sources = [ss.ShardStream(urls[:4], split=split, world=own), ss.ShardStream(urls[4:], split=split)]
    mix = ss.Mix(sources)
    old = [(ss.World(rank=r, world_size=2, worker=0, num_workers=1), None) for r in range(2)]
    with pytest.raises(StateError, match=r"sources \[0\] of the mixture have their own world="):
        resplit_mixture(mix, 0, old, 1, 0, 2, saved=mix.fingerprint())


# -- another world size, real ranks (gloo) ------------------------------------------------------
GLOBAL_BATCH = 8
STOP_AT = 3


def _rank_main(rank: int, world: int, port: int, urls: list[str], phase: str, workers: int, out: str) -> None:
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

        def make() -> ss.WebLoader:
            pipe = mixture(urls, "first_exhausted", batch=batch).batched(batch)
            return ss.WebLoader(pipe, batch_size=None, num_workers=workers)

        report: dict[str, Any] = {}
        if phase == "stop":
            report["full"] = _keys(make())
            interrupted = make()
            it = iter(interrupted)
            report["seen"] = [k for _ in range(STOP_AT) for k in next(it)[0]]
            states: list[Any] = [None] * world
            dist.all_gather_object(states, interrupted.state_dict())  # every rank's own state
            interrupted.close()
            report["states"] = states
        else:
            resumed = make()
            resumed.load_state_dict(json.loads(Path(phase).read_text()))
            rest, batches = [], 0
            for b in resumed:
                rest += list(b[0])
                batches += 1
                dist.all_reduce(torch.ones(1))  # a rank with an extra batch would wait here alone
            counts = torch.tensor([batches])
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)
            resumed.close()
            report.update(rest=rest, batches=batches, max_batches=int(counts.item()))
        Path(out).write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()


def _run_ranks(tmp: Path, world: int, urls: list[str], phase: str, workers: int) -> list[dict[str, Any]]:
    port = free_port()
    outs = [str(tmp / f"{Path(phase).stem}-{world}x{workers}-{r}.json") for r in range(world)]
    args = [(r, world, port, urls, phase, workers, outs[r]) for r in range(world)]
    assert run_spawned(_rank_main, args, timeout=150) == [0] * world
    return [json.loads(Path(o).read_text()) for o in outs]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
@pytest.mark.timeout(500)
def test_two_ranks_resume_on_one_and_with_other_workers(urls: list[str], tmp_path: Path) -> None:
    before = _run_ranks(tmp_path, 2, urls, "stop", 2)
    full = by_source([k for r in before for k in r["full"]])
    seen = [k for r in before for k in r["seen"]]
    states = tmp_path / "states.json"
    states.write_text(json.dumps(before[0]["states"]))
    for world, workers in ((1, 2), (2, 3)):
        after = _run_ranks(tmp_path, world, urls, str(states), workers)
        rest = [k for r in after for k in r["rest"]]
        assert by_source(seen + rest) == full, f"2 ranks x 2 workers -> {world} x {workers}"
        assert len({r["batches"] for r in after} | {r["max_batches"] for r in after}) == 1
