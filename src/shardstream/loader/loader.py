"""WebLoader: a torch DataLoader with fluent methods, epochs that advance, and a real close()."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

from .._malloc import tune_allocator
from ..pipeline._torch import require_torch
from ..pipeline.fluent import FluidInterface, FluidWrapper

require_torch("shardstream.WebLoader (a torch DataLoader)")

from torch.utils.data import DataLoader  # noqa: E402 - after the install hint above

__all__ = ["WebLoader"]

log = logging.getLogger(__name__)


class _WorkerInit:
    """Picklable worker_init_fn: tune the allocator, then call the user's function."""

    def __init__(self, user_fn: Callable[[int], None] | None) -> None:
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        tune_allocator()
        if self.user_fn is not None:
            self.user_fn(worker_id)


class WebLoader(DataLoader, FluidInterface):  # type: ignore[type-arg]
    """A :class:`torch.utils.data.DataLoader` for shardstream pipelines.

    Takes exactly DataLoader's arguments. In addition:

    * fluent methods (``.unbatched().shuffle(1000).batched(64)``) return a pipeline over this
      loader, as in WebDataset;
    * each ``iter()`` advances the dataset's epoch in this process before workers start, so
      shard and sample shuffles change every epoch even with non-persistent workers;
    * ``close()`` (or leaving a ``with`` block) shuts the worker processes down at once;
    * worker processes get a tuned allocator (fewer page faults when decoding images); the
      main process is left alone.
    """

    def __init__(self, dataset: Any, *args: Any, **kw: Any) -> None:
        kw["worker_init_fn"] = _WorkerInit(kw.get("worker_init_fn"))
        super().__init__(dataset, *args, **kw)
        self._iterators: weakref.WeakSet[Any] = weakref.WeakSet()
        self._epoch = -1  # only for datasets that are not shardstream pipelines (see __iter__)
        # The allocator is tuned in our worker processes only (worker_init_fn), never in the
        # user's main process: mallopt settings are process-global and inherited by later forks.

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next ``iter()``."""
        dataset: Any = self.dataset
        if hasattr(dataset, "begin_epoch"):
            dataset.set_epoch(epoch)  # the pipeline owns the epoch
        else:
            self._epoch = epoch - 1

    def __iter__(self) -> Any:  # a DataLoader iterator (torch's private _BaseDataLoaderIter)
        begin_epoch = getattr(self.dataset, "begin_epoch", None)
        if begin_epoch is not None:
            begin_epoch()  # our pipelines own their epoch; fix it before workers start
        else:
            # A foreign dataset with set_epoch (as for DistributedSampler): drive it by count.
            set_epoch = getattr(self.dataset, "set_epoch", None)
            if set_epoch is not None:
                self._epoch += 1
                set_epoch(self._epoch)
        it = super().__iter__()
        self._iterators.add(it)
        return it

    def compose(self, *stages: Any) -> Any:
        return FluidWrapper(self).compose(*stages)

    def close(self) -> None:
        """Shut down worker processes of running iterators now (not at garbage collection)."""
        for it in list(self._iterators):
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self._iterators = weakref.WeakSet()
        persistent = getattr(self, "_iterator", None)
        if persistent is not None and hasattr(persistent, "_shutdown_workers"):
            persistent._shutdown_workers()
            self._iterator = None

    def __enter__(self) -> WebLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
