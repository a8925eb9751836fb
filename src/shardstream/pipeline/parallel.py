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
(``{"pending_runs": [(...), ...]}``, a tuple per chunk; the others save ``{}``). The producer
takes the state after every batch, and with 64 threads the window holds about 8,000 items: a
reference per chunk makes a list of about 130 entries where a copy of every position made one
of 8,000, on the thread whose time per sample caps thread mode (``bench_scaling.md``). Restoring,
a ``ParallelMapNode`` or a plain one-thread map node (:class:`~.base.MapStage` accepts this
state and its own, ``{"pending": [...]}``, ``base.pending_positions``) first produces those items
again with ``upstream.items_at`` and then continues, so a state taken with any number of
threads restores with any other. Without positions upstream (a plain-function stage) the node
is not stateful and the pipeline replays instead.

Chunks: a handful of microseconds of pool overhead per submission would dominate tiny samples
(to_tuple on a 100-byte sample) while one item per task is right for a 5 ms decode. The node
times the work per item on the pool threads and sizes chunks to about 4 ms of work: on 2 cores,
one JPEG decode per task cost more CPU per sample than chunks of a few milliseconds, which came
close to one thread's cost (an A/B run that no results file holds; ``benchmarks/bench_loader.py``
measures thread mode with the chunks as they are). That time is wall time, and with many
threads it counts each item's wait for the GIL, so the chunks shrink exactly when the GIL is
busiest, and the iterating thread, which waits for the oldest chunk once per chunk, queues for
the GIL behind every pool thread each time it wakes. The pool's ``min_chunk`` bounds them from
below: ``ss.Loader`` in thread mode sets it to its thread count N, so that the iterating
thread wakes for a chunk at most once per N items (``benchmarks/results/bench_scaling.md`` has
what it bought at 64 and 128 emulated cores). A worker process's pool keeps ``min_chunk``
at 1: the items read ahead are the pending positions its every batch carries to the loader's
process (pickled, see *State* above), and with large chunks a window holds thousands of them.
A floor on every pool cost the workers that run many threads each most of their rate (the same
file); with the positions left out of the batches, the same floor made them faster (an A/B run
that no results file holds), so the positions, not the chunks, were the cost. Chunks hold 1 to
64 items.

A run's first chunks are smaller: a chunk holds at most one item more than the items sent so
far divided by the pool's threads, so the sizes grow by one for each pool's worth of chunks
(on 64 threads, to 64 items after about 4,000 items). Sent at once, a pool's worth of full
chunks start together and come back together, a whole chunk's work later (with many threads,
each item's work and its wait for the GIL), and nothing of the run reaches the training loop
before then; growing, the first ones come back after one item's work (``bench_scaling.md``
measures the run from its start). Closing a run (an epoch left early, a loader closed)
cancels the chunks not started, and those running stop before their next item, so that a
stopped epoch's chunks do not hold the pool's threads for the next one.

The GIL: one chunk in eight of a run's first 256, and one in 64 after them, times each stage's
calls in wall and thread CPU time, and the chunk's wait for a core (the kernel's run-queue time,
``/proc/thread-self/schedstat``), into the stage's
:class:`~shardstream.telemetry.stats.StageStats` (always on: a reading of each clock per stage
and item of that chunk, and the thread CPU clock is a system call: timing every chunk, or one in
eight all along, would cost every sample some of what thread mode's serial part is made of,
``bench_scaling.md``; a run's first chunks are timed densely, so that ``stats()`` has its
figures early). What remains of a call's wall time, neither on a core nor waiting for
one, is time blocked: for a stage that does no I/O, waiting for the GIL. A stage that releases
the GIL (a JPEG decode in C) waits little; one that holds it (a pure-Python map) waits while
the other threads take their turns. ``ss.Loader.stats()`` names such a stage and says that
processes would help.

Without the GIL (free-threaded CPython): thread mode relies on no bytecode being atomic. What
crosses threads, and what guards it:

* the pool's queue (``pool.py``): two deques, whose ``append``, ``appendleft`` and ``popleft``
  are atomic with or without the GIL (documented for ``collections.deque``), and a
  ``queue.SimpleQueue`` of tokens; queueing and closing take the pool's lock, so nothing queued
  is left behind by ``close()``;
* a chunk's items and results: the pool thread's alone from the task's start to its end; the
  :class:`Task`'s lock, let go by the pool thread after it stored the results and taken by the
  iterating thread before it reads them, orders the two;
* ``Task.cancel()``: a flag the pool thread reads before it starts; a cancel that races with the
  start lets the work run, as cancelling a running future does;
* chunk sizes, the chunk sampling count, pending positions, the skip counters: the iterating
  thread's alone (:meth:`ParallelMapNode._run` and the stages' handlers run there);
* ``ParallelMapNode.stopped``: set by the iterating thread when the run closes, read by the pool
  threads before each item; one read late, a thread works one more item whose result nobody
  takes;
* the stages' thread timings: added under one lock for every run; each stage's counters are
  made before the pool starts (they are made lazily, and two threads making them at once would
  keep one of two);
* :meth:`Threads.spread`: a lock around the index handed out and the calls left, an ``Event``
  for the end;
* ``loader/threads.py``: a ``queue.Queue`` between the producer and the training loop, an
  ``Event`` to stop; ``loader/buffers.py``: a lock around lending, returning and counting;
