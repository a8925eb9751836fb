"""PyTorch Lightning + DDP on shardstream shards: equal batches per rank for training, exact for validation.

Run (CPU, 2 processes; writes small demo shards first)::

    python examples/lightning_ddp.py --demo-data /tmp/demo-shards --devices 2 --epochs 2

Lightning starts one process per device and re-runs this script in each. Every rank then builds
the same WebDataset: ``split="equal"`` gives every rank ``len(train_dataloader)`` batches
(whatever the shard sizes and ``num_workers``), so DDP never waits for a rank that ran dry, and
``split="exact"`` lets validation see every sample once (padding is marked in ``__pad__`` and
dropped from the metric).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch

import shardstream as wds
from shardstream.tar.sharded_writer import ShardWriter

log = logging.getLogger("lightning_ddp")


DEMO_COUNTS = (3, 40, 12, 25, 7, 33, 18)
DEMO_SPEC = "{dir}/train-{{00..06}}-0.tar"


def write_demo_shards(directory: Path, counts: tuple[int, ...] = DEMO_COUNTS) -> str:
    """Deliberately uneven shards (and their _info.json index); samples hold a class and a float."""
    directory.mkdir(parents=True, exist_ok=True)
    for shard, count in enumerate(counts):
        with ShardWriter(str(directory / f"train-{shard:02d}-%d.tar"), maxcount=count) as sink:
            for i in range(count):
                sink.write({"__key__": f"s{shard:02d}_{i:03d}", "cls": i % 2, "json": {"x": float(i % 7)}})
    return f"{directory}/train-{{00..{len(counts) - 1:02d}}}-0.tar"


def to_tensors(sample: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, bool]:
    return (
        torch.tensor([sample["json"]["x"]]),
        torch.tensor(sample["cls"]),
        bool(sample.get("__pad__", False)),
    )


class ShardDataModule(L.LightningDataModule):
    """Train with split="equal", validate with split="exact"."""

    def __init__(self, spec: str, batch_size: int = 4, num_workers: int = 2) -> None:
        super().__init__()
        self.spec, self.batch_size, self.num_workers = spec, batch_size, num_workers

    def _loader(self, split: str, num_workers: int) -> wds.WebLoader:
        # Built when Lightning asks, i.e. after the process group exists, so the rank is known.
        dataset = (
            wds.WebDataset(self.spec, split=split, batch_size=self.batch_size, seed=0)
            .decode()
            .map(to_tensors)
            .batched(self.batch_size)
        )
        return wds.WebLoader(dataset, batch_size=None, num_workers=num_workers)

    def train_dataloader(self) -> wds.WebLoader:
        return self._loader("equal", self.num_workers)

    def val_dataloader(self) -> wds.WebLoader:
        return self._loader("exact", 1)


class TinyModel(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 2)
        self.batches_per_epoch: list[int] = []
        self._count = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        self._count += 1
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        return loss

    def on_train_epoch_end(self) -> None:
        self.batches_per_epoch.append(self._count)
        self._count = 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y, pad = batch
        keep = ~torch.as_tensor(pad)
        losses = torch.nn.functional.cross_entropy(self.layer(x), y, reduction="none")
        # Sum and count over real samples only; sync_dist adds them over ranks.
        self.log("val_loss_sum", losses[keep].sum(), reduce_fx="sum", sync_dist=True, batch_size=len(x))
        self.log("val_samples", keep.sum().float(), reduce_fx="sum", sync_dist=True, batch_size=len(x))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", help="shard spec (brace pattern); default: the demo shards")
    parser.add_argument("--demo-data", type=Path, help="write demo shards here and train on them")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--report", type=Path, help="rank 0 writes batches per epoch here (JSON)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    spec = args.shards
    if spec is None:
        if args.demo_data is None:
            parser.error("pass --shards or --demo-data")
        # Lightning re-runs this script for ranks 1..n-1 after rank 0 got here: write once.
        spec = DEMO_SPEC.format(dir=args.demo_data)
        if not (args.demo_data / "_info.json").exists():
            write_demo_shards(args.demo_data)
    model = TinyModel()
    trainer = L.Trainer(
        strategy="ddp",
        accelerator="cpu",
        devices=args.devices,
        max_epochs=args.epochs,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = ShardDataModule(spec, args.batch_size, args.num_workers)
    trainer.fit(model, datamodule=data)
    if trainer.is_global_zero:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        report = {
            "world_size": trainer.world_size,
            "batches_per_epoch": model.batches_per_epoch,
            "num_training_batches": trainer.num_training_batches,
            "global_step": trainer.global_step,
            "val_samples": metrics.get("val_samples"),
        }
        log.info("%s", report)
        if args.report is not None:
            args.report.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
