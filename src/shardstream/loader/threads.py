"""Thread mode of ``ss.Loader``: one process, a producer thread, per-sample stages on a pool.

The producer thread iterates the pipeline (the reader stays sequential in it), makes batches and
takes the pipeline's position right after each batch's last sample, as a DataLoader worker does
(``_state.py``); the batch and its position cross to the training loop through a bounded queue.
The pipeline's runs of per-sample stages (decode, map, to_tuple) run on the loader's
:class:`~shardstream.pipeline.parallel.Threads` pool in order, so the batches are exactly those
of one thread.

Every stop path ends the same way (:meth:`EpochRun.close`): the stop flag is set, the queue is
drained so a producer blocked on it wakes, the producer closes the pipeline's iterator (which
closes its shard streams) and is joined. Errors in the producer are raised in the training loop
with their traceback, after the batches produced before them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from ..pipeline.parallel import Threads
from ..pipeline.pipeline import close_iterator
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
        dataset: the pipeline (its epoch already begun or restored by the loader).
        batch_size: samples per batch (``None``: the pipeline's items are the batches).
        collate: makes a batch from a list of samples (or converts one item when ``batch_size``
            is ``None``).
        drop_last: drop a last batch shorter than ``batch_size``.
        prefetch: batches made ahead of the training loop.
        threads: the pool that also collates batches (the copy into a batch runs beside the
            reading of the next one; numpy copies release the GIL), or ``None``.
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
    ) -> None:
        self.dataset, self.batch_size, self.collate, self.drop_last = dataset, batch_size, collate, drop_last
        self.threads = threads
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
        """The batch made from ``item``: here without a pool, else a future on the pool. While
        the training loop has batches in hand the making waits behind the reading's chunks
        (``Threads.submit(later=True)``), so the reader keeps the pool fed; a batch the loop
        is (or will at once be) waiting for goes first."""
        if self.threads is None:
            return self.collate(item)
        return self.threads.submit(self.collate, item, later=not self.queue.empty())

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
            it = iter(dataset)
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
        """The next ``(batch, position)``, or ``None`` at the end of the epoch."""
        while True:
            try:
                item = self.queue.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    raise RuntimeError("the loader's producer thread ended without a result") from None
        if item is _END:
            return None
        if type(item) is _Failure:
            raise item.error
        batch, position = item
        if isinstance(batch, Future):
            batch = batch.result()  # collated on the pool: raises the collate function's error
        return batch, position

    def close(self) -> None:
        """Stop the producer and join it (idempotent). A producer stuck in a read for longer than
        30 s is left behind with a warning (it is a daemon thread and stops at the next item)."""
        self.stopping.set()
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
