"""DistributedDataParallel over shardstream shards, launched by torchrun (or srun, see slurm_ddp.sbatch).

Run on one machine with 2 CPU processes (writes small demo shards first)::

    torchrun --nproc_per_node=2 examples/torchrun_ddp.py --demo-data /tmp/demo-shards --epochs 3

``split="equal"`` makes every rank yield exactly ``len(loader)`` batches per epoch, so the
gradient all-reduce inside ``backward()`` never waits for a rank that ran out of data. The rank
comes from :meth:`shardstream.shards.World.current` (torch.distributed, torchrun or SLURM
variables), so the same script runs under ``srun`` without torchrun.
"""

from __future__ import annotations

import argparse
import logging
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import shardstream as wds
from shardstream.shards import World
from shardstream.tar.sharded_writer import ShardWriter

log = logging.getLogger("torchrun_ddp")

DEMO_COUNTS = (3, 40, 12, 25, 7, 33, 18)


def write_demo_shards(directory: Path) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    for shard, count in enumerate(DEMO_COUNTS):
        with ShardWriter(str(directory / f"train-{shard:02d}-%d.tar"), maxcount=count) as sink:
            for i in range(count):
                sink.write({"__key__": f"s{shard:02d}_{i:03d}", "cls": i % 2, "json": {"x": float(i % 7)}})
    return f"{directory}/train-{{00..{len(DEMO_COUNTS) - 1:02d}}}-0.tar"


def init_distributed() -> World:
    """Join the process group; torchrun sets MASTER_ADDR/PORT, the sbatch example exports them."""
    world = World.current()  # torchrun's RANK/WORLD_SIZE, else SLURM_PROCID/SLURM_NTASKS
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group(
        backend, rank=world.rank, world_size=world.world_size, timeout=timedelta(minutes=5)
    )
    return world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", help="shard spec; default: the demo shards")
    parser.add_argument("--demo-data", type=Path, help="rank 0 writes demo shards here first")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    world = init_distributed()
    spec = args.shards
    if spec is None:
        if args.demo_data is None:
            parser.error("pass --shards or --demo-data")
        if world.rank == 0:
            spec = write_demo_shards(args.demo_data)
        spec_box = [spec]
        dist.broadcast_object_list(spec_box, src=0)  # also waits until rank 0 has written them
        spec = spec_box[0]

    dataset = (
        wds.WebDataset(spec, split="equal", batch_size=args.batch_size, seed=0)
        .decode()
        .map(lambda s: (torch.tensor([s["json"]["x"]]), torch.tensor(s["cls"])))
        .batched(args.batch_size)
    )
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=args.num_workers)
    model = DistributedDataParallel(torch.nn.Linear(1, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        steps = 0
        for x, y in loader:  # each iter() is the next epoch: a fresh shard order on every rank
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()  # all-reduce across ranks
            optimizer.step()
            steps += 1
        log.info("rank %d epoch %d: %d steps (len(loader)=%d)", world.rank, epoch, steps, len(loader))
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
