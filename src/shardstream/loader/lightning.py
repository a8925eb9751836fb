"""shardstream's Lightning callback: tells each shardstream loader a Trainer fits with what it trains on.

Lightning's fetcher takes a batch or more ahead of the training step, and saves the loader's
``state_dict()`` in a checkpoint while it holds them; Lightning also saves rank 0's checkpoint
only. So a loader (``WebLoader``, or ``ss.Loader`` in thread or process mode) must know (a) that
it runs under a Trainer, to gather every rank's state into the one saved, and (b) how many of the
batches it yielded have reached a training step, to leave the others out of its state. This
callback tells it both through Lightning's public hooks.

It needs no code from the user: shardstream registers it in Lightning's documented entry-point
group for external callbacks (``lightning.pytorch.callbacks_factory``, and
``pytorch_lightning.callbacks_factory`` for the older package name; see ``pyproject.toml``), so
every ``Trainer`` loads it. Where shardstream is not installed as a distribution (only on
``PYTHONPATH``), pass it yourself: ``Trainer(callbacks=[shardstream.loader.lightning.callback()])``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import Loader
    from .loader import WebLoader

__all__ = ["callback", "callbacks", "pl_callbacks", "shardstream_loaders"]


def shardstream_loaders(loaders: Any) -> Iterator[WebLoader | Loader]:
    """The ``WebLoader`` and ``ss.Loader`` objects in what ``trainer.train_dataloader`` returns (a
    loader, or a list, tuple or dict of them, as Lightning's ``CombinedLoader`` takes them)."""
    from .engine import Loader
    from .loader import WebLoader

    if isinstance(loaders, (WebLoader, Loader)):
        yield loaders
    elif isinstance(loaders, dict):
        for value in loaders.values():
            yield from shardstream_loaders(value)
    elif isinstance(loaders, (list, tuple)):
        for value in loaders:
            yield from shardstream_loaders(value)


def _make(package: str) -> Any:
    base = importlib.import_module(f"{package}.callbacks").Callback

    class ShardstreamLoaders(base):  # type: ignore[misc, valid-type]
        """Marks the training loaders as attached to the Trainer and counts the batches
        that reach a training step (see the module docstring)."""

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            for loader in shardstream_loaders(trainer.train_dataloader):
                loader.trainer_attached = True

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            for loader in shardstream_loaders(trainer.train_dataloader):
                loader.batch_trained()

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            for loader in shardstream_loaders(trainer.train_dataloader):
                loader.trainer_attached = False

    ShardstreamLoaders.__qualname__ = ShardstreamLoaders.__name__
    return ShardstreamLoaders()


def callback() -> Any:
    """A new callback for ``lightning.pytorch`` (or ``pytorch_lightning`` when only it is installed)."""
    try:
        return _make("lightning.pytorch")
    except ImportError:
        return _make("pytorch_lightning")


def callbacks() -> list[Any]:
    """The entry point of ``lightning.pytorch.callbacks_factory``."""
    return [_make("lightning.pytorch")]


def pl_callbacks() -> list[Any]:
    """The entry point of ``pytorch_lightning.callbacks_factory``."""
    return [_make("pytorch_lightning")]
