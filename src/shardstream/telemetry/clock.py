"""The timed generators telemetry puts in place of a node's own: a timed layer, a timed map loop.

Reading the clock costs about as much as a small stage, so neither times every item. The first 64
pulls are timed one by one (start-up: a shuffle buffer filling, a first shard opening); after that
a node whose pulls take at least :data:`SLOW_NS` on average (batches), or a map function whose
calls take at least :data:`SLOW_CALL_NS` (an image decode), stays timed at every item, and a faster
one is sampled at random gaps (1 to 255 pulls, mean about 120), so that no periodic pattern of the
data (a shard boundary every 10,000 samples) is always or never sampled. A sampled time is scaled
by the number of pulls it stands for. Slow calls are not sampled because their times have a long
tail on a busy host (a call preempted for a time slice takes many times the usual): a few dozen
samples of a stage miss the tail in most runs, which then lands, unmeasured, in the inclusive time
of the next timed node (``batched`` took the blame for the decode). Time spent in the source (the
recorder's ``io_ns``, measured exactly by the timed source) is taken out of every timed pull, so
that rare expensive pulls (a shard opening) never enter a scaled sample.

* :func:`clocked` wraps a node's generator: it measures the node's *inclusive* time (its own
  plus everything upstream).
* :func:`timed_map` replaces the loop of a map stage (the same try/handler/skip loop as
  ``shardstream.pipeline.base.guarded``): it times the function alone (the stage's *own*
  time) and adds no generator layer. Given the slot of the node upstream (``up``), it also
  times that node's pulls, so that node needs no layer of its own: this is how the reading
  node, followed by a decode or map stage, is timed. It is a copy of that loop, not a flag on
  it, so that the untimed loop costs nothing when telemetry is off.

Counting every item in Python would cost more than everything else here (an attribute
increment allocates an int). Untimed items therefore pass in runs, ``zip(range(n), it)``: the
run's range iterator is kept in the slot, and :meth:`Slot.count` reads how far it got. Counts
are exact at any moment (a batch sent by a DataLoader worker carries exact sample counts), for
the price of a tuple unpack per item.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from operator import length_hint
from typing import Any, Protocol

from ..handlers import Handler
from .stats import StageStats

__all__ = ["SLOW_CALL_NS", "SLOW_NS", "WARMUP", "Clock", "Slot", "clocked", "timed_map"]

#: Pulls timed one by one before sampling may start.
WARMUP = 64
#: A node whose pulls take at least this long on average (batches of samples) is timed at every
#: pull: the clock's two reads are then negligible next to the pull.
SLOW_NS = 250_000
#: A map function whose calls take at least this long on average is timed at every call: two
#: clock reads are then a small part of the call (see the module doc for why sampling such calls
#: misleads).
SLOW_CALL_NS = 20_000
_rng = random.Random(16)  # the same gaps in every process and run
_GAPS = tuple(_rng.randint(1, 255) for _ in range(97))
del _rng
#: The runs between two timed items: range objects made once (``iter()`` of one is a run).
_RUNS = tuple(range(n) for n in range(max(_GAPS)))
_NO_RUN: Iterator[int] = iter(())
_END = object()


class Clock(Protocol):
    """What the timed generators need from the recorder (``ended``: set when a timed node finds
    the end of what it reads, so a loader worker sends every counter with its last batches)."""

    io_ns: int
    next_log: int | float
    ended: bool

    def tick(self, now: int) -> None: ...


class Slot:
    """Counters of one node, I/O excluded: pulls timed one by one (``exact_ns``), and sampled
    pulls (``sampled_ns`` over ``sampled`` of them) that stand for ``span`` pulls. ``items``
    counts the items of finished runs; :meth:`count` adds the run in progress (``run``, a range
    iterator, advanced once per item, of ``run_len`` items)."""

    __slots__ = (
        "label", "kind", "mode", "stats", "items", "run", "run_len",
        "exact_ns", "sampled_ns", "sampled", "span", "first", "last", "head",
    )  # fmt: skip

    def __init__(self, label: str, kind: str, mode: str, stats: StageStats | None) -> None:
        self.label, self.kind, self.mode, self.stats = label, kind, mode, stats
        self.items = self.exact_ns = self.sampled_ns = self.sampled = self.span = 0
        self.run: Iterator[int] = _NO_RUN
        self.run_len = 0
        self.first = self.last = 0
        self.head = 0  # the first pulls of every pass, I/O included (start-up)

    def count(self) -> int:
        """Items so far, exact: the finished runs and the part of the current one."""
        return self.items + self.run_len - length_hint(self.run)

    def start_run(self, run: Iterator[int], n: int) -> None:
        self.run, self.run_len = run, n

    def end_run(self, done: int) -> None:
        """The current run ends after ``done`` items (each stands in the sampled estimate)."""
        self.items += done
        self.span += done
        self.run, self.run_len = _NO_RUN, 0

    def end_open_run(self) -> None:
        """End a run left in the middle (the consumer stopped, or the error policy ended it)."""
        if self.run_len:
            self.end_run(self.run_len - length_hint(self.run))

    def estimate(self) -> int:
        """Nanoseconds: the exact part plus the sampled part scaled to the pulls it stands for."""
        if not self.sampled:
            return self.exact_ns
        return self.exact_ns + self.sampled_ns * self.span // self.sampled


def clocked(it: Iterator[Any], slot: Slot, rec: Clock) -> Iterator[Any]:
    """Yield ``it``'s items, timing their pulls (inclusive time, I/O excluded).

    Between two sampled pulls the items pass in a run (a C loop): an untimed item costs one
    resumption and one tuple unpack.
    """
    clock = time.perf_counter_ns
    gaps, g = _GAPS, 0
    n = warm = 0
    exact = True  # the warm-up, and nodes slow enough to time every pull
    if not slot.first:
        slot.first = clock()
    try:
        while True:
            t = clock()
            io = rec.io_ns
            item = next(it, _END)
            now = clock()
            spent = now - t - (rec.io_ns - io)
            if exact:
                slot.exact_ns += spent
                warm += spent
                if not n:
                    slot.head += now - t
            else:  # this pull stands for itself and the untimed run after it
                slot.sampled_ns += spent
                slot.sampled += 1
                slot.span += 1
            slot.last = now
            if now >= rec.next_log:
                rec.tick(now)
            if item is _END:
                rec.ended = True
                return
            n += 1
            slot.items += 1
            yield item
            if exact:
                if n < WARMUP or warm >= SLOW_NS * n:
                    continue
                exact = False  # fast pulls: sample from here on
            want = gaps[g] - 1
            g = (g + 1) % len(gaps)
            run = iter(_RUNS[want])
            slot.start_run(run, want)
            i = -1
            for i, item in zip(run, it, strict=False):  # noqa: B007 - i: how far the run got
                yield item
            slot.end_run(i + 1)
            if i + 1 < want:  # the source ended during the run (an untimed pull found it)
                slot.span += 1
                rec.ended = True
                return
    finally:
        slot.end_open_run()
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _skip(exn: Exception, handler: Handler, stats: StageStats) -> bool:
    """The error policy's answer for ``exn`` (True: skip the item), counted in ``stats``."""
    go_on = handler(exn)
    stats.record(exn)
    return bool(go_on)


