"""Process mode of ``ss.Loader``: what each worker process sets up before it reads."""

from __future__ import annotations

from typing import Any

from ..pipeline.parallel import Threads
from .shm import RingWorkers

__all__ = ["WorkerSetup"]


class WorkerSetup:
    """A picklable ``worker_init_fn``: the worker's copy of the pipeline runs its per-sample stages
    on ``threads`` threads of its own (the pool lives as long as the worker process), and its
    batches are stacked into reused shared-memory buffers when ``ring`` is given (``shm.py``);
    with ``fills``, the loader's default collation makes them, so decode stages may leave JPEGs
    to be decoded straight into those buffers (``decoders/deferred.py``)."""

    def __init__(self, threads: int, ring: RingWorkers | None, *, fills: bool = False) -> None:
        self.threads, self.ring, self.fills = threads, ring, fills

    def __call__(self, worker_id: int) -> None:
        from torch.utils.data import get_worker_info

        if self.ring is not None:
            self.ring(worker_id)
        info = get_worker_info()
        if info is None:
            return
        dataset: Any = info.dataset  # the worker's copy of the loader's pipeline
        dataset.fill_batches(self.fills)
        if self.threads > 1:
            dataset.use_threads(Threads(self.threads, name=f"shardstream-map-w{worker_id}"))
