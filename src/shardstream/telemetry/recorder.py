"""Opt-in telemetry of a pipeline in one process: time per stage, I/O, samples, bytes, retries.

A :class:`Recorder` belongs to one pipeline in one process (a DataLoader worker has its own
copy). When telemetry is on, the pipeline hands it to every stage through the run context, and
:meth:`Recorder.instrument` replaces each node's generator by a timed one
(``_telemetry_clock.py``); when it is off, nothing is replaced and the hot path is exactly the
uninstrumented one.

Own time per stage in a chain of generators: a map stage's loop times its function (its *own*
time); any other node is wrapped in a layer that times its ``next()``, which includes every
node upstream (*inclusive* time), and its own time is that minus the inclusive time of what is
upstream. A node followed by a map stage (the reading node, before ``decode``) gets no layer:
the map stage's loop times its pulls instead, which saves a generator resumption per item.
Shard-level stages (shard lists, splitters, the empty-epoch check) are not wrapped: they are
cheap, and what little they cost counts in the next wrapped stage. The reading stage
also gets a timed source, which splits its time into waiting for bytes (``io``: open and read
calls, timed exactly) and parsing tar members into samples (``read tar``). The last node is
always timed as a whole: the time the consumer waits for the pipeline.

Retries and throttles are counted where they happen, by the sources and the fetch engine
(:data:`shardstream.sources.FAULTS`); cache hits and misses come from a caching source's counters.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any, Literal

from ..optional import in_worker
from .clock import Slot
from .io import retry_counter
from .report import one_line, process_view, summarize
from .stats import StageStats

__all__ = ["Recorder", "Setting", "enable", "fresh", "resolve"]

log = logging.getLogger(__name__)


class Recorder:
    """The telemetry of one pipeline in one process (see the module docstring).

    Args:
        log_interval: seconds between two INFO summary lines of this process (0: none).
    """

    def __init__(self, log_interval: float = 0.0) -> None:
        self.log_interval = log_interval
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.token = uuid.uuid4().hex[:12]  # tells the loader when a worker's counters restart
        self.slots: list[Slot] = []
        self._cursor = 0  # slots seen in the pass being built
        #: Stages seen in the pass being built (their number is part of their label).
        self.stages_built = 0
        #: The last timing layer put in by the instrumentation of the pass being built, opaque
        #: here (:mod:`shardstream.pipeline.instrument` reads and writes it).
        self.layer: Any = None
        self.io_ns = self.io_bytes = self.opens = 0
        self.collate_ns = self.batches = 0
        #: A timed node of the running pass found the end of what it reads: the batches left
        #: are the last ones (a loader worker sends every counter with them, see ``light``).
        self.ended = False
        self.sources: list[tuple[Any, dict[str, int]]] = []
        counter = self._retries = retry_counter()
        self._retry_base = (counter.retries, counter.throttles)
        self.next_log = self._next_log(time.perf_counter_ns())

    def _next_log(self, now: int) -> int | float:
        return now + int(self.log_interval * 1e9) if self.log_interval > 0 else float("inf")

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy (a DataLoader worker's) starts with empty counters of its own.
        return (Recorder, (self.log_interval,))

    # -- building ---------------------------------------------------------------------------------
    def begin_pass(self) -> Recorder:
        """Called when a pass builds its nodes; a forked copy starts its own counters here."""
        if os.getpid() != self.pid:
            self._reset()
        self._cursor = self.stages_built = 0
        self.layer = None
        self.ended = False
        return self

    def slot(self, label: str, kind: str, mode: str, stats: StageStats | None) -> Slot:
        """The counters of the next node of the pass being built (the same slot in every pass)."""
        j = self._cursor
        self._cursor += 1
        if j == len(self.slots):
            self.slots.append(Slot(label, kind, mode, stats))
        return self.slots[j]

    def watch(self, source: Any) -> None:
        """Count the cache hits and misses of ``source`` (when it keeps cache counters)."""
        stats = getattr(source, "stats", None)
        as_dict = getattr(stats, "as_dict", None)
        if as_dict is not None and all(s is not source for s, _ in self.sources):
            self.sources.append((source, dict(as_dict())))

    def add_collate(self, ns: int) -> None:
        """Record one collate call (the loader's, in this process)."""
        self.collate_ns += ns
        self.batches += 1

    # -- reading ----------------------------------------------------------------------------------
    def schema(self) -> tuple[tuple[str, str, str], ...]:
        """``(label, kind, mode)`` of every timed node, upstream first (mode: ``own`` or
        ``inclusive`` time)."""
        return tuple((s.label, s.kind, s.mode) for s in self.slots)

    def raw(self) -> tuple[Any, ...]:
        """Every counter as one flat tuple of numbers (cheap to take and to pickle with a batch).

        Layout: ``(first_ns, last_ns, io_ns, io_bytes, opens, collate_ns, batches, retries,
        throttles, cache_hits, cache_misses, first_pull_ns)``, then per node ``(items,
        estimated_ns, skipped)`` (the time of its pulls or of its function, I/O excluded). A
        ``part`` slot (a stage of a run on a loader's threads, timed as a whole by the ``run``
        slot after it) has no items of its own and, in place of a time, the wall time the pool
        sampled of its calls: its weight when the report shares the run's time.
        """
        counter = self._retries
        hits = misses = 0
        for source, base in self.sources:
            now = source.stats.as_dict()
            hits += now.get("hits", 0) - base.get("hits", 0)
            misses += now.get("misses", 0) - base.get("misses", 0)
        slots = self.slots
        first = last = 0
        per_node: list[int] = []
        for s in slots:
            if s.first and (not first or s.first < first):
                first = s.first
            if s.last > last:
                last = s.last
            skipped = s.stats.skipped if s.stats is not None else 0
            if s.mode == "part":  # a stage of a run on threads: the pool's sample of its calls
                per_node += (0, s.stats.thread_wall_ns if s.stats is not None else 0, skipped)
            else:
                per_node += (s.count(), s.estimate(), skipped)
        out = (
            first,
            last,
            self.io_ns,
            self.io_bytes,
            self.opens,
            self.collate_ns,
            self.batches,
            counter.retries - self._retry_base[0],
            counter.throttles - self._retry_base[1],
            hits,
            misses,
            slots[-1].head if slots else 0,
        )
        return out + tuple(per_node)

    def light(self, now: int) -> tuple[Any, ...]:
        """The counters that must be exact when a worker's last batch leaves, cheap to take:
        ``(now, collate_ns, batches, opens, io_bytes, items)``, ``items`` holding every node's
        item count (so each stage's count includes the last batch, partial or not; the times
        are those of the last :meth:`raw`). Once the pass has :attr:`ended`, the batches left
        are its last, and a loader worker sends :meth:`raw` with them instead."""
        items = tuple([s.count() for s in self.slots])
        return (now, self.collate_ns, self.batches, self.opens, self.io_bytes, items)

    def view(self) -> dict[str, Any]:
        """This process's counters as plain data (see :func:`process_view`)."""
        return process_view(self.schema(), self.raw())

    def tick(self, now: int) -> None:
        """Log one summary line (at most every ``log_interval`` seconds)."""
        self.next_log = self._next_log(now)
        where = "worker" if in_worker() else "pipeline"
        log.info("telemetry (%s %d): %s", where, os.getpid(), one_line(summarize([self.view()])))


# -- what DataPipeline uses ------------------------------------------------------------------------
#: A pipeline's telemetry setting: a recorder (on), False (off), None (from the environment).
Setting = Any


def resolve(setting: Setting, log_interval: float | None = None) -> Recorder | Literal[False]:
    """The recorder for a pipeline's setting: ``None`` reads ``SHARDSTREAM_TELEMETRY`` (once)."""
    if isinstance(setting, Recorder) or setting is False:
        return setting
    from ..config import read_settings

    settings = read_settings()
    if setting is None and not settings.telemetry:
        return False
    return Recorder(settings.telemetry_interval if log_interval is None else log_interval)


def enable(setting: Setting, enabled: bool, log_interval: float | None) -> Setting:
    """The setting after ``with_telemetry(enabled, log_interval=)``: a recorder already there keeps
    its counters (only its log interval changes)."""
    if not enabled:
        return False
    if isinstance(setting, Recorder):
        if log_interval is not None:
            setting.log_interval = log_interval
            setting.next_log = setting._next_log(time.perf_counter_ns())
        return setting
    return resolve(True, log_interval)


def fresh(setting: Setting) -> Setting:
    """The setting for a copy of a pipeline (``compose``): on, with counters of its own."""
    return Recorder(setting.log_interval) if isinstance(setting, Recorder) else setting
