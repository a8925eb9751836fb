"""The fetch-ahead engine: a bounded window of sample fetches running ahead of the consumer.

:class:`FetchAhead` takes jobs in consumption order (sample numbers in sampler order) and a
function that fetches one job, and keeps up to ``window`` of them running on threads, bounded
also by ``max_bytes`` of fetched-but-not-consumed data. Results come back in job order
(``ordered=True``) or as they complete. A failed job is delivered as its exception (a value), so
the consumer's error policy decides; nothing else is cancelled by it.

Why threads with the pooled ``http.client`` client (measured in ``benchmarks/bench_objects.py``):
a signed GET costs about 0.15 ms of CPU in Python either way, the GIL is released while a thread
waits on its socket, and a blocking client lets the fetch reuse the S3 source's connection pool,
retries and error mapping unchanged. asyncio would need a second HTTP client with its own
resume and error mapping for no CPU saving at these request sizes (the event loop's own cost per
request is about the same as a thread switch); obstore stays a possible optional backend.

Stopping: closing the iterator (a ``break``, a DataLoader shutting down its worker, garbage
collection) sets the stop event, cancels jobs not started, wakes backoff sleeps and joins every
thread before ``close()`` returns; a request already on the wire finishes first (bounded by the
source's timeouts; objects are small) and its connection goes back to the pool.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Generic, TypeVar

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
        pending: collections.deque[tuple[J, Future[R], int]] = collections.deque()
        source = iter(jobs)
        exhausted = False
        held = 0
        pool = ThreadPoolExecutor(self.window, thread_name_prefix="shardstream-fetch")
        try:
            while True:
                while not exhausted and len(pending) < self.window and (not pending or held < self.max_bytes):
                    job = next(source, _END)
                    if job is _END:
                        exhausted = True
                        break
                    size = self.nbytes(job) if self.nbytes is not None else 0  # type: ignore[arg-type]
                    pending.append((job, pool.submit(self.fetch, job), size))  # type: ignore[arg-type]
                    held += size
                if not pending:
                    return
                if self.ordered:
                    job, future, size = pending.popleft()
                else:
                    done, _ = wait([f for _, f, _ in pending], return_when=FIRST_COMPLETED)
                    k = next(k for k, (_, f, _) in enumerate(pending) if f in done)
                    job, future, size = pending[k]
                    del pending[k]
                held -= size
                error = future.exception()
                yield job, (error if error is not None else future.result())
        finally:
            self.stop.set()
            for _, future, _ in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            # Every fetch thread has ended: the event may go down again, so that fetches made
            # directly afterwards (a shuffle buffer refilled on restore, map-style access) run.
            self.stop.clear()


_END = object()