* the tar reader's compiled fast path (``tar/_cmembers.c``): no state, declared to need no GIL
  (a free-threaded CPython keeps its GIL off when it is imported); its grouping fills the
  sample in hand, which the reading thread alone holds until the sample is yielded;
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

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from .base import MapStage, Node, RunContext, StateDict, pending_positions
from .pool import Task, Threads

__all__ = ["ParallelMapNode", "Task", "Threads", "build_parallel"]

_CHUNK_SECONDS = 0.004  # target work per submitted chunk (sub-millisecond chunks cost more CPU)
_MAX_CHUNK = 64
_SAMPLE_EVERY = 8  # one chunk in this many times each stage in wall and CPU time (the GIL check) ...
_SAMPLE_FIRST = 256  # ... among a run's first chunks; one in _SAMPLE_LATER after them
_SAMPLE_LATER = 64
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
        # Positions of the items pulled and not yet yielded: those of the chunk being yielded from
        # index `at` on, then one tuple per chunk in flight (a state copies a reference per chunk;
        # tuples, so that no one holding a state can change the run's positions).
        self.current: tuple[Any, ...] = ()
        self.at = 0
        self.pending: deque[tuple[Any, ...]] = deque()
        self.last: Any = None
        self.per_item = 0.0  # seconds of work per item, measured on the pool threads
        self.inflight: deque[Task] = deque()
        self.chunks = 0
        self.sent = 0  # items sent to the pool in this run (the first chunks grow with it)
        self.stopped = False  # closed: the chunks running stop at their next item
        for stage in self.stages:
            stage.stats  # noqa: B018 - made here, before pool threads add to it (it is made lazily)
        if upstream.tell is not None:
            self.tell = self._tell
        self._it = self._run(pending_positions(state) or [])

    def _tell(self) -> Any:
        return self.last

    def pending_state(self) -> StateDict:
        runs = [self.current[self.at :]] if self.at < len(self.current) else []
        runs.extend(self.pending)
        return {"pending_runs": runs} if runs else {}

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
            if self.stopped:  # nobody takes these results any more
                break
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
        # One reading of each clock per call: a call's end is the next one's start (what runs
        # between two calls, a few bytecodes, counts to the next stage). The thread CPU clock is
        # a system call, not a vDSO read.
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for item in items:
            if self.stopped:
                break
            for i, fn in enumerate(fns):
                try:
                    item = fn(item)
                except Exception as exn:
                    item = _Failed(i, exn)
                    break
                finally:
                    w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                    cpu[i] += c1 - c0
                    wall[i] += w1 - w0
                    w0, c0 = w1, c1
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
        """Items for the next chunk (1 to 64): about 4 ms of work, and at least the pool's
        ``min_chunk``, once the run has sent a pool's worth of chunks of each size below
        (see the module docstring); one item while the work is not yet known."""
        if self.per_item <= 0:
            return 1
        size = min(_MAX_CHUNK, max(self.threads.min_chunk, int(_CHUNK_SECONDS / self.per_item)))
        return min(size, 1 + self.sent // self.threads.n)

    def _run(self, tokens: list[Any]) -> Iterator[Any]:
        assert self.upstream is not None
        # A restored state's pending items first, with their saved positions; then upstream's
        # items, read in a plain loop (no generator layer or tuple per item: this thread's
        # time per item is the serial part that caps thread mode, bench_scaling.md).
        replay = deque(zip(self.upstream.items_at(tokens), tokens, strict=True)) if tokens else deque()
        upstream, tell = iter(self.upstream), self.up_tell
        inflight, pending, threads = self.inflight, self.pending, self.threads
        max_chunks = 2 * threads.n + 2
        exhausted = False
        failure: BaseException | None = None  # raised by upstream; raised here after the items before it
        while True:
            # Read ahead until the window is full, or the oldest chunk is done: its items go out
            # first (at an epoch's start the first batch then waits for one chunk, not for a
            # window of chunks read and sent through the pool).
            while not exhausted and len(inflight) < max_chunks and not (inflight and inflight[0].done()):
                chunk: list[Any] = []
                positions: list[Any] = []
                size = self._chunk_size()
                try:
                    while replay and len(chunk) < size:
                        item, token = replay.popleft()
                        chunk.append(item)
                        positions.append(token)
                    if len(chunk) < size:
                        for item in upstream:
                            chunk.append(item)
                            positions.append(tell() if tell is not None else None)
                            if len(chunk) >= size:
                                break
                        else:
                            exhausted = True
                except Exception as exn:
                    failure, exhausted = exn, True
                if chunk:
                    pending.append(tuple(positions))
                    # Some chunks are timed stage by stage (decided here: no counter is shared
                    # between the pool threads).
                    every = _SAMPLE_EVERY if self.chunks < _SAMPLE_FIRST else _SAMPLE_LATER
                    work = self._work_sampled if self.chunks % every == 0 else self._work
                    self.chunks += 1
                    self.sent += len(chunk)
                    inflight.append(threads.task(work, chunk))
            if not inflight:
                if failure is not None:
                    raise failure
                return
            results, per_item = inflight.popleft().result()
            self.per_item = per_item if self.per_item == 0 else 0.8 * self.per_item + 0.2 * per_item
            self.current, self.at = pending.popleft(), 0  # the positions of the chunk's items
            done = self.current
            for at, out in enumerate(results, 1):
                self.at = at  # a state taken at the yield below holds the positions after it
                token = done[at - 1]
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
        self.stopped = True
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
