"""Which of DataLoader's arguments ``ss.Loader`` honours, and why it refuses the others.

``ss.Loader`` takes every argument of :class:`torch.utils.data.DataLoader` by keyword, so code
written for a DataLoader moves over by changing the class name. Each one is either honoured, in
both modes or in the mode where it means something, or refused when the loader is built, with
what to write instead. Nothing is dropped silently.

Honoured: ``batch_size``, ``num_workers``, ``collate_fn``, ``drop_last``, ``prefetch_factor``
(batches made ahead: per worker in process mode, in all in thread mode), ``pin_memory``,
``persistent_workers`` (process mode: the worker processes; thread mode: the loader's thread pool
and its copy of the pipeline), ``timeout`` (the wait for one batch, in both modes);
``worker_init_fn``, ``multiprocessing_context`` and ``generator`` in process mode (they concern
worker processes); ``shuffle=False``, ``sampler=None``, ``batch_sampler=None``, ``in_order=True``
and ``pin_memory_device=""`` (their defaults).

Refused: whatever needs indices (``sampler``, ``batch_sampler``, ``shuffle=True``: a pipeline
reads its shards in its own order and shuffles in its stages), out-of-order batches
(``in_order=False``: a batch's position in the epoch is what makes states exact), and
``pin_memory_device`` (``device=`` copies batches to a device); in thread mode, the arguments of
worker processes (none starts), and in the automatic mode (neither ``num_workers`` nor
``num_threads`` given) too: it starts in thread mode, and may stay there.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "check_automatic_mode",
    "check_dataloader_arguments",
    "check_thread_mode",
    "check_worker_restarts",
]


def check_dataloader_arguments(
    *,
    shuffle: bool | None,
    sampler: Any,
    batch_sampler: Any,
    in_order: bool,
    pin_memory_device: str,
    prefetch_factor: int | None,
    timeout: float,
) -> None:
    """Refuse the DataLoader arguments an iterable pipeline cannot honour (see the module docstring).

    Raises:
        ValueError: naming the argument, why, and what to write instead.
    """
    if shuffle:
        raise ValueError(
            f"shuffle={shuffle!r}: ss.Loader reads a pipeline in the pipeline's own order and has no "
            "indices to permute (torch refuses shuffle=True for an IterableDataset too). Shuffle in the "
            "pipeline: the shard order with ShardStream(shuffle_shards=True) (the default) and the samples "
            "with .shuffle(n) (a buffer of n samples), both seeded by ShardStream(seed=) and the epoch"
        )
    if sampler is not None:
        raise ValueError(
            f"sampler={sampler!r}: a pipeline has no indices to sample (torch refuses a sampler for an "
            "IterableDataset too). The dataset splits its shards between ranks and workers "
            "(ShardStream(split=...)) and its stages choose samples (.shuffle(n), .select(fn)); for a "
            "map-style dataset with a sampler, use torch's DataLoader"
        )
    if batch_sampler is not None:
        raise ValueError(
            f"batch_sampler={batch_sampler!r}: a pipeline has no indices to group into batches (torch "
            "refuses a batch_sampler for an IterableDataset too). Use batch_size= on the loader, or "
            ".batched(n) in the pipeline with batch_size=None"
        )
    if not in_order:
        raise ValueError(
            "in_order=False: ss.Loader hands batches over in the order they were made, always: each "
            "batch's position in the epoch is what makes its batches exact and its state_dict() "
            "resumable. Drop the argument; a slow sample does not hold back the others' decoding (the "
            "per-sample stages run on num_threads threads)"
        )
    if pin_memory_device:
        raise ValueError(
            f"pin_memory_device={pin_memory_device!r}: use device={pin_memory_device!r} (every batch is "
            "copied to that device on a side stream, one batch ahead of the training loop) or "
            "pin_memory=True (batches in pinned memory, for your own copy)"
        )
    if prefetch_factor is not None and prefetch_factor < 1:
        raise ValueError(
            f"prefetch_factor={prefetch_factor}: batches made ahead of the training loop must be at least 1 "
            "(per worker with num_workers > 0)"
        )
    if timeout < 0:
        raise ValueError(
            f"timeout={timeout}: the seconds to wait for one batch cannot be negative; pass a bound in "
            "seconds, or 0 to leave it to worker_timeout= (SHARDSTREAM_WORKER_TIMEOUT, 600 s by default; "
            "worker_timeout=0 waits forever)"
        )


def check_thread_mode(*, worker_init_fn: Any, multiprocessing_context: Any, generator: Any) -> None:
    """Refuse the arguments of worker processes when ``num_workers=0`` (thread mode).

    Raises:
        ValueError: naming the argument, why, and what to write instead.
    """
    if worker_init_fn is not None:
        raise ValueError(
            f"worker_init_fn={worker_init_fn!r} with num_workers=0: thread mode starts no worker process, "
            "so there is none to initialise. Set up this process before iterating; seed the "
            "pipeline's shuffles with ShardStream(seed=); or use num_workers > 0, where worker_init_fn runs "
            "in each worker after shardstream's own setup"
        )
    if multiprocessing_context is not None:
        raise ValueError(
            f"multiprocessing_context={multiprocessing_context!r} with num_workers=0: thread mode starts "
            "no process. Give it with num_workers > 0 (by default shardstream forks when no other "
            "thread runs, and starts workers from its forkserver otherwise)"
        )
    if generator is not None:
        raise ValueError(
            f"generator={generator!r} with num_workers=0: thread mode seeds no worker, and a pipeline "
            "draws its shard and sample orders from ShardStream(seed=) and the epoch, not from torch's "
            "random generator: pass seed= to the dataset. With num_workers > 0 the generator seeds "
            "the workers' torch random state (torch.initial_seed() in each worker), as in a DataLoader"
        )


def check_automatic_mode(*, worker_init_fn: Any, multiprocessing_context: Any, generator: Any) -> None:
    """Refuse the arguments of worker processes when the loader chooses its mode itself (neither
    ``num_workers`` nor ``num_threads`` given): it may choose threads, where none applies.

    Raises:
        ValueError: naming the argument, why, and what to write instead.
    """
    given = {
        "worker_init_fn": worker_init_fn,
        "multiprocessing_context": multiprocessing_context,
        "generator": generator,
    }
    for name, value in given.items():
        if value is not None:
            raise ValueError(
                f"{name}={value!r} without num_workers= or num_threads=: ss.Loader then chooses threads "
                "or processes itself by measuring the pipeline, and with threads there is no worker "
                f"process for {name} to apply to. Pass num_workers=M to run worker processes (where "
                f"{name} is honoured), or drop it"
            )


def check_worker_restarts(worker_restarts: Any) -> int:
    """``worker_restarts=`` (lost worker processes replaced per epoch: ``_heal.py``), checked in
    every mode so that a wrong value fails when the loader is built, not at the first loss.

    Raises:
        ValueError: naming the value and what to pass instead.
    """
    if isinstance(worker_restarts, bool) or not isinstance(worker_restarts, int) or worker_restarts < 0:
        raise ValueError(
            f"worker_restarts={worker_restarts!r}: give the number of lost workers to replace per "
            "epoch, an integer of at least 0 (0: the first lost worker raises)"
        )
    return worker_restarts
