"""A Lightning fit over a WebLoader, stopped mid-epoch after a checkpoint, or resumed from it.

Usage: python _resume_lightning.py ROOT full|stop|resume OUT.json
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
STOP_AT = 4


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
            with open(OUT, "w") as f:
                json.dump(self.seen, f)
            raise Stop
        return self.layer(cls.float().view(-1, 1)).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


if __name__ == "__main__":
    urls = sorted(glob.glob(f"{ROOT}/*.tar"))
    dataset = ss.Dataset(urls, seed=2).shuffle(10).decode().to_tuple("__key__", "cls").batched(4)
    loader = ss.WebLoader(dataset, batch_size=None, num_workers=2)
    model = Model()
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    try:
        trainer.fit(model, loader, ckpt_path=f"{ROOT}/mid.ckpt" if MODE == "resume" else None)
    except Stop:
        sys.exit(0)
    with open(OUT, "w") as f:
        json.dump(model.seen, f)
