"""The length of a mixture under loader workers: ``len(loader)`` is the number of batches (or
items) the loader really yields, with 0, 2 or 3 DataLoader workers (each mixing and batching its
own share, a partial batch per worker), WebLoader and ss.Loader (threads and processes), for
every stop rule with a length, and the same on every rank (2 gloo ranks).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _lengths import check_lengths, count
from _procs import run_spawned
from _resume_cases import write_shards

import shardstream as ss
from shardstream.testing import free_port

# 3 workers on a 2-core machine: torch warns about it, the test wants exactly that
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

#: Uneven sources, shard sizes each (6 shards or more: a slot per rank and worker of 2 x 3).
SOURCES = [
    [9, 14, 11, 17, 12, 20],
    [6, 15, 7, 8, 13, 5],
    [21, 4, 9, 10, 7, 16, 3],
    [30, 12, 25, 18, 9, 14],
]
SPLIT_BATCH = [3, 2, 4, 1]  # each source's quotas in whole batches of its own size
WEIGHTS = [0.4, 0.3, 0.2, 0.1]
STOPS = ("first_exhausted", "all_exhausted", "longest")
BATCH = 5  # no quota above is a multiple of it: partial batches in every worker


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    flat = write_shards(tmp_path_factory.mktemp("mix-length"), [n for s in SOURCES for n in s])
    out, at = [], 0
    for sizes in SOURCES:
        out.append(flat[at : at + len(sizes)])
        at += len(sizes)
    return out


def mixture(urls: list[list[str]], k: int, stop: str) -> ss.Mix:
    """The first ``k`` sources, each with its own seed and split batch size."""
    split = [ss.SplitPolicy("equal", batch_size=b) for b in SPLIT_BATCH]
    sources = [ss.ShardStream(urls[i], seed=10 + i, split=split[i]) for i in range(k)]
    return ss.Mix(sources, weights=WEIGHTS[:k], stop=stop, seed=3)


def loaders(urls: list[list[str]], k: int, stop: str) -> dict[str, Any]:
    """Every way of loading the mixture: WebLoader batching in the pipeline or in the DataLoader
    (per worker), or not at all (items), with 0, 2 and 3 workers; ss.Loader threads and processes."""
    tuples = [mixture(urls, k, stop).to_tuple("__key__", "cls") for _ in range(9)]
    return {
        "web0 pipeline": ss.WebLoader(tuples[0].batched(BATCH), batch_size=None, num_workers=0),
        "web2 pipeline": ss.WebLoader(tuples[1].batched(BATCH), batch_size=None, num_workers=2),
        "web3 pipeline full batches": ss.WebLoader(
            tuples[2].batched(BATCH, partial=False), batch_size=None, num_workers=3
        ),
        "web0 loader": ss.WebLoader(tuples[3], batch_size=BATCH, num_workers=0),
        "web3 loader": ss.WebLoader(tuples[4], batch_size=BATCH, num_workers=3),
        "web2 loader drop_last": ss.WebLoader(tuples[5], batch_size=BATCH, num_workers=2, drop_last=True),
        "web3 items": ss.WebLoader(tuples[6], batch_size=None, num_workers=3),
        "ss threads": ss.Loader(tuples[7], batch_size=BATCH, num_threads=2),
        "ss processes": ss.Loader(tuples[8], batch_size=BATCH, num_workers=2),
    }


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("k", [2, 3, 4])
def test_len_of_every_loader_is_what_it_yields(urls: list[list[str]], k: int, stop: str) -> None:
    single = mixture(urls, k, stop)
    items = sum(1 for _ in single)
    assert len(single) == items, "one process: len(mix) is the items it yields"
    check_lengths(loaders(urls, k, stop), f"{k} sources, {stop}")


def test_a_plain_split_batched_by_another_size_counts_per_worker(urls: list[list[str]]) -> None:
    """Quotas of whole batches of 4 per worker, batched by 3 in each of 3 workers."""
    ds = ss.ShardStream(urls[0], seed=1, split=ss.SplitPolicy("equal", batch_size=4)).to_tuple("__key__")
    for workers in (0, 2, 3):
        with ss.WebLoader(ds, batch_size=3, num_workers=workers) as loader:
            assert len(loader) == count(loader)[0], workers


@pytest.mark.parametrize("stop", STOPS)
def test_a_worker_without_a_share_of_a_source(urls: list[list[str]], stop: str) -> None:
    """Source 1 has 2 batches of 20 per rank: the third worker gets none of it (it leaves that
    worker's mixture at its first pick, or ends it, by the stop rule)."""
    sources = [
        ss.ShardStream(urls[0], seed=1, split=ss.SplitPolicy("equal", batch_size=3)),
        ss.ShardStream(urls[1], seed=2, split=ss.SplitPolicy("equal", batch_size=20)),
    ]
    pipe = ss.Mix(sources, weights=[0.3, 0.7], stop=stop, seed=4).to_tuple("__key__", "cls")
    for workers in (2, 3):
        with ss.WebLoader(pipe.batched(BATCH), batch_size=None, num_workers=workers) as loader:
            assert len(loader) == count(loader)[0], (stop, workers)


def test_length_is_fast_for_thousands_of_shards() -> None:
    """4 sources of 10,000 shards (counts from a mapping: nothing read) and 8 workers. (In an
    empty in-memory store: local shards would have to exist, the dataset checks them.)"""
    sources = []
    for s in range(4):
        names = [f"memory://nowhere/src{s}-{i:05d}.tar" for i in range(10_000)]
        index = {n.rpartition("/")[2]: 50 + (i * 7 + s) % 90 for i, n in enumerate(names)}
        split = ss.SplitPolicy("equal", batch_size=16, index=index)
        sources.append(ss.ShardStream(names, seed=s, split=split))
    for stop in STOPS:
        mix = ss.Mix(sources, weights=WEIGHTS, stop=stop).batched(16)
        loader = ss.WebLoader(mix, batch_size=None, num_workers=8)
        start = time.perf_counter()
        assert len(loader) > 0 and len(mix) > 0
        assert time.perf_counter() - start < 0.5, stop


def test_with_length_and_endless_mixtures_keep_their_rules(urls: list[list[str]]) -> None:
    declared = mixture(urls, 2, "first_exhausted").with_length(7, silent=True)
    assert len(ss.WebLoader(declared, batch_size=2, num_workers=2)) == 4  # declared: the rank's total
    endless = mixture(urls, 2, "never")
    with pytest.raises(TypeError, match="endless"):
        len(ss.WebLoader(endless, batch_size=2, num_workers=2))
    unknown = ss.Mix([ss.ShardStream(urls[0]), ss.ShardStream(urls[1])])
    with pytest.raises(TypeError, match=r"source\(s\) \[0, 1\] is unknown"):
        len(ss.WebLoader(unknown, batch_size=2, num_workers=2))


# -- two gloo ranks -------------------------------------------------------------------------------
def _rank_main(rank: int, port: int, urls: list[list[str]], out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    try:
        report = []
        for stop in STOPS:
            for workers in (0, 3):
                pipe = mixture(urls, 4, stop).to_tuple("__key__", "cls").batched(BATCH)
                with ss.WebLoader(pipe, batch_size=None, num_workers=workers) as loader:
                    length, batches = len(loader), 0
                    for _ in loader:
                        batches += 1
                        dist.all_reduce(torch.ones(1))  # a rank with an extra batch would wait here alone
                report.append([stop, workers, length, batches])
            made = ss.Loader(
                mixture(urls, 3, stop).to_tuple("__key__", "cls"), batch_size=BATCH, num_workers=2
            )
            try:
                report.append([stop, "ss", len(made), sum(1 for _ in made)])
            finally:
                made.close()
        Path(out).write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
@pytest.mark.timeout(500)
def test_two_ranks_agree_and_yield_their_length(urls: list[list[str]], tmp_path: Path) -> None:
    port = free_port()
    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    assert run_spawned(_rank_main, [(r, port, urls, outs[r]) for r in range(2)], timeout=400) == [0, 0]
    reports = [json.loads(Path(o).read_text()) for o in outs]
    assert reports[0] == reports[1]
    for stop, workers, length, batches in reports[0]:
        assert length == batches > 0, (stop, workers)
