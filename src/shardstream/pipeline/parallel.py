"""Per-sample stages on threads: a run of one-to-one stages applied by a pool, delivered in order.

When a pipeline runs with a :class:`Threads` pool in its :class:`~.base.RunContext` (``ss.Loader``
with ``num_threads > 1`` sets one), every run of consecutive :class:`~.base.MapStage` stages
(decode, map, to_tuple, ...) is built as one :class:`ParallelMapNode`. The stage before the run
(the reader, a shuffle buffer) is still pulled by one thread, the one iterating the pipeline;
the items it yields are cut into chunks, each chunk goes to the pool, and the results are
taken back in submission order. The output is therefore exactly the one-thread output, whatever
the scheduling, and nothing relies on the GIL: a chunk's items belong to the pool thread that
runs it until its task completes, and everything else (pulling, handlers, skip counters, the
state) happens in the iterating thread.

Errors keep their one-thread meaning: a stage's exception travels back with the chunk and the
stage's handler decides in the iterating thread, in order (skip and count, stop, or raise).

State: items pulled from upstream but not yet yielded are *pending*; the node saves their
positions (upstream ``tell`` tokens), as a shuffle buffer does, under the first stage of the run
(``{"pending": [...]}``; the others save ``{}``). Restoring, a ``ParallelMapNode`` or a plain
one-thread map node (:class:`~.base.MapStage` accepts the same state) first produces those items
again with ``upstream.items_at`` and then continues, so a state taken with any number of
threads restores with any other. Without positions upstream (a plain-function stage) the node
is not stateful and the pipeline replays instead.

Chunks: a handful of microseconds of pool overhead per submission would dominate tiny samples
(to_tuple on a 100-byte sample) while one item per task is right for a 5 ms decode. The node
times the work per item on the pool threads and sizes chunks to about 4 ms of work: on 2 cores,
one JPEG decode per task cost more CPU per sample than chunks of a few milliseconds, which came
close to one thread's cost (an A/B run that no results file holds; ``benchmarks/bench_loader.py``
measures thread mode with the chunks as they are). That time is wall time, and with many
threads it counts each item's wait for the GIL: when the iterating thread keeps the GIL busy, a
short GIL-free call measures several times its length, chunks shrink to a few items, and the
hand-offs of so many chunks take the GIL from the reading, which slows it further
(``benchmarks/bench_scaling.py`` on 64 threads showed it). So a chunk also holds at least what
the iterating thread reads in 2 ms (its time per item from one chunk sent to the next, waits
included): whatever limits the rate, the hand-offs stay at about 500 a second and node, a small
share of the GIL. The price is items in flight: where the pool limits the rate (N threads, D
seconds per item) a chunk holds N x 2 ms of work, N x 2 ms / D items, and the window up to
``2 x threads + 2`` chunks. A chunk grows to at most twice the last one taken back, so that an
epoch's first batches still come from small chunks spread over the threads (grown from the
chunks sent, they reached 64 items within the first window, whose chunks the first batch then
waited for). Chunks hold 1 to 64 items.

The GIL: one chunk in eight times each stage's calls in wall and thread CPU time, and the
chunk's wait for a core (the kernel's run-queue time, ``/proc/thread-self/schedstat``), into the
stage's :class:`~shardstream.telemetry.stats.StageStats` (always on: two clock reads per stage
and item of that chunk). What remains of a call's wall time, neither on a core nor waiting for
one, is time blocked: for a stage that does no I/O, waiting for the GIL. A stage that releases
the GIL (a JPEG decode in C) waits little; one that holds it (a pure-Python map) waits while
the other threads take their turns. ``ss.Loader.stats()`` names such a stage and says that
processes would help.

Without the GIL (free-threaded CPython): thread mode relies on no bytecode being atomic. What
crosses threads, and what guards it:

* the pool's queue: two deques, whose ``append`` and ``popleft`` are atomic with or without the
  GIL (documented for ``collections.deque``), and a ``queue.SimpleQueue`` of tokens; queueing
  and closing take the pool's lock, so nothing queued is left behind by ``close()``;
* a chunk's items and results: the pool thread's alone from the task's start to its end; the
  :class:`Task`'s lock, let go by the pool thread after it stored the results and taken by the
  iterating thread before it reads them, orders the two;
* ``Task.cancel()``: a flag the pool thread reads before it starts; a cancel that races with the
  start lets the work run, as cancelling a running future does;
* chunk sizes, the chunk sampling count, pending positions, the skip counters: the iterating
  thread's alone (:meth:`ParallelMapNode._run` and the stages' handlers run there);
* the stages' thread timings: added under one lock for every run; each stage's counters are
  made before the pool starts (they are made lazily, and two threads making them at once would
  keep one of two);
* :meth:`Threads.spread`: a lock around the index handed out and the calls left, an ``Event``
  for the end;
* ``loader/threads.py``: a ``queue.Queue`` between the producer and the training loop, an
  ``Event`` to stop; ``loader/buffers.py``: a lock around lending, returning and counting;
* the stages' functions on the pool: shardstream's keep nothing shared that a call changes,
  except the JPEG backends' memo (``decoders/_jpeg.py``, a dict filled once per backend, where
  two threads filling it at once store the same value). A user's map function runs on several
  threads at once, as it would on any thread pool.

Left as it is: a stage's skip counter (``StageStats.record``) when two loaders in two threads
iterate one pipeline at once, a read-modify-write that the GIL keeps whole and free-threading
does not (``telemetry/stats.py``); it counts, it does not decide. The interleaving tests
(``tests/integration/test_loader_interleavings.py``) switch threads every microsecond under the
GIL; no free-threaded CPython could be installed where this was written, so none ran there.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future
from typing import Any

from ..optional import mark_loader_thread
from .base import MapStage, Node, RunContext, StateDict

__all__ = ["ParallelMapNode", "Task", "Threads", "build_parallel"]

_CHUNK_SECONDS = 0.004  # target work per submitted chunk (sub-millisecond chunks cost more CPU)
_SEND_SECONDS = 0.002  # at least this much of the iterating thread's time per chunk sent
_MAX_CHUNK = 64
_SAMPLE_EVERY = 8  # one chunk in this many times each stage in wall and CPU time (the GIL check)
#: Guards the stages' thread timings, added to from pool threads (one lock for every run: two
#: loaders over one pipeline share its stages, and so their counters).
_STATS_LOCK = threading.Lock()


def _run_queue_ns() -> int:
    """Nanoseconds this thread has waited for a core so far (Linux schedstat; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


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
    """

    _NOW, _LATER = 0, 1

    def __init__(self, n: int, name: str = "shardstream-map") -> None:
        if n < 1:
            raise ValueError(f"num_threads={n} must be at least 1")
        self.n = n
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


class _Failed:
    """A stage's exception for one item, carried back to the iterating thread."""

    __slots__ = ("stage", "error")

    def __init__(self, stage: int, error: Exception) -> None:
        self.stage, self.error = stage, error


_DROPPED = object()  # a stage with drop_none returned None


class _Part(Node):
    """The place of a stage fused into a :class:`ParallelMapNode` in the pipeline's node list
    (only the last stage's place holds the running node): it carries the run's saved state."""

    def __init__(self, owner: ParallelMapNode, first: bool) -> None:
        super().__init__(owner.upstream)
        self.owner, self.first = owner, first
        self.stateful = owner.stateful
        self._it = iter(())

    def state_dict(self) -> StateDict:
        return self.owner.pending_state() if self.first else {}

    def close(self) -> None:
        """The running node (the run's last place) closes the run."""


class ParallelMapNode(Node):
    """Consecutive one-to-one stages applied on a :class:`Threads` pool, in order (see the module)."""

    def __init__(
        self,
        stages: Sequence[MapStage],
        upstream: Node,
        ctx: RunContext,
        state: StateDict | None,
        contexts: Sequence[RunContext] | None = None,
    ) -> None:
        super().__init__(upstream)
        assert ctx.threads is not None
        self.stages = list(stages)
        self.fns = [s.function(c) for s, c in zip(stages, contexts or [ctx] * len(stages), strict=True)]
        self.drop_none = [s.drop_none for s in stages]
        self.threads = ctx.threads
        self.up_tell = upstream.tell
        self.stateful = upstream.tell is not None
        self.pending: deque[Any] = deque()  # positions of items pulled and not yet yielded
        self.last: Any = None
        self.per_item = 0.0  # seconds of work per item, measured on the pool threads
        self.inflight: deque[Task] = deque()
        self.per_read = 0.0  # the iterating thread's seconds per item, from one chunk sent to the next
        self.size = 1  # items of the last chunk taken back
        self.chunks = 0
        for stage in self.stages:
            stage.stats  # noqa: B018 - made here, before pool threads add to it (it is made lazily)
        if upstream.tell is not None:
            self.tell = self._tell
        tokens = list((state or {}).get("pending", []))
        self._it = self._run(tokens)

    def _tell(self) -> Any:
        return self.last

    def pending_state(self) -> StateDict:
        return {"pending": list(self.pending)} if self.pending else {}

    def state_dict(self) -> StateDict:
        # The run's state is saved in its first stage's place (a _Part, unless that is this node).
        return self.pending_state() if len(self.stages) == 1 else {}

    def parts(self) -> list[Node]:
        """The nodes for the run's places in the pipeline: one per stage, this node last."""
        return [_Part(self, i == 0) for i in range(len(self.stages) - 1)] + [self]

    # -- producing items again (a shuffle buffer downstream) -------------------------------------
    def _apply(self, item: Any) -> Any:
        for fn in self.fns:
            item = fn(item)
        return item

    def item_at(self, token: Any) -> Any:
        assert self.upstream is not None
        return self._apply(self.upstream.item_at(token))

    def items_at(self, tokens: list[Any]) -> list[Any]:
        assert self.upstream is not None
        return [self._apply(item) for item in self.upstream.items_at(tokens)]

    # -- running ---------------------------------------------------------------------------------
    def _work(self, items: list[Any]) -> tuple[list[Any], float]:
        """Runs on a pool thread: every stage over every item of one chunk."""
        start = time.perf_counter()
        fns, drop_none = self.fns, self.drop_none
        out = []
        for item in items:
            for i, fn in enumerate(fns):
                try:
                    item = fn(item)
                except Exception as exn:
                    item = _Failed(i, exn)
                    break
                if item is None and drop_none[i]:
                    item = _DROPPED
                    break
            out.append(item)
        return out, (time.perf_counter() - start) / max(len(items), 1)

    def _work_sampled(self, items: list[Any]) -> tuple[list[Any], float]:
        """:meth:`_work`, timing each stage's calls in wall and thread CPU time: a stage whose
        calls get much less CPU than wall time while threads run it waits for the GIL."""
        start = time.perf_counter()
        queued = _run_queue_ns()
        fns, drop_none = self.fns, self.drop_none
        wall = [0] * len(fns)
        cpu = [0] * len(fns)
        out = []
        for item in items:
            for i, fn in enumerate(fns):
                w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                try:
                    item = fn(item)
                except Exception as exn:
                    item = _Failed(i, exn)
                    break
                finally:
                    cpu[i] += time.thread_time_ns() - c0
                    wall[i] += time.perf_counter_ns() - w0
                if item is None and drop_none[i]:
                    item = _DROPPED
                    break
            out.append(item)
        queued = _run_queue_ns() - queued  # waiting for a core, not for the GIL
        total = sum(wall) or 1
        with _STATS_LOCK:
            for stage, w, c in zip(self.stages, wall, cpu, strict=True):
                stage.stats.thread_wall_ns += w
                stage.stats.thread_cpu_ns += c
                stage.stats.thread_queued_ns += queued * w // total
        return out, (time.perf_counter() - start) / max(len(items), 1)

    def _chunk_size(self) -> int:
        """Items for the next chunk (1 to 64): about 4 ms of work, and at least what the
        iterating thread reads in 2 ms, growing to at most twice the last chunk taken back (see
        the module docstring)."""
        if self.per_item <= 0:
            return 1
        size = int(_CHUNK_SECONDS / self.per_item)
        if self.per_read > 0:
            size = max(size, min(2 * self.size, int(_SEND_SECONDS / self.per_read)))
        return max(1, min(_MAX_CHUNK, size))

    def _inputs(self, tokens: list[Any]) -> Iterator[tuple[Any, Any]]:
        assert self.upstream is not None
        if tokens:
            yield from zip(self.upstream.items_at(tokens), tokens, strict=True)
        tell = self.up_tell
        for item in self.upstream:
            yield item, (tell() if tell is not None else None)

    def _run(self, tokens: list[Any]) -> Iterator[Any]:
        inputs = self._inputs(tokens)
        inflight, pending, threads = self.inflight, self.pending, self.threads
        max_chunks = 2 * threads.n + 2
        exhausted = False
        sent = 0.0  # when the last chunk was sent
        failure: BaseException | None = None  # raised by upstream; raised here after the items before it
        while True:
            # Read ahead until the window is full, or the oldest chunk is done: its items go out
            # first (at an epoch's start the first batch then waits for one chunk, not for a
            # window of chunks read and sent through the pool).
            while not exhausted and len(inflight) < max_chunks and not (inflight and inflight[0].done()):
                chunk: list[Any] = []
                size = self._chunk_size()
                try:
                    for item, token in inputs:
                        chunk.append(item)
                        pending.append(token)
                        if len(chunk) >= size:
                            break
                    else:
                        exhausted = True
                except Exception as exn:
                    failure, exhausted = exn, True
                if chunk:
                    now = time.perf_counter()
                    if sent:
                        per_read = (now - sent) / len(chunk)
                        self.per_read = 0.8 * self.per_read + 0.2 * per_read if self.per_read else per_read
                    sent = now
                    # One chunk in eight is timed stage by stage (decided here: no counter is
                    # shared between the pool threads).
                    work = self._work_sampled if self.chunks % _SAMPLE_EVERY == 0 else self._work
                    self.chunks += 1
                    inflight.append(threads.task(work, chunk))
            if not inflight:
                if failure is not None:
                    raise failure
                return
            results, per_item = inflight.popleft().result()
            self.size = len(results)
            self.per_item = per_item if self.per_item == 0 else 0.8 * self.per_item + 0.2 * per_item
            for out in results:
                token = pending.popleft()
                if type(out) is _Failed:
                    stage = self.stages[out.stage]
                    go_on = stage.handler(out.error)
                    stage.stats.record(out.error)
                    if go_on:
                        continue
                    return
                if out is _DROPPED:
                    continue
                self.last = token
                yield out

    def close(self) -> None:
        for future in self.inflight:
            future.cancel()
        self.inflight.clear()
        super().close()


def build_parallel(
    stages: Sequence[MapStage],
    upstream: Node,
    ctx: RunContext,
    state: StateDict | None,
    contexts: Sequence[RunContext] | None = None,
) -> list[Node]:
    """The nodes for a run of map stages on ``ctx.threads``: one per stage, the running one last
    (``state``: the run's first stage's saved state, which holds the run's; ``contexts``: each
    stage's own context, default ``ctx`` for all)."""
    return ParallelMapNode(stages, upstream, ctx, state, contexts).parts()
