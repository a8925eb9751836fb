"""The Lightning recipe from WebDataset's guides, unchanged: ``WebLoader(...).with_length(n)`` and
``.with_epoch(n)`` (after ``.unbatched().shuffle(1000).batched(b)``) with a real Trainer on CPU.

One process (``devices=1``), so the trainer runs inside pytest; multi-process DDP is covered by
``test_lightning.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _components import require_module

import shardstream as wds

L = require_module("lightning.pytorch", "the Lightning integration", package="lightning")
torch = require_module("torch", "the PyTorch DataLoader and tensor paths")

pytestmark = [
    pytest.mark.timeout(120),
    # Lightning's advice for small CPU runs (few workers, no accelerator, ...): not this test's subject.
    pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
    pytest.mark.filterwarnings("ignore:.*does not have many workers:UserWarning"),
    # Lightning says this of every IterableDataset with a len(), WebDataset's loaders included.
    pytest.mark.filterwarnings("ignore:Your `IterableDataset` has `__len__` defined:UserWarning"),
    # Lightning 2.6 with torch 2.13: torch's pytree deprecation inside Lightning's own code.
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
]


class Tiny(L.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.batch_sizes: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        self.batch_sizes.append(len(y))
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def features(sample: dict[str, Any]) -> tuple[Any, Any]:
    c = float(sample["cls"])
    return np.full(4, c, dtype=np.float32), np.float32(c)


def fit(loader: Any, tmp_path: Path) -> Tiny:
    model = Tiny()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(model, train_dataloaders=loader)
    assert trainer.num_training_batches == len(model.batch_sizes)
    assert trainer.global_step == len(model.batch_sizes)
    return model


@pytest.fixture
def dataset(make_shards) -> Any:
    spec, _ = make_shards([20, 13, 17])  # 50 samples
    return wds.WebDataset(spec, shardshuffle=True).shuffle(20).decode().map(features).batched(5)


def test_with_length(dataset: Any, tmp_path: Path) -> None:
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=2)
    loader = loader.with_length(7)  # shorter than an epoch: Lightning stops after 7 batches
    try:
        model = fit(loader, tmp_path)
    finally:
        loader.close()
    assert model.batch_sizes == [5] * 7


def test_rebatched_with_epoch(dataset: Any, tmp_path: Path) -> None:
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=2)
    loader = loader.unbatched().shuffle(1000).batched(8).with_epoch(9)  # 72 samples: crosses a pass
    try:
        model = fit(loader, tmp_path)
    finally:
        loader.close()
    assert len(model.batch_sizes) == 9 and sum(model.batch_sizes) >= 50
