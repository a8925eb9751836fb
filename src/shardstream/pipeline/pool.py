"""The loader's thread pool: the threads that run a pipeline's per-sample stages in thread mode.

:class:`Threads` runs work in two priorities (the reading's chunks now, a batch made ahead
later) and lets a batch the training loop waits for go first; :class:`Task` is the handle of one
piece of work, lighter than a ``concurrent.futures.Future``; :meth:`Threads.spread` shares one
call's rows with the idle threads. What guards each piece of state shared between threads is
listed in ``parallel.py``'s docstring, with the rest of thread mode.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from typing import Any

from ..optional import mark_loader_thread

__all__ = ["Task", "Threads"]


class _Running(threading.local):
    """The priority of the work a pool thread runs (``Threads._NOW`` or ``_LATER``; a thread
    outside the pool counts as later)."""

    priority = 1


class Task:
    """Work on a :class:`Threads` pool that only its submitter waits for: ``done()``,
    ``result()``, ``cancel()``. Lighter than a ``concurrent.futures.Future`` (no condition
    variable, no callbacks): one lock, held from the submission until the work has ended, so
    ``result()`` waits by taking it, and what the pool thread stored is seen after that."""

    __slots__ = ("fn", "args", "value", "error", "cancelled", "ran", "_running")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn: Callable[..., Any] | None = fn
        self.args: tuple[Any, ...] | None = args
        self.value: Any = None
        self.error: BaseException | None = None
        self.cancelled = False
        self.ran = False
        self._running = threading.Lock()
        self._running.acquire()

    def run(self) -> None:
        """On a pool thread: the work (unless cancelled first), then the lock let go."""
        fn, args = self.fn, self.args
        self.fn = self.args = None  # an idle pool thread holds nothing of its last work
        try:
            if not self.cancelled and fn is not None and args is not None:
                self.ran = True
                self.value = fn(*args)
        except BaseException as exn:  # raised by result(), in the waiting thread
            self.error = exn
        finally:
            del fn, args
            self._running.release()

    def drop(self) -> None:
        """Never run it (the pool closed before it started): ``result()`` raises CancelledError."""
        self.fn = self.args = None
        self.cancelled = True
        self._running.release()

    def done(self) -> bool:
        """Whether the work has ended (a hint: :meth:`result` is where its outcome is read)."""
        return not self._running.locked()

    def cancel(self) -> None:
        """Skip the work if it has not started yet (best effort: it may be starting now)."""
        self.cancelled = True

    def result(self) -> Any:
        """The work's value, once it has ended; raises its error, or CancelledError."""
        with self._running:
            pass
        if self.error is not None:
            raise self.error
        if not self.ran:
            raise CancelledError()
        return self.value


class _Settle:
    """A :meth:`Threads.submit` call's work: runs ``fn(*args)`` into its ``Future``."""

    __slots__ = ("future", "fn", "args")

    def __init__(self, future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.future, self.fn, self.args = future, fn, args

    def run(self) -> None:
        future, fn, args = self.future, self.fn, self.args
        del self.future, self.fn, self.args
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args)
        except BaseException as exn:  # handed to whoever waits on the future
            future.set_exception(exn)
        else:
            future.set_result(result)

    def drop(self) -> None:
        self.future.cancel()


