"""The fetch-ahead engine: a bounded window of sample fetches running ahead of the consumer.

:class:`FetchAhead` takes jobs in consumption order (sample numbers in sampler order) and a
function that fetches one job, and keeps up to ``window`` of them running on threads, bounded
also by ``max_bytes`` of fetched-but-not-consumed data. Results come back in job order
(``ordered=True``) or as they complete. A failed job is delivered as its exception (a value), so
the consumer's error policy decides; nothing else is cancelled by it.

Where it is used: it is the generic engine for any ``fetch(job)`` function (exported for users'
own fetches). :class:`~.reader.ObjectReader` fetches objects through a source's ``get_many``
session instead (:mod:`.fetch_loop`), which for S3 runs on one thread on epoll and costs a
fraction of this engine's client CPU per object at the same window (a thread per request pays
for waking that thread and handing over the GIL several times per GET; both are measured in
``benchmarks/results/bench_objects.md``). The threads here are plain ones fed through two
``queue.SimpleQueue`` (jobs out, results back), not an executor's futures, whose condition
variables cost tens of microseconds per job. They are started through the fork gate and fetch
inside its busy regions (:mod:`shardstream.forks`).

Stopping: closing the iterator (a ``break``, a DataLoader shutting down its worker, garbage
collection) sets the stop event, cancels jobs not started, wakes backoff sleeps and joins every
thread before ``close()`` returns; a request already on the wire finishes first (bounded by the
source's timeouts; objects are small) and its connection goes back to the pool.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterable
from functools import partial
from typing import Any, Generic, TypeVar

from ..forks import gate

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_WINDOW", "FetchAhead"]

J = TypeVar("J")
R = TypeVar("R")

#: Jobs in flight per process (per DataLoader worker). Chosen by measurement: see the module doc.
DEFAULT_WINDOW = 32
#: Bytes fetched ahead and not yet consumed, at most (one job is always allowed).
DEFAULT_MAX_BYTES = 256 << 20


class FetchAhead(Generic[J, R]):
    """Runs ``fetch(job)`` for jobs ahead of the consumer on a bounded pool of threads.

    Args:
        fetch: fetches one job; may raise (the exception is delivered in the job's place).
        window: jobs running or done-but-not-consumed at most (default 32).
        max_bytes: bytes of such jobs at most, by ``nbytes(job)`` (default 256 MiB).
        nbytes: expected size of a job (default: 0, only ``window`` bounds).
        ordered: deliver in job order (default) or as jobs complete.
        stop: an event the fetch function also watches; set when the run is closed.
    """

    def __init__(
        self,
        fetch: Callable[[J], R],
        *,
        window: int = DEFAULT_WINDOW,
        max_bytes: int = DEFAULT_MAX_BYTES,
        nbytes: Callable[[J], int] | None = None,
        ordered: bool = True,
        stop: threading.Event | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"window={window} must be at least 1")
        self.fetch = fetch
        self.window = window
        self.max_bytes = max_bytes
        self.nbytes = nbytes
        self.ordered = ordered
        self.stop = stop if stop is not None else threading.Event()

    def run(self, jobs: Iterable[J]) -> Generator[tuple[J, R | BaseException], None, None]:
        """``(job, result or exception)`` for every job; close the generator to stop early."""
        self.stop.clear()
        # Jobs go to the threads and results come back through two C-level queues: a job costs
        # two puts and two gets (cheap C calls), where a Future and its condition variables
        # cost many times more and a lock allocated per wait.
        todo: queue.SimpleQueue[tuple[int, J] | None] = queue.SimpleQueue()
        done: queue.SimpleQueue[tuple[int, Any, BaseException | None]] = queue.SimpleQueue()
        threads: list[threading.Thread] = []
        pending: dict[int, tuple[J, int]] = {}  # submitted, not yet delivered: job, size
        arrived: dict[int, tuple[Any, BaseException | None]] = {}  # ordered: finished, not yet due
        source = iter(jobs)
        exhausted = False
        submitted = delivered = held = 0
        try:
            while True:
                while not exhausted and len(pending) < self.window and (not pending or held < self.max_bytes):
                    job = next(source, _END)
                    if job is _END:
                        exhausted = True
                        break
                    size = self.nbytes(job) if self.nbytes is not None else 0  # type: ignore[arg-type]
                    pending[submitted] = (job, size)  # type: ignore[assignment]
                    todo.put((submitted, job))  # type: ignore[arg-type]
                    submitted += 1
                    held += size
                    if len(threads) < len(pending):  # a thread per job in flight, up to the window
                        thread = gate.start(
                            partial(_work, self.fetch, todo, done), name=f"shardstream-fetch_{len(threads)}"
                        )
                        threads.append(thread)
                if not pending:
                    return
                if self.ordered:  # results that arrive early wait in ``arrived`` for their turn
                    while delivered not in arrived:
                        seq, result, error = done.get()
                        arrived[seq] = (result, error)
                    seq = delivered
                    delivered += 1
                    result, error = arrived.pop(seq)
                else:
                    seq, result, error = done.get()
                job, size = pending.pop(seq)
                held -= size
                yield job, (error if error is not None else result)
        finally:
            self.stop.set()
            while True:  # cancel the jobs no thread has taken
                try:
                    todo.get_nowait()
                except queue.Empty:
                    break
            for _ in threads:
                todo.put(None)
            for thread in threads:
                thread.join()
            # Every fetch thread has ended: the event may go down again, so that fetches made
            # directly afterwards (a shuffle buffer refilled on restore, map-style access) run.
            self.stop.clear()


def _work(
    fetch: Callable[[Any], Any],
    todo: queue.SimpleQueue[Any],
    done: queue.SimpleQueue[tuple[int, Any, BaseException | None]],
) -> None:
    """A fetch thread: jobs from ``todo`` until it gets None, each result or error to ``done``."""
    while True:
        item = todo.get()
        if item is None:
            return
        seq, job = item
        with gate.busy():  # a fork waits for a fetch in flight (see shardstream.forks)
            try:
                result = fetch(job)
            except BaseException as exn:  # delivered in the job's place; the consumer's policy decides
                done.put((seq, None, exn))
            else:
                done.put((seq, result, None))


_END = object()
