"""Thread mode of ``ss.Loader``: one process, a producer thread, per-sample stages on a pool.

The producer thread iterates the loader's private copy of the pipeline (the reader stays
sequential in it), makes batches and takes the copy's position right after each batch's last
sample, as a DataLoader worker does (``_state.py``); the batch and its position cross to the
training loop through a bounded queue. The pipeline's runs of per-sample stages (decode, map,
to_tuple) run on the loader's :class:`~shardstream.pipeline.parallel.Threads` pool in order, so
the batches are exactly those of one thread. The pool and the fill flag are this run's
(``DataPipeline.run``): nothing is left on the pipeline.

The training loop waits for a batch at most the loader's bound (``worker_timeout=``/``timeout=``,
as for worker processes); past it, :class:`~shardstream.errors.WorkerStuckError` gives the Python
stacks of the producer and the pool's threads. A thread cannot be killed: it is told to stop and
left behind (a daemon) instead of joined.

Every stop path ends the same way (:meth:`EpochRun.close`): the stop flag is set, the queue is
drained so a producer blocked on it wakes, the producer closes the pipeline's iterator (which
closes its shard streams) and is joined. Errors in the producer are raised in the training loop
with their traceback, after the batches produced before them.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import WorkerStuckError
from ..pipeline.pipeline import close_iterator
from ..pipeline.pool import Task, Threads
from ..pipeline.seams import LoaderDataset

__all__ = ["EpochRun"]

log = logging.getLogger(__name__)

_END = object()
_JOIN_SECONDS = 30.0


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class EpochRun:
    """One epoch of a dataset made into batches on a producer thread (see the module docstring).

    Args:
        dataset: the loader's private copy of the pipeline (its epoch set or restored).
        batch_size: samples per batch (``None``: the pipeline's items are the batches).
        collate: makes a batch from a list of samples (or converts one item when ``batch_size``
            is ``None``).
        drop_last: drop a last batch shorter than ``batch_size``.
        prefetch: batches made ahead of the training loop.
        threads: the pool that runs the per-sample stages and also collates batches (the copy
            into a batch runs beside the reading of the next one; numpy copies release the
            GIL), or ``None``.
        fills: the loader's default collation makes the batches (``DataPipeline.run``).
        bound: seconds the training loop waits for a batch before :class:`WorkerStuckError`
            (0: forever).
    """

    def __init__(
        self,
        dataset: LoaderDataset,
        *,
        batch_size: int | None,
        collate: Callable[[Any], Any],
        drop_last: bool,
        prefetch: int,
        threads: Threads | None = None,
        fills: bool = False,
        bound: float = 0.0,
    ) -> None:
        self.dataset, self.batch_size, self.collate, self.drop_last = dataset, batch_size, collate, drop_last
        self.threads, self.fills = threads, fills
        self.bound = bound
        self.poll = min(1.0, bound) if bound > 0 else 1.0  # the first wait's length, then checks
        self.abandoned = False  # stuck: told to stop, never joined
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, prefetch))
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._produce, name="shardstream-loader", daemon=True)
        self.thread.start()

    # -- the producer thread ---------------------------------------------------------------------
    def _put(self, item: Any) -> bool:
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _make(self, item: Any) -> Any:
        """The batch made from ``item``: here without a pool, else a task on the pool. While
        the training loop has batches in hand the making waits behind the reading's chunks
        (``Threads.task(later=True)``), so the reader keeps the pool fed; a batch the loop
        is (or will at once be) waiting for goes before everything queued."""
        if self.threads is None:
            return self.collate(item)
        waiting = self.queue.empty()  # the loop waits (or will at once) for this batch
        return self.threads.task(self.collate, item, later=not waiting, first=waiting)

    def _batches(self, it: Iterator[Any]) -> Iterator[Any]:
        size = self.batch_size
        if size is None:
            for item in it:
                yield self._make(item)
            return
        while True:
            samples = []
            for sample in it:
                samples.append(sample)
                if len(samples) == size:
                    break
            if not samples or (len(samples) < size and self.drop_last):
                return
            yield self._make(samples)
            if len(samples) < size:
                return

    def _produce(self) -> None:
        dataset: Any = self.dataset
        try:
            it = dataset.run(self.threads, fills=self.fills)
            try:
                for batch in self._batches(it):
                    if not self._put((batch, dataset.position())):
                        return
            finally:
                close_iterator(it)
            self._put(_END)
        except BaseException as exn:  # handed to the training loop, which raises it
            self._put(_Failure(exn))

    # -- the training loop's side ----------------------------------------------------------------
    def get(self) -> tuple[Any, Any] | None:
        """The next ``(batch, position)``, or ``None`` at the end of the epoch.

        Raises:
            WorkerStuckError: no batch came within the loader's bound.
        """
        try:
            item = self.queue.get(timeout=self.poll)
        except queue.Empty:
            item = self._wait()
        if item is _END:
            return None
        if type(item) is _Failure:
            raise item.error
        batch, position = item
        if type(batch) is Task:
            batch = batch.result()  # collated on the pool: raises the collate function's error
        return batch, position

    def _wait(self) -> Any:
        """The next item after a first wait of ``poll`` seconds came back empty."""
        start = time.monotonic() - self.poll
        while True:
            if not self.thread.is_alive() and self.queue.empty():
                raise RuntimeError("the loader's producer thread ended without a result")
            left = self.bound - (time.monotonic() - start) if self.bound > 0 else 1.0
            if left <= 0:
                raise self._stuck()
            try:
                return self.queue.get(timeout=min(1.0, left))
            except queue.Empty:
                continue

    def _stuck(self) -> WorkerStuckError:
        """Tell the producer to stop, leave it behind, and say where each thread is."""
        self.stopping.set()
        self.abandoned = True
        frames = sys._current_frames()
        threads = [self.thread, *(self.threads.members if self.threads is not None else ())]
        stacks = []
        for thread in threads:
            frame = frames.get(thread.ident) if thread.ident is not None else None
            where = "".join(traceback.format_stack(frame)) if frame is not None else "  (ended)\n"
            stacks.append(f"Thread {thread.name!r}:\n{where}")
        stack = "\n".join(stacks).rstrip()
        message = (
            f"ss.Loader made no batch for {self.bound:.0f} s (timed out): thread mode, so the batch is "
            f"late in this process (pid {os.getpid()}). The stacks of its producer thread and of its "
            f"{len(threads) - 1} pool thread(s) (most recent call last):\n{stack}\n"
            "A thread cannot be killed: these are told to stop and left behind; they end at their next "
            "item, or with the process. What to do: if a stack is in your code or a slow store, fix it "
            "or raise the bound (worker_timeout= or timeout= on the loader, or "
            "SHARDSTREAM_WORKER_TIMEOUT; 0 waits forever); a stage that can hang for good is better "
            "run in worker processes (num_workers > 0), where a stuck worker is ended and named."
        )
        return WorkerStuckError(message, worker=0, pid=os.getpid(), stack=stack)

    def close(self) -> None:
        """Stop the producer and join it (idempotent). A producer stuck in a read for longer than
        30 s is left behind with a warning (it is a daemon thread and stops at the next item);
        one already reported stuck is left behind at once."""
        self.stopping.set()
        if self.abandoned:
            return
        deadline = time.monotonic() + _JOIN_SECONDS
        while self.thread.is_alive() and time.monotonic() < deadline:
            try:
                while True:
                    self.queue.get_nowait()  # wake a producer blocked on a full queue
            except queue.Empty:
                pass
            self.thread.join(timeout=0.05)
        if self.thread.is_alive():
            log.warning("the loader's producer thread did not stop within %.0f s", _JOIN_SECONDS)
