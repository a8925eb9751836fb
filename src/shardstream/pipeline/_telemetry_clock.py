"""The timed generators telemetry puts in place of a node's own: a timed layer, a timed map loop.

Reading the clock costs about as much as a small stage, so neither times every item. The first
64 pulls are timed one by one (start-up: a shuffle buffer filling, a first shard opening); after
that a node whose pulls take at least :data:`SLOW_NS` on average (batches) stays timed at every
pull, and a faster one is sampled at random gaps (mean 64), so that no periodic pattern of the
data (a shard boundary every 10,000 samples) is always or never sampled. A sampled time is
scaled by the number of pulls it stands for. Time spent in the source (the recorder's
``io_ns``, measured exactly by the timed source) is taken out of every timed pull, so that rare
expensive pulls (a shard opening) never enter a scaled sample.

* :func:`clocked` wraps a node's generator: it measures the node's *inclusive* time (its own
  plus everything upstream) and counts items exactly.
* :func:`timed_guarded` replaces the loop of a map stage (the same try/handler/skip loop as
  :func:`~shardstream.pipeline.base.guarded`): it times the function alone (the stage's *own*
  time) and adds no generator layer. It is a copy of that loop, not a flag on it, so that the
  untimed loop costs nothing when telemetry is off.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, Protocol

from ..handlers import Handler
from .base import StageStats

__all__ = ["SLOW_NS", "WARMUP", "Clock", "Slot", "clocked", "timed_guarded"]

#: Pulls timed one by one before sampling may start.
WARMUP = 64
#: A node whose pulls take at least this long on average (batches of samples) is timed at every
#: pull: the clock then costs under 0.1% of the pull.
SLOW_NS = 250_000
_GAPS = tuple(random.Random(16).randint(1, 127) for _ in range(97))
_END = object()


class Clock(Protocol):
    """What the timed generators need from the recorder."""

    io_ns: int
    next_log: int | float

    def tick(self, now: int) -> None: ...


class Slot:
    """Counters of one node, I/O excluded: pulls timed one by one (``exact_ns``), and sampled
    pulls (``sampled_ns`` over ``sampled`` of them) that stand for ``span`` pulls."""

    __slots__ = (
        "label", "kind", "mode", "stage",
        "items", "exact_ns", "sampled_ns", "sampled", "span", "first", "last", "head",
    )  # fmt: skip

    def __init__(self, label: str, kind: str, mode: str, stage: Any) -> None:
        self.label, self.kind, self.mode, self.stage = label, kind, mode, stage
        self.items = self.exact_ns = self.sampled_ns = self.sampled = self.span = 0
        self.first = self.last = 0
        self.head = 0  # the first pulls of every pass, I/O included (start-up)

    def estimate(self) -> int:
        """Nanoseconds: the exact part plus the sampled part scaled to the pulls it stands for."""
        if not self.sampled:
            return self.exact_ns
        return self.exact_ns + self.sampled_ns * self.span // self.sampled


def clocked(it: Iterator[Any], slot: Slot, rec: Clock) -> Iterator[Any]:
    """Yield ``it``'s items, timing their pulls (inclusive time, I/O excluded).

    Between two sampled pulls the items pass through ``islice`` (a C loop): an untimed item
    costs one resumption and one count.
    """
    clock = time.perf_counter_ns
    gaps, g = _GAPS, 0
    n = warm = last_run = 0
    exact = True  # the warm-up, and nodes slow enough to time every pull
    if not slot.first:
        slot.first = clock()
    try:
        while True:
            t = clock()
            io = rec.io_ns
            try:
                item = next(it)
            except StopIteration:
                item = _END
            now = clock()
            spent = now - t - (rec.io_ns - io)
            if exact:
                slot.exact_ns += spent
                warm += spent
                if not n:
                    slot.head += now - t
            else:  # this pull stands for itself and the untimed run before it
                slot.sampled_ns += spent
                slot.sampled += 1
                slot.span += last_run + 1
            slot.last = now
            if now >= rec.next_log:
                rec.tick(now)
            if item is _END:
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
            before = slot.items
            for item in islice(it, want):
                slot.items += 1  # per item: a batch sent now carries the exact count
                yield item
            last_run = slot.items - before
            if last_run < want:  # the source ended during the run (an untimed pull found it)
                slot.span += last_run + 1
                return
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _skip(exn: Exception, handler: Handler, stats: StageStats) -> bool:
    """The error policy's answer for ``exn`` (True: skip the item), counted in ``stats``."""
    go_on = handler(exn)
    stats.record(exn)
    return bool(go_on)


def timed_guarded(
    src: Iterable[Any],
    fn: Callable[[Any], Any],
    handler: Handler,
    stats: StageStats,
    drop_none: bool,
    slot: Slot,
    rec: Clock,
) -> Iterator[Any]:
    """:func:`~shardstream.pipeline.base.guarded` with ``fn`` timed: the first 64 calls, then one
    per run of calls of random length (mean 64). Items are counted per run."""
    clock = time.perf_counter_ns
    gaps, g = _GAPS, 0
    k = gap = 1  # calls until the next timed one; the length of the current run
    warm = 0  # calls timed one by one so far
    try:
        for item in src:
            k -= 1
            if k:
                try:
                    out = fn(item)
                except Exception as exn:
                    if _skip(exn, handler, stats):
                        continue
                    return
            else:
                t = clock()
                try:
                    out = fn(item)
                except Exception as exn:
                    k = 1  # time the next call instead
                    if _skip(exn, handler, stats):
                        continue
                    return
                now = clock()
                if warm < WARMUP:
                    slot.exact_ns += now - t
                    slot.items += 1
                    warm += 1
                    k = 1
                else:
                    slot.sampled_ns += now - t
                    slot.sampled += 1
                    slot.span += gap
                    slot.items += gap
                if warm >= WARMUP:
                    k = gap = gaps[g]
                    g = (g + 1) % len(gaps)
                slot.last = now
                if now >= rec.next_log:
                    rec.tick(now)
            if drop_none and out is None:
                continue
            yield out
    finally:
        if warm >= WARMUP:  # the calls of the unfinished run
            slot.items += gap - k
            slot.span += gap - k
