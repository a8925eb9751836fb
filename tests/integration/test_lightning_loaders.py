"""shardstream's Lightning callback joins only the Trainers that iterate a shardstream loader: a
Trainer that does not use us never sees it, one that does gets it once (also when the user passed
it), and ``WebLoader`` and ``ss.Loader`` (threads, processes) fit and validate under a Trainer.

One process (``devices=1``): the Trainer runs inside pytest. Mid-epoch checkpoints and DDP run in
fresh processes: ``test_resume_lightning.py``, ``test_lightning.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import shardstream as ss

L = pytest.importorskip("lightning.pytorch")
torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.timeout(180),
    # Lightning's advice for small CPU runs: not this test's subject.
    pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
    pytest.mark.filterwarnings("ignore:.*does not have many workers:UserWarning"),
    pytest.mark.filterwarnings("ignore:Your `IterableDataset` has `__len__` defined:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
]

COUNTS = [6, 9, 5]


class Tiny(L.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.trained: list[str] = []
        self.validated: list[str] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        keys, cls = batch
        self.trained.extend(keys)
        return self.layer(torch.as_tensor(cls).float().view(-1, 1)).sum()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.validated.extend(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _trainer(tmp_path: Path, **kw: Any) -> Any:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        **kw,
    )


def _ours(trainer: Any) -> list[Any]:
    return [c for c in trainer.callbacks if type(c).__name__ == "ShardstreamLoaders"]


@pytest.fixture
def shards(make_shards) -> tuple[str, list[str]]:
    spec, keys = make_shards(COUNTS)
    return spec, keys


def _dataset(spec: str) -> Any:
    return ss.ShardStream(spec, seed=1).decode().to_tuple("__key__", "cls")


def _loader(kind: str, spec: str) -> Any:
    if kind == "web":
        return ss.WebLoader(_dataset(spec), batch_size=4, num_workers=2)
    return ss.Loader(_dataset(spec), batch_size=4, num_threads=2, num_workers=2 if kind == "processes" else 0)


def test_a_trainer_that_does_not_use_shardstream_gets_no_callback(tmp_path: Path) -> None:
    # Regression: an entry point of the package added the callback to every Trainer.
    assert _ours(_trainer(tmp_path)) == []
    data = torch.utils.data.TensorDataset(torch.arange(8).float(), torch.arange(8))

    class Plain(Tiny):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0].view(-1, 1)).sum()

    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.fit(Plain(), torch.utils.data.DataLoader(data, batch_size=4))
    assert trainer.global_step == 2 and _ours(trainer) == []


@pytest.mark.parametrize("kind", ["web", "threads", "processes"])
def test_shardstream_loaders_fit_and_validate_under_a_trainer(
    tmp_path: Path, shards: tuple[str, list[str]], kind: str
) -> None:
    spec, keys = shards
    train, val = _loader(kind, spec), _loader(kind, spec)
    model = Tiny()
    trainer = _trainer(tmp_path, max_epochs=2)
    try:
        trainer.fit(model, train, val)
        assert len(_ours(trainer)) == 1, "the loader's first iter() added it, once"
        assert sorted(model.trained) == sorted(keys * 2)  # two epochs, every sample once in each
        model.validated.clear()
        trainer.validate(model, val)
        assert sorted(model.validated) == sorted(keys)
        assert len(_ours(trainer)) == 1
        assert not train.trainer_attached, "teardown detaches it"
    finally:
        train.close()
        val.close()


def test_a_callback_passed_by_the_user_is_not_added_twice(
    tmp_path: Path, shards: tuple[str, list[str]]
) -> None:
    spec, keys = shards
    mine = ss.loader.lightning.callback()
    trainer = _trainer(tmp_path, max_epochs=1, callbacks=[mine])
    model = Tiny()
    with _loader("threads", spec) as loader:
        trainer.fit(model, loader)
    assert _ours(trainer) == [mine] and sorted(model.trained) == sorted(keys)
