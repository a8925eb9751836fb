"""ss.Mix under the loaders: exact resume in a fresh process (WebLoader with 0 and 2 workers,
ss.Loader threads and processes), and 2 gloo ranks with split="equal" sources (an all_reduce
after every batch: a rank with another batch count fails the collective in seconds)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _loader_cases import state_after
from _mix_cases import LOADERS, keys, make, write_shards
from _procs import run_job, run_spawned

import shardstream as ss
from shardstream.testing import free_port

HERE = Path(__file__).resolve().parent
COLLECTIVE_TIMEOUT = 20.0
JOIN_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("mix-resume"))


def _epoch(loader: Any) -> list[list[str]]:
    try:
        return [keys(b) for b in loader]
    finally:
        loader.close()


@pytest.mark.parametrize("loader", LOADERS)
def test_mixture_resumes_exactly_in_a_fresh_process(urls: list[str], tmp_path: Path, loader: str) -> None:
    runs, expected = [], []
    for case in ("shuffled", "equal"):
        full = _epoch(make(case, urls, loader))
        assert len(full) > 6, (case, loader)
        for n in sorted({1, len(full) // 2, len(full) - 1}):
            state = state_after(make(case, urls, loader), n)
            # ss.Loader's threads never enter the state: restored with another number of them.
            runs.append({"case": case, "loader": loader, "num_threads": 1, "state": state})
            expected.append((case, n, full))
    restored = run_job(HERE / "_mix_cases.py", {"urls": urls, "runs": runs}, tmp_path)
    for (case, n, full), rest in zip(expected, restored, strict=True):
        assert full[:n] + rest == full, f"{case} with {loader}: resumed after {n} of {len(full)} batches"


def test_the_next_epoch_after_a_resumed_one_is_the_uninterrupted_run_s(urls: list[str]) -> None:
    loader = make("shuffled", urls, "web2")
    first, second = [keys(b) for b in loader], [keys(b) for b in loader]
    loader.close()
    assert first != second
    state = state_after(make("shuffled", urls, "web2"), 4)
    resumed = make("shuffled", urls, "web2")
    resumed.load_state_dict(state)
    assert first[:4] + [keys(b) for b in resumed] == first
    assert _epoch(resumed) == second


def rank_main(rank: int, world_size: int, port: int, urls: list[str], out: str) -> None:
    """One rank: mixtures of two split="equal" sources through a WebLoader (2 persistent workers
    for first_exhausted, none for all_exhausted), an all_reduce after every batch; two epochs, the
    state taken after 3 batches of the first, then restored into a new loader."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT),
    )

    def make_loader(stop: str, workers: int) -> ss.WebLoader:
        by_shard = ss.SplitPolicy("equal", batch_size=4)
        by_sample = ss.SplitPolicy("equal", batch_size=4, granularity="sample")
        sources = [
            ss.ShardStream(urls[:5], seed=1, split=by_shard),
            ss.ShardStream(urls[5:], seed=2, split=by_sample),
        ]
        mix = ss.Mix(sources, weights=[0.7, 0.3], stop=stop, seed=4)
        batches = mix.to_tuple("__key__").batched(4)
        return ss.WebLoader(batches, batch_size=None, num_workers=workers, persistent_workers=workers > 0)

    def step() -> None:
        ones = torch.ones(1)
        dist.all_reduce(ones)  # a rank with an extra batch waits here alone -> timeout
        if int(ones.item()) != world_size:
            raise RuntimeError(f"rank {rank}: all_reduce saw {ones.item()} ranks")

    try:
        report: dict[str, Any] = {}
        for stop, workers in (("first_exhausted", 2), ("all_exhausted", 0)):
            loader = make_loader(stop, workers)
            epochs, state = [], None
            for epoch in range(2):
                batches: list[list[str]] = []
                for batch in loader:
                    batches.append(list(batch[0]))
                    step()
                    if epoch == 0 and len(batches) == 3:
                        state = json.loads(json.dumps(loader.state_dict()))
                epochs.append(batches)
            loader.close()
            resumed = make_loader(stop, workers)
            assert state is not None
            resumed.load_state_dict(state)
            rest = []
            for batch in resumed:
                rest.append(list(batch[0]))
                step()
            resumed.close()
            report[stop] = {"epochs": epochs, "resumed": epochs[0][:3] + rest}
        Path(out).write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(200)
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
def test_two_ranks_with_equal_sources_get_equal_batches_and_resume(
    urls: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHARDSTREAM_WORKER_START", raising=False)  # the ranks run the real rule
    port = free_port()
    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    codes = run_spawned(rank_main, [(r, 2, port, urls, outs[r]) for r in range(2)], timeout=JOIN_TIMEOUT)
    assert codes == [0, 0], f"rank exit codes {codes} (a timeout in a collective means unequal batches)"
    reports = [json.loads(Path(o).read_text()) for o in outs]
    for stop in ("first_exhausted", "all_exhausted"):
        for epoch in range(2):
            per_rank = [r[stop]["epochs"][epoch] for r in reports]
            assert len(per_rank[0]) == len(per_rank[1]) > 3, (stop, epoch)
            if stop == "first_exhausted":  # nothing repeats, within a rank or across ranks
                flat = [k for batches in per_rank for b in batches for k in b]
                assert len(flat) == len(set(flat))
        for r in reports:  # the resumed epoch is the uninterrupted one, batch for batch
            assert r[stop]["resumed"] == r[stop]["epochs"][0]
        assert reports[0][stop]["epochs"][0] != reports[0][stop]["epochs"][1]  # a new plan per epoch
    for r in reports:  # the small source repeats under all_exhausted
        keys = [k for b in r["all_exhausted"]["epochs"][0] for k in b]
        assert len(keys) > len(set(keys))


def test_another_number_of_workers_resumes_elastically(urls: list[str]) -> None:
    """Another num_workers re-splits the rest (test_mix_elastic.py); it was refused before issue 26."""
    full = _epoch(make("equal", urls, "web2"))
    state = state_after(make("equal", urls, "web2"), 2)
    resumed = make("equal", urls, "web0")
    resumed.load_state_dict(state)
    rest = _epoch(resumed)
    assert Counter(k for b in full[:2] + rest for k in b) == Counter(k for b in full for k in b)
