"""Process mode of ``ss.Loader``: what each worker process sets up before it reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..pipeline.parallel import Threads
from ..pipeline.pipeline import run_in_worker
from .shm import RingWorkers

__all__ = ["WorkerSetup"]


class WorkerSetup:
    """A picklable ``worker_init_fn``: the worker's copy of the pipeline runs its per-sample stages
    on ``threads`` threads of its own (the pool lives as long as the worker process), and its
    batches are stacked into reused shared-memory buffers when ``ring`` is given (``shm.py``);
    with ``fills``, the loader's default collation makes them, so decode stages may leave JPEGs
    to be decoded straight into those buffers (``decoders/deferred.py``). Then the user's own
    ``worker_init_fn`` (``then``) runs, as a DataLoader's would, with everything in place."""

    def __init__(
        self,
        threads: int,
        ring: RingWorkers | None,
        *,
        fills: bool = False,
        then: Callable[[int], None] | None = None,
    ) -> None:
        self.threads, self.ring, self.fills, self.then = threads, ring, fills, then

    def __call__(self, worker_id: int) -> None:
        from torch.utils.data import get_worker_info

        if self.ring is not None:
            self.ring(worker_id)
        info = get_worker_info()
        if info is not None:
            dataset: Any = info.dataset  # the worker's copy of the loader's pipeline
            pool = Threads(self.threads, name=f"shardstream-map-w{worker_id}") if self.threads > 1 else None
            if pool is not None or self.fills:
                run_in_worker(dataset, pool, fills=self.fills)
        if self.then is not None:
            self.then(worker_id)
