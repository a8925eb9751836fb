"""A loader's length per epoch, counted worker by worker from the dataset's slot lengths.

A DataLoader with workers batches in each worker: every worker makes whole batches of its own
items and a partial last one (or drops it, ``drop_last``). Dividing the rank's total by the batch
size, as ``DataLoader.__len__`` does, is off by up to a batch per worker whenever a worker's
share is not a whole number of batches (a mixture's shares, a split's quota batched by another
size). So the loaders ask a shardstream dataset for each ``(rank, worker)`` slot's items
(``LoaderDataset.slot_length``) and batch every slot on its own; without workers there is one
slot, the whole rank. Other datasets keep ``DataLoader.__len__``.
"""

from __future__ import annotations

from typing import Any

from ..pipeline.seams import LoaderDataset

__all__ = ["batch_count", "loader_length"]


def batch_count(n: int, batch_size: int | None, drop_last: bool) -> int:
    """Batches one process makes of ``n`` items (``n`` itself when ``batch_size`` is ``None``)."""
    if batch_size is None:
        return n
    return n // batch_size if drop_last else -(-n // batch_size)


def loader_length(dataset: Any, num_workers: int, batch_size: int | None, drop_last: bool) -> int | None:
    """Batches (items when ``batch_size`` is ``None``) this rank's loader yields per epoch with
    ``num_workers`` worker processes (0: batched in this process), or ``None`` when the dataset
    is no shardstream pipeline or a slot's length is unknown (the caller then falls back to
    ``len(dataset)``)."""
    if not isinstance(dataset, LoaderDataset):
        return None
    slots = max(1, num_workers)
    world = dataset.context(0).world  # this rank, as the dataset sees it (explicit world= wins)
    total = 0
    for worker in range(slots):
        n = dataset.slot_length(world.with_worker(worker, slots))
        if n is None:
            return None
        total += batch_count(n, batch_size, drop_last)
    return total