def timed_map(
    src: Iterable[Any],
    fn: Callable[[Any], Any],
    handler: Handler,
    stats: StageStats,
    drop_none: bool,
    slot: Slot,
    rec: Clock,
    up: Slot | None = None,
) -> Iterator[Any]:
    """``shardstream.pipeline.base.guarded`` with ``fn`` timed (own time): the first 64
    calls, and every call when they average :data:`SLOW_CALL_NS` or more, else one per run of
    calls of random length (mean about 120). With ``up``, the pulls from ``src`` are timed at the
    same points and counted there (``src``'s inclusive time, I/O excluded), in place of a
    :func:`clocked` layer on ``src``."""
    clock = time.perf_counter_ns
    gaps, g = _GAPS, 0
    timed = 0  # calls timed one by one so far (the warm-up, and all of them when slow)
    warm = 0  # their nanoseconds
    exact = True
    it = iter(src)
    if not slot.first:
        slot.first = clock()
    if up is not None and not up.first:
        up.first = slot.first
    try:
        while True:
            # One timed item: its pull (with ``up``) and its call.
            if up is None:
                item = next(it, _END)
                if item is _END:
                    rec.ended = True
                    return
                t = clock()
            else:
                t = clock()
                io = rec.io_ns
                item = next(it, _END)
                now = clock()
                spent = now - t - (rec.io_ns - io)
                if exact:
                    up.exact_ns += spent
                else:  # this pull stands for itself and the untimed run after it
                    up.sampled_ns += spent
                    up.sampled += 1
                    up.span += 1
                up.last = t = now
                if item is _END:
                    rec.ended = True
                    return
                up.items += 1
            slot.items += 1
            try:
                out = fn(item)
            except Exception as exn:
                if _skip(exn, handler, stats):
                    continue  # time the next item instead
                return
            now = clock()
            if exact:
                slot.exact_ns += now - t
                warm += now - t
                timed += 1
            else:
                slot.sampled_ns += now - t
                slot.sampled += 1
                slot.span += 1
            slot.last = now
            if now >= rec.next_log:
                rec.tick(now)
            if not (drop_none and out is None):
                yield out
            if exact:
                if timed < WARMUP or warm >= SLOW_CALL_NS * timed:
                    continue
                exact = False  # fast calls: sample from here on
            # A run of untimed items, counted by how far its range iterator got. (A chain of C
            # iterators, ``map(fn, ...)``, costs more: a call from C into a Python function is
            # not inlined as a call from bytecode is.)
            want = gaps[g] - 1
            g = (g + 1) % len(gaps)
            run = iter(_RUNS[want])
            slot.start_run(run, want)
            if up is not None:
                up.start_run(run, want)
            i = -1
            for i, item in zip(run, it, strict=False):  # noqa: B007 - i: how far the run got
                try:
                    out = fn(item)
                except Exception as exn:
                    if _skip(exn, handler, stats):
                        continue
                    return
                if drop_none and out is None:
                    continue
                yield out
            slot.end_run(i + 1)
            if up is not None:
                up.end_run(i + 1)
            if i + 1 < want:  # the source ended during the run (an untimed pull found it)
                if up is not None:
                    up.span += 1
                rec.ended = True
                return
    finally:
        slot.end_open_run()
        if up is not None:
            up.end_open_run()