class Threads:
    """A pool of ``n`` threads that runs the per-sample stages of pipelines (owned by a loader).

    Work submitted ``later=True`` (a loader's batches: collation, and with deferred decoding the
    decode itself, ``decoders/deferred.py``) runs only when no other work waits. The thread that
    reads the pipeline submits the per-sample stages' chunks and waits for them; behind a queue
    of 10 ms batches it would leave a pool thread idle until it could submit the next batch.

    The work waits in two deques, one per priority, and each piece queued puts one token on a
    ``queue.SimpleQueue`` that the idle threads block on (a C queue: a hand-off costs one lock
    release there, where ``queue.PriorityQueue`` runs a condition variable in Python). A thread
    that takes a token takes the oldest work of the first priority that has some; work queued
    ``first`` goes before the oldest.

    ``close()`` joins every thread; work not started is cancelled.

    ``min_chunk``: the fewest items in a chunk of the reading once the work per item is known
    (:class:`~.parallel.ParallelMapNode`; 1 to 64). The owner decides, because what larger
    chunks cost depends on where the pipeline's positions go: see ``parallel.py``.
    """

    _NOW, _LATER = 0, 1

    def __init__(self, n: int, name: str = "shardstream-map", *, min_chunk: int = 1) -> None:
        if n < 1:
            raise ValueError(f"num_threads={n} must be at least 1")
        self.n = n
        self.min_chunk = max(1, min_chunk)
        self._work: tuple[deque[Any], deque[Any]] = (deque(), deque())  # by priority
        self._tokens: queue.SimpleQueue[bool | None] = queue.SimpleQueue()  # None: stop
        self._closed = False
        self._lock = threading.Lock()  # closing against queueing: nothing queued is left behind
        self._local = _Running()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{i}", daemon=True) for i in range(n)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, later: bool = False) -> Future[Any]:
        """Run ``fn(*args)`` on the pool; ``later``: only when no other work waits."""
        future: Future[Any] = Future()
        self._queue(_Settle(future, fn, args), later)
        return future

    def task(self, fn: Callable[..., Any], *args: Any, later: bool = False, first: bool = False) -> Task:
        """:meth:`submit` for work whose submitter alone waits for it: a :class:`Task`.
        ``first``: before any other work queued (a batch the training loop waits for; the
        reading's chunks, queued before it, may hold a thread each for tens of milliseconds)."""
        task = Task(fn, args)
        self._queue(task, later, first)
        return task

    def _queue(self, work: Task | _Settle, later: bool, first: bool = False) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the loader's thread pool is closed")
            if first:
                self._work[self._NOW].appendleft(work)
            else:
                self._work[self._LATER if later else self._NOW].append(work)
        self._tokens.put(True)

    def _serve(self) -> None:
        mark_loader_thread()
        local, tokens = self._local, self._tokens
        now, later = self._work
        while True:
            if tokens.get() is None:
                return
            try:  # deque pops are atomic, with or without the GIL
                work, local.priority = now.popleft(), self._NOW
            except IndexError:
                try:
                    work, local.priority = later.popleft(), self._LATER
                except IndexError:  # cancelled by close()
                    continue
            work.run()
            # Hold nothing while idle: a batch kept alive here would hold its reused buffer.
            del work

    def spread(self, n: int, fn: Callable[[int], None]) -> None:
        """Run ``fn(i)`` for every ``i`` in ``range(n)``: on this thread, with the pool's
        other threads helping when they are free; returns when every call has ended and raises
        the error of the lowest ``i`` that failed (no call starts after a failure).

        The help is queued with the priority of the work that spreads: a batch the training
        loop waits for is helped before other work, a batch made ahead only when nothing else
        waits. A batch's deferred decodes are filled this way, so a thread that would idle (an
        epoch's first and last batches, a reader that falls behind) takes rows of the batch
        another one is making. With the prompt hand-out of :class:`ParallelMapNode`, it brought
        the first batch of an epoch sooner without changing the rate (2 threads, a decode stage;
        an A/B run that no results file holds; ``benchmarks/bench_loader.py`` reports the first
        batch of thread mode as it is). The calling thread never waits for help that has not
        started (it takes the rows itself), so a pool whose every thread spreads a batch cannot
        deadlock.
        """
        job = _Spread(n, fn)
        later = self._local.priority == self._LATER
        for _ in range(min(self.n - 1, n - 1)):
            self._queue(Task(job.help, ()), later)
        job.help()
        job.finish()

    @property
    def members(self) -> tuple[threading.Thread, ...]:
        """The pool's threads (a stuck loader reports their stacks)."""
        return tuple(self._threads)

    def close(self, wait: bool = True) -> None:
        """Stop every thread once its current work ends; work not started is cancelled.
        ``wait``: join them (``False`` for a pool whose work may never end: a stuck stage;
        the threads are daemons)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for waiting in self._work:  # cancel what has not started
                while waiting:
                    waiting.popleft().drop()
            for _ in self._threads:
                self._tokens.put(None)
        if not wait:
            return
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

    def __enter__(self) -> Threads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Spread:
    """The calls of one :meth:`Threads.spread`: each thread that helps claims the next index
    under a lock until none is left. ``fn`` is dropped once the last index is claimed, so help
    still queued on the pool holds no batch."""

    def __init__(self, n: int, fn: Callable[[int], None]) -> None:
        self.n = n
        self.fn: Callable[[int], None] | None = fn
        self.next = 0
        self.left = n  # calls not ended yet
        self.errors: dict[int, BaseException] = {}
        self.lock = threading.Lock()
        self.ended = threading.Event()
        if n <= 0:
            self.ended.set()

    def help(self) -> None:
        while True:
            with self.lock:
                i, fn = self.next, self.fn
                if i >= self.n or fn is None:
                    return
                self.next = i + 1
                if self.next == self.n:
                    self.fn = None
            try:
                fn(i)
            except BaseException as exn:  # raised by finish(), in the caller's thread
                with self.lock:
                    self.errors[i] = exn
                    self.left -= self.n - self.next  # no more calls start
                    self.next, self.fn = self.n, None
            finally:
                del fn
                with self.lock:
                    self.left -= 1
                    if self.left == 0:
                        self.ended.set()

    def finish(self) -> None:
        self.ended.wait()
        if self.errors:
            raise self.errors[min(self.errors)]
