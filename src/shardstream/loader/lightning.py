"""shardstream's Lightning callback: tells each shardstream loader a Trainer fits with what it trains on.

Lightning's fetcher takes a batch or more ahead of the training step, and saves the loader's
``state_dict()`` in a checkpoint while it holds them; Lightning also saves rank 0's checkpoint
only. So a loader (``WebLoader``, or ``ss.Loader`` in thread or process mode) must know (a) that
it runs under a Trainer, to gather every rank's state into the one saved, and (b) how many of the
batches it yielded have reached a training step, to leave the others out of its state. This
callback tells it both through Lightning's public hooks.

Installing shardstream registers nothing with Lightning: a Trainer that never iterates one of our
loaders never sees the callback. It joins a Trainer when a shardstream loader starts an epoch
under it (:func:`join_running_trainer`, called by every ``WebLoader`` and ``ss.Loader``
``iter()``): only when Lightning is already imported (``lightning.pytorch`` or
``pytorch_lightning`` in ``sys.modules``), the loader looks up its calling frames for the Trainer
that runs it (Lightning's loops call ``iter()`` from inside a Trainer method, ``_run_stage``, a
dozen frames up; only frames of Lightning's own files are looked at) and appends the callback to
``trainer.callbacks`` unless one is there. That costs some microseconds once per epoch, nothing
per batch. Lightning 2.x calls ``iter()`` on the training loader in ``FitLoop.setup_data``, before
the epoch's ``on_train_epoch_start``, and calls every hook on the live ``trainer.callbacks``
list, so the callback sees the whole first epoch.

You may pass it yourself (where frames cannot be walked, or to see it in the list from the
start): ``Trainer(callbacks=[shardstream.loader.lightning.callback()])``; a loader then does not
add a second one.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

__all__ = ["PACKAGES", "TrainerAware", "callback", "join_running_trainer", "shardstream_loaders"]

#: Lightning's two package names (the unified package, and the standalone one).
PACKAGES = ("lightning.pytorch", "pytorch_lightning")
#: Frames looked up from a loader's ``iter()`` for the Trainer that runs it.
_DEPTH = 48


@runtime_checkable
class TrainerAware(Protocol):
    """A loader that keeps its state right under a Trainer (``WebLoader``, ``ss.Loader``)."""

    trainer_attached: bool

    def batch_trained(self) -> None: ...


def shardstream_loaders(loaders: Any) -> Iterator[TrainerAware]:
    """The ``WebLoader`` and ``ss.Loader`` objects in what ``trainer.train_dataloader`` returns (a
    loader, or a list, tuple or dict of them, as Lightning's ``CombinedLoader`` takes them)."""
    if isinstance(loaders, TrainerAware):
        yield loaders
    elif isinstance(loaders, dict):
        for value in loaders.values():
            yield from shardstream_loaders(value)
    elif isinstance(loaders, (list, tuple)):
        for value in loaders:
            yield from shardstream_loaders(value)


@functools.cache
def _callback_class(package: str) -> type:
    base = importlib.import_module(f"{package}.callbacks").Callback

    class ShardstreamLoaders(base):  # type: ignore[misc, valid-type]
        """Marks the training loaders as attached to the Trainer and counts the batches
        that reach a training step (see the module docstring)."""

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            for loader in shardstream_loaders(trainer.train_dataloader):
                loader.trainer_attached = True

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            for loader in shardstream_loaders(trainer.train_dataloader):
                loader.trainer_attached = True
                loader.batch_trained()

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            for loader in shardstream_loaders(trainer.train_dataloader):
                loader.trainer_attached = False

    ShardstreamLoaders.__qualname__ = ShardstreamLoaders.__name__
    return ShardstreamLoaders


def callback() -> Any:
    """A new callback for ``lightning.pytorch`` (or ``pytorch_lightning`` when only it is installed)."""
    try:
        return _callback_class(PACKAGES[0])()
    except ImportError:
        return _callback_class(PACKAGES[1])()


def _trainer_classes() -> list[tuple[str, type]]:
    found = []
    for package in PACKAGES:
        module = sys.modules.get(package)
        trainer = vars(module).get("Trainer") if module is not None else None
        if isinstance(trainer, type):
            found.append((package, trainer))
    return found


def join_running_trainer() -> bool:
    """Add the callback to the Lightning Trainer whose loop calls the caller's ``iter()``, if one
    does and it has none yet (see the module docstring). Does nothing unless Lightning is imported.

    Returns:
        Whether a Trainer runs the caller's ``iter()`` (``ss.Loader``'s automatic mode keeps the
        length the Trainer counted, ``_auto.py``).
    """
    if PACKAGES[0] not in sys.modules and PACKAGES[1] not in sys.modules:
        return False
    classes = _trainer_classes()
    frame = sys._getframe(1)
    for _ in range(_DEPTH):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return False
        if "lightning" not in frame.f_code.co_filename:
            continue
        owner = frame.f_locals.get("self")
        for package, trainer_class in classes:
            if isinstance(owner, trainer_class):
                _join(owner, package)
                return True
    return False


def _join(trainer: Any, package: str) -> None:
    kind = _callback_class(package)
    callbacks = trainer.callbacks
    if not any(isinstance(c, kind) for c in callbacks):
        callbacks.append(kind())
