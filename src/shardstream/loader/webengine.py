"""``WebLoader(engine="threads" | "shm")``: a WebLoader that runs on ``ss.Loader``'s engine.

For drop-in users who keep ``WebLoader(dataset, batch_size=..., num_workers=...)`` and want the
new engine with one argument. The loader is still a ``torch.utils.data.DataLoader`` (Lightning and
type checks see one), built with the given arguments, but iterating, the state, ``len()``,
``close()`` and ``stats()`` go to an :class:`~shardstream.loader.engine.Loader` made from them:

* ``engine="threads"``: one process, ``num_workers`` threads (at least 1) for the per-sample
  stages (``ss.Loader(num_threads=num_workers)``);
* ``engine="shm"``: ``num_workers`` worker processes that hand batches through reused
  shared-memory buffers (``ss.Loader(num_workers=num_workers)``).

What differs from torch's machinery: without ``collate_fn``, batches are made by shardstream's
``default_collation_fn`` (a tuple sample gives a tuple of columns, as in thread mode, where
torch's ``default_collate`` gives a list), and the states are ``ss.Loader``'s (the same format,
so a state saved by one engine restores in another, elastically across thread and worker counts).
"""

from __future__ import annotations

from typing import Any

from .engine import Loader
from .loader import WebLoader

__all__ = ["EngineWebLoader"]


class EngineWebLoader(WebLoader):
    """What ``WebLoader(..., engine="threads" | "shm")`` returns (see the module docstring)."""

    def __init__(
        self,
        dataset: Any,
        *args: Any,
        worker_timeout: float | None = None,
        engine: str = "threads",
        **kw: Any,
    ) -> None:
        self._engine: Loader | None = None  # set below; trainer_attached is assigned before
        self._attached_early = False
        user_collate = kw.get("collate_fn")
        threads = engine == "threads"
        num_threads = 1
        prefetch = kw.get("prefetch_factor") or 2
        if threads:  # no worker process: the DataLoader part is built without workers
            num_threads = max(1, kw.pop("num_workers", 0))
            kw.pop("prefetch_factor", None)
        super().__init__(dataset, *args, worker_timeout=worker_timeout, engine=engine, **kw)
        self.engine = engine
        self._engine = Loader(
            dataset,
            batch_size=self.batch_size,
            num_threads=num_threads,
            num_workers=self.num_workers,
            collate_fn=user_collate,
            drop_last=self.drop_last,
            prefetch_factor=prefetch,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers or self.num_workers == 0,
            shm=True,
        )
        self._engine.trainer_attached = self._attached_early

    @property
    def trainer_attached(self) -> bool:
        return self._engine.trainer_attached if self._engine is not None else self._attached_early

    @trainer_attached.setter
    def trainer_attached(self, attached: bool) -> None:
        if self._engine is None:
            self._attached_early = attached
        else:
            self._engine.trainer_attached = attached

    def _loader(self) -> Loader:
        assert self._engine is not None
        return self._engine

    def __iter__(self) -> Any:
        return iter(self._loader())

    def __len__(self) -> int:
        return len(self._loader())

    def set_epoch(self, epoch: int) -> None:
        self._loader().set_epoch(epoch)

    def batch_trained(self) -> None:
        self._loader().batch_trained()

    def stats(self) -> dict[str, Any]:
        return {"engine": self.engine, **self._loader().stats()}

    def state_dict(self) -> dict[str, Any]:
        return self._loader().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._loader().load_state_dict(state)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
        super().close()
