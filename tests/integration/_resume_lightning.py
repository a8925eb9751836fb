"""A Lightning fit over a shardstream loader, stopped mid-epoch after a checkpoint, or resumed from it.

Usage: python _resume_lightning.py ROOT full|stop|resume OUT.json [DEVICES [KIND]]

KIND is the loader: ``web`` (``WebLoader``, 2 worker processes; the default), ``threads``
(``ss.Loader`` with ``num_workers=0, num_threads=2``) or ``processes`` (``ss.Loader`` with
``num_workers=2``).

With DEVICES=2 it runs DDP on two CPU processes (Lightning starts rank 1 by running this script
again); each rank writes ``OUT.json.<rank>`` and reads its own equal share of the epoch.
"""

from __future__ import annotations

import glob
import json
import sys
from typing import Any

import lightning as L
import torch

import shardstream as ss

ROOT, MODE, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
DEVICES = int(sys.argv[4]) if len(sys.argv) > 4 else 1
KIND = sys.argv[5] if len(sys.argv) > 5 else "web"
STOP_AT = 4 if DEVICES == 1 else 2


def out_file() -> str:
    import torch.distributed as dist

    return f"{OUT}.{dist.get_rank()}" if DEVICES > 1 else OUT


class Stop(Exception):
    """Ends the interrupted run after its checkpoint (a crash, as far as the data is concerned)."""


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[list[str]] = []

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        keys, cls = batch
        self.seen.append(list(keys))
        if MODE == "stop" and index == STOP_AT:
            self.trainer.save_checkpoint(f"{ROOT}/mid.ckpt")
            with open(out_file(), "w") as f:
                json.dump(self.seen, f)
            raise Stop
        return self.layer(cls.float().view(-1, 1)).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def make_loader(dataset: Any) -> Any:
    if KIND == "web":
        return ss.WebLoader(dataset, batch_size=None, num_workers=2)
    if KIND == "threads":
        return ss.Loader(dataset, batch_size=None, num_workers=0, num_threads=2)
    if KIND == "processes":
        return ss.Loader(dataset, batch_size=None, num_workers=2)
    raise SystemExit(f"unknown loader kind {KIND!r}: web, threads or processes")


if __name__ == "__main__":
    urls = sorted(glob.glob(f"{ROOT}/*.tar"))
    if DEVICES == 1:
        dataset = ss.ShardStream(urls, seed=2)
    else:  # every rank the same number of batches, as DDP needs
        dataset = ss.ShardStream(urls, seed=2, split=ss.SplitPolicy("equal", batch_size=4))
    dataset = dataset.shuffle(10).decode().to_tuple("__key__", "cls").batched(4)
    loader = make_loader(dataset)
    model = Model()
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=DEVICES,
        strategy="ddp" if DEVICES > 1 else "auto",
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    try:
        trainer.fit(model, loader, ckpt_path=f"{ROOT}/mid.ckpt" if MODE == "resume" else None)
    except Stop:
        sys.exit(0)
    with open(out_file(), "w") as f:
        json.dump(model.seen, f)
