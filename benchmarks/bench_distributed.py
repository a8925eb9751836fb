"""Equal-batch splitting: per-rank throughput of 2 ranks vs 1 process, and time to first batch.

Run from the repository root::

    .venv/bin/python benchmarks/bench_distributed.py [--data ./bench-data] [--rounds 3] [--markdown FILE]

Two measurements, each repeated ``--rounds`` times with the cases alternating (best round
reported, median alongside):

1. **Per-rank throughput.** ``WebDataset(split="equal", batch_size=64).batched(64)`` through a
   WebLoader with 1 worker per rank, read by 1 rank and by 2 gloo ranks (spawned processes, an
   ``all_reduce`` after every batch as DDP does). Each rank times its own epoch from its first
   batch; with 2 ranks each reads half the data, so on a machine with spare cores per-rank
   samples/s should match the single process (the split itself costs nothing measurable; a
   shared 2-core machine halves it by contention, which is reported as the aggregate).
2. **Epoch start to first batch**, with the shards' ``_info.json`` index present vs absent (the
   absent case includes the one-time counting pass; later epochs reuse its cached result).

Dataset: 24 deliberately uneven shards of 2,000-6,000 tiny (~100 byte) samples.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import shutil
import socket
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402

log = logging.getLogger("bench_distributed")

BATCH = 64


def build_uneven(root: Path, shards: int = 24) -> list[str]:
    """Uneven shards with an index (cached in ``root``)."""
    from shardstream.tar.sharded_writer import ShardWriter

    directory = root / "uneven"
    counts = [2000 + (i * 1733) % 4001 for i in range(shards)]
    marker = directory / ".params.json"
    if not (marker.exists() and json.loads(marker.read_text()) == counts):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        filler = ("abcdefghijklmnopqrstuvwxyz0123456789" * 3)[:80]
        for s, n in enumerate(counts):
            with ShardWriter(str(directory / f"u{s:03d}-%d.tar"), maxcount=n) as sink:
                for i in range(n):
                    sink.write({"__key__": f"s{s:03d}_{i:05d}", "txt": f"{s} {i} {filler}"})
        marker.write_text(json.dumps(counts))
    return [str(directory / f"u{s:03d}-0.tar") for s in range(shards)]


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rank_main(rank: int, world_size: int, port: int, urls: list[str], out: str) -> None:
    """One rank: one epoch, timed from the first batch; writes (samples, seconds) to ``out``."""
    import torch
    import torch.distributed as dist

    import shardstream as wds

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=120),
    )
    dataset = wds.WebDataset(urls, split="equal", batch_size=BATCH).to_tuple("txt").batched(BATCH)
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context="fork")
    start = time.perf_counter()
    first = 0.0
    batches = 0
    one = torch.ones(1)
    for _ in loader:
        if batches == 0:
            first = time.perf_counter()
        batches += 1
        dist.all_reduce(one)
    end = time.perf_counter()
    loader.close()
    dist.destroy_process_group()
    Path(out).write_text(
        json.dumps({"samples": (batches - 1) * BATCH, "seconds": end - first, "first": first - start})
    )


def run_ranks(world_size: int, urls: list[str], scratch: Path) -> list[dict[str, float]]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    port = _port()
    outs = [str(scratch / f"r{world_size}-{r}.json") for r in range(world_size)]
    procs = [
        ctx.Process(target=rank_main, args=(r, world_size, port, urls, outs[r])) for r in range(world_size)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
        if p.is_alive() and p.pid is not None:
            os.kill(p.pid, 9)
            p.join(5)
        if p.exitcode != 0:
            raise RuntimeError(f"a rank exited with {p.exitcode}")
    return [json.loads(Path(o).read_text()) for o in outs]


def first_batch_seconds(urls: list[str]) -> float:
    """Build the dataset and take one batch in this process (0 DataLoader workers)."""
    import shardstream as wds
    from shardstream.readers.counts import clear_cache
    from shardstream.shards.world import World

    clear_cache()  # the counting pass's per-process cache: every round counts afresh
    start = time.perf_counter()
    dataset = wds.WebDataset(urls, split="equal", batch_size=BATCH, world=World(rank=0, world_size=2))
    it = iter(dataset.to_tuple("txt").batched(BATCH))
    next(it)
    elapsed = time.perf_counter() - start
    close = getattr(it, "close", None)
    if close is not None:
        close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("bench-data"), help="dataset directory (cached)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", type=Path, help="also write the results as Markdown here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    urls = build_uneven(args.data)
    scratch = args.data / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)

    single: list[float] = []
    double: list[list[float]] = []
    for _ in range(args.rounds):
        (one,) = run_ranks(1, urls, scratch)
        single.append(one["samples"] / one["seconds"])
        double.append([r["samples"] / r["seconds"] for r in run_ranks(2, urls, scratch)])

    noindex = args.data / "uneven-noindex"
    shutil.rmtree(noindex, ignore_errors=True)
    noindex.mkdir()
    for url in urls:
        shutil.copy(url, noindex)
    plain = [str(noindex / Path(u).name) for u in urls]
    with_index: list[float] = []
    without: list[float] = []
    for _ in range(args.rounds):
        with_index.append(first_batch_seconds(urls))
        without.append(first_batch_seconds(plain))

    per_rank_best = max(min(d) for d in double)
    lines = [
        f"# bench_distributed ({datetime.date.today()})",
        "",
        f"Machine: {machine_line()}",
        f"Dataset: {len(urls)} uneven shards of tiny samples; batch {BATCH}; "
        f"{args.rounds} alternating rounds, best (median).",
        "",
        "| case | samples/s per rank | aggregate samples/s |",
        "|---|---|---|",
        f"| 1 process x 1 worker | {max(single):,.0f} ({statistics.median(single):,.0f}) "
        f"| {max(single):,.0f} |",
        f"| 2 gloo ranks x 1 worker, all_reduce per batch (slowest rank) | {per_rank_best:,.0f} "
        f"({statistics.median(min(d) for d in double):,.0f}) | {max(sum(d) for d in double):,.0f} |",
        "",
        "| epoch start to first batch | seconds |",
        "|---|---|",
        f"| `_info.json` index present | {min(with_index):.3f} ({statistics.median(with_index):.3f}) |",
        f"| index absent (counting pass) | {min(without):.3f} ({statistics.median(without):.3f}) |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
