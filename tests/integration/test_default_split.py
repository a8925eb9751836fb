"""The native ``ss.ShardStream(urls)`` default under real ranks (spawned processes, gloo).

ShardWriter output whose last shard is short (20, 20, 20, 20, 10 samples): whole shards per rank,
the old default, gave rank 0 three shards and rank 1 two (13-15 against 8-10 batches of 4), and a
rank left without batches waited in the next all-reduce. Now every rank gets the same number of
batches with no ``split=`` given, through ``WebLoader`` and a plain torch ``DataLoader``, with 0
and 2 workers; every rank runs an ``all_reduce`` after every batch, with a short collective
timeout, so unequal counts fail in seconds instead of hanging. (Workers start by fork, as the
suite pins them; ``test_distributed.py`` covers the other start methods.) The same ranks check
that a dataset built before ``init_process_group`` refuses the epoch with the clear error, and
that a remote spec without sample counts refuses the default at construction.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _procs import run_spawned
from _servers import HTTPFileServer

import shardstream as ss
from shardstream.testing import free_port

COUNTS = [20, 20, 20, 20, 10]
BATCH = 4
COLLECTIVE_TIMEOUT = 20.0
JOIN_TIMEOUT = 100.0


def _batches(loader: Any, dist: Any, torch: Any, world_size: int) -> int:
    """Iterate ``loader`` with an all_reduce after every batch; the batch count, checked equal."""
    batches = 0
    for _ in loader:
        batches += 1
        step = torch.ones(1)
        dist.all_reduce(step)  # a rank with an extra batch waits here alone -> timeout
    counts = torch.tensor([batches])
    dist.all_reduce(counts, op=dist.ReduceOp.MAX)
    if int(counts.item()) != batches:
        raise RuntimeError(f"rank {dist.get_rank()}: {batches} batches, another rank {int(counts.item())}")
    return batches


def rank_main(rank: int, world_size: int, port: int, spec: str, remote: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    early = ss.ShardStream(spec)  # built before the process group: for one rank
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT),
    )
    report: dict[str, Any] = {}
    try:
        dataset = ss.ShardStream(spec)  # the default, with the world known
        report["split"] = dataset.split.mode
        for workers in (0, 2):
            web = ss.WebLoader(dataset.batched(BATCH), batch_size=None, num_workers=workers)
            report[f"webloader/{workers}"] = _batches(web, dist, torch, world_size)
            report[f"len/{workers}"] = len(web)
            web.close()
            # (fork, as the suite pins for WebLoader: a forkserver's workers import torch afresh)
            plain = DataLoader(
                dataset,
                batch_size=BATCH,
                num_workers=workers,
                multiprocessing_context="fork" if workers else None,
            )
            report[f"dataloader/{workers}"] = _batches(plain, dist, torch, world_size)
        try:
            next(iter(early))
        except ss.ConfigurationError as exc:
            report["early"] = str(exc)
        try:
            ss.ShardStream(remote)
        except ss.ConfigurationError as exc:
            report["remote"] = str(exc)
        Path(out).write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(240)
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
def test_the_default_gives_every_rank_the_same_batches(tmp_path: Path, http_server: HTTPFileServer) -> None:
    directory = tmp_path / "shards"
    directory.mkdir()
    with ss.ShardWriter(str(directory / "part-%06d.tar"), maxcount=COUNTS[0]) as sink:
        for i in range(sum(COUNTS)):
            sink.write({"__key__": f"k{i:04d}", "cls": i})
    served = sorted(directory.glob("*.tar"))
    assert [len(list(ss.ShardStream(str(p), split="shards"))) for p in served] == COUNTS
    for p in served:  # the same shards over HTTP, without their index
        http_server.write(f"unindexed/{p.name}", p.read_bytes())
    remote = http_server.url_for("unindexed/part-{000000..000004}.tar")
    spec = str(directory / "part-{000000..000004}.tar")
    port = free_port()
    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    codes = run_spawned(
        rank_main, [(r, 2, port, spec, remote, outs[r]) for r in range(2)], timeout=JOIN_TIMEOUT
    )
    assert codes == [0, 0], f"rank exit codes {codes} (a timeout in a collective means unequal batches)"
    reports = [json.loads(Path(o).read_text()) for o in outs]
    # 90 samples, 45 per rank: one process batches them into 12; two workers get quotas of 23
    # and 22 samples and each batches its own (6 + 6).
    for report in reports:
        assert report["split"] == "equal"
        for workers in (0, 2):
            assert report[f"webloader/{workers}"] == report[f"len/{workers}"] == 12
            assert report[f"dataloader/{workers}"] == 12
        assert "built for one rank" in report["early"] and "runs on 2 ranks" in report["early"]
        assert "2 ranks without split=" in report["remote"] and "split='equal'" in report["remote"]
