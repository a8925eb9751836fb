"""Real ranks (spawned processes, gloo) x 2 DataLoader workers over deliberately uneven shards.

Every rank runs an ``all_reduce`` after every batch. If one rank had fewer batches, its peers would
wait in that collective; the process group's timeout turns the wait into an error, the rank exits
non-zero, and the test fails in seconds instead of hanging CI.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _procs import run_spawned

from shardstream.tar.sharded_writer import ShardWriter
from shardstream.testing import free_port

UNEVEN = [3, 40, 12, 25, 7, 33, 18]  # 7 shards, 138 samples
BATCH = 4
COLLECTIVE_TIMEOUT = 20.0  # seconds a rank may wait for its peers in one collective
JOIN_TIMEOUT = 90.0


@pytest.fixture(autouse=True)
def real_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks inherit this environment: WebLoader's own rule decides there (the suite pins fork)."""
    monkeypatch.delenv("SHARDSTREAM_WORKER_START", raising=False)


def write_shards(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    urls = []
    for s, n in enumerate(UNEVEN):
        with ShardWriter(str(directory / f"d{s:02d}-%d.tar"), maxcount=n) as w:
            for i in range(n):
                w.write({"__key__": f"k{s:02d}_{i:03d}", "cls": i})
        urls.append(str(directory / f"d{s:02d}-0.tar"))
    return urls


def rank_main(
    rank: int,
    world_size: int,
    port: int,
    urls: list[str],
    mode: str,
    epochs: int,
    workers: str | None,
    out: str,
    num_workers: int = 2,
) -> None:
    """One rank: DataLoader with ``num_workers``; all_reduce after every batch; results to ``out``.

    ``workers`` is the workers' start method: None lets WebLoader choose (shardstream's forkserver
    here: the process group's threads run), "fork" as plain torch does, or "spawn", where workers
    cannot see torch.distributed and must get the rank from the pickled dataset.
    """
    import torch
    import torch.distributed as dist

    from shardstream.compat import WebDataset
    from shardstream.loader.loader import WebLoader
    from shardstream.readers.shardlists import split_by_node

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT),
    )
    try:
        if mode == "split_by_node":  # WebDataset's way: uneven ranks, used to prove the harness fails
            dataset = WebDataset(urls, nodesplitter=split_by_node, shardshuffle=False)
        else:
            dataset = WebDataset(urls, split=mode, batch_size=BATCH, seed=11)
        fields = ("__key__", "cls", "__pad__") if mode == "exact" else ("__key__", "cls")
        loader = WebLoader(
            dataset.to_tuple(*fields).batched(BATCH),
            batch_size=None,
            num_workers=num_workers,
            multiprocessing_context=workers if num_workers else None,
        )
        report: dict[str, Any] = {"len": len(loader) if mode != "split_by_node" else -1, "epochs": []}
        for epoch in range(epochs):
            keys: list[str] = []
            pads: list[bool] = []
            batches = 0
            for batch in loader:
                batches += 1
                keys += list(batch[0])
                if mode == "exact":
                    pads += [bool(p) for p in batch[2]]
                step = torch.ones(1)
                dist.all_reduce(step)  # a rank with an extra batch waits here alone -> timeout
                if int(step.item()) != world_size:
                    raise RuntimeError(f"rank {rank}: all_reduce saw {step.item()} ranks")
            counts = torch.tensor([batches])
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)
            if int(counts.item()) != batches:
                raise RuntimeError(f"rank {rank} had {batches} batches, another rank {int(counts.item())}")
            world = dataset.context(epoch).world
            order = dataset.planned.plan(epoch, world).order if dataset.planned is not None else ()
            report["epochs"].append({"batches": batches, "keys": keys, "pads": pads, "order": list(order)})
        loader.close()
        Path(out).write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()


def run_ranks(
    tmp_path: Path, world_size: int, mode: str, epochs: int, workers: str | None = None, num_workers: int = 2
) -> list[dict[str, Any]]:
    """Spawn ``world_size`` ranks, join them with a deadline, kill any survivor by PID."""
    urls = write_shards(tmp_path / "shards")
    port = free_port()
    outs = [str(tmp_path / f"rank{r}.json") for r in range(world_size)]
    codes = run_spawned(
        rank_main,
        [(r, world_size, port, urls, mode, epochs, workers, outs[r], num_workers) for r in range(world_size)],
        timeout=JOIN_TIMEOUT,
    )
    assert codes == [0] * world_size, (
        f"rank exit codes {codes} (a timeout in a collective means unequal batches)"
    )
    return [json.loads(Path(o).read_text()) for o in outs]


@pytest.mark.timeout(150)
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
@pytest.mark.parametrize(
    ("world_size", "num_workers"),
    # 3 ranks x 2 workers (about 20 s) runs with the slow tests, which CI runs; the default
    # suite keeps 2 x 2 and both sizes without workers (under 10 minutes on 2 cores).
    [(2, 0), (2, 2), (3, 0), pytest.param(3, 2, marks=pytest.mark.slow)],
)
def test_equal_mode_every_rank_same_batches_over_three_epochs(
    tmp_path: Path, world_size: int, num_workers: int
) -> None:
    reports = run_ranks(tmp_path, world_size, "equal", epochs=3, num_workers=num_workers)
    expected = sum(UNEVEN) // (world_size * BATCH)
    for epoch in range(3):
        per_rank = [r["epochs"][epoch] for r in reports]
        assert [e["batches"] for e in per_rank] == [expected] * world_size
        keys = [k for e in per_rank for k in e["keys"]]
        assert len(keys) == len(set(keys)) == expected * world_size * BATCH  # no sample twice
        assert all(e["order"] == per_rank[0]["order"] for e in per_rank)  # same plan on all ranks
    assert all(r["len"] == expected for r in reports)
    orders = [tuple(reports[0]["epochs"][e]["order"]) for e in range(3)]
    assert len(set(orders)) == 3  # a fresh permutation every epoch
    firsts = [reports[0]["epochs"][e]["keys"][:BATCH] for e in range(3)]
    assert firsts[0] != firsts[1] or firsts[1] != firsts[2]


@pytest.mark.timeout(150)
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
def test_exact_mode_every_sample_once_over_three_ranks(tmp_path: Path) -> None:
    reports = run_ranks(tmp_path, 3, "exact", epochs=1, workers="spawn")
    per_rank = [r["epochs"][0] for r in reports]
    batches = {e["batches"] for e in per_rank}
    per_rank_samples = -(-sum(UNEVEN) // 3)  # ceil
    assert batches == {-(-per_rank_samples // BATCH)}
    real = [k for e in per_rank for k, pad in zip(e["keys"], e["pads"], strict=True) if not pad]
    assert sorted(real) == sorted(set(real)) and len(real) == sum(UNEVEN)


@pytest.mark.timeout(120)
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
def test_unequal_batches_fail_fast_instead_of_hanging(tmp_path: Path) -> None:
    """The harness itself: WebDataset-style split_by_node gives ranks 12 and 23 batches here."""
    start = time.monotonic()
    with pytest.raises(AssertionError, match="rank exit codes"):
        run_ranks(tmp_path, 2, "split_by_node", epochs=1)
    assert time.monotonic() - start < JOIN_TIMEOUT
