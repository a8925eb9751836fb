"""Process mode of ``ss.Loader``: what each worker process sets up before it reads."""

from __future__ import annotations

from typing import Any

from ..pipeline.parallel import Threads

__all__ = ["ThreadedWorkers"]


class ThreadedWorkers:
    """A picklable ``worker_init_fn``: the worker's copy of the pipeline runs its per-sample stages
    on ``n`` threads of its own (the pool lives as long as the worker process)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, worker_id: int) -> None:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is not None:
            dataset: Any = info.dataset  # the worker's copy of the loader's pipeline
            dataset.use_threads(Threads(self.n, name=f"shardstream-map-w{worker_id}"))
