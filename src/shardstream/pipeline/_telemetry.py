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

Retries and throttles are counted from the retry lines the resumable reader logs
(``_telemetry_io.py``); cache hits and misses come from a caching source's counters.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import time
import uuid
from typing import Any, Literal

from ._telemetry_clock import Slot, clocked, timed_map
from ._telemetry_io import TimedSource, retry_counter
from ._telemetry_report import one_line, process_view, summarize
from ._telemetry_stages import skip_counters, stage_kind, stage_label
from ._torch import in_worker
from .base import MapStage, Node, _MapNode

__all__ = ["Recorder", "enable", "fresh", "pipeline_stats", "resolve"]

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
        self._cursor = self._k = 0  # slots and stages seen in the pass being built
        # The last layer put in: (node, slot, what it wraps, shard-level nodes built after it).
        self._layer: tuple[Node, Slot, Any, list[Node]] | None = None
        self.io_ns = self.io_bytes = self.opens = 0
        self.collate_ns = self.batches = 0
        self.sources: list[tuple[Any, dict[str, int]]] = []
        self._light_key = (-1, 0)  # (slots, index of the node whose items are the samples)
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
        self._cursor = self._k = 0
        self._layer = None
        return self

    def instrument(self, node: Node, stage: Any) -> None:
        """Time ``node`` (just built from ``stage``): replace its generator by a timed one."""
        if hasattr(stage, "_build_nodes"):
            return  # a nested pipeline: its own stages were instrumented as they were built
        k = self._k
        self._k += 1
        kind = stage_kind(stage)
        if kind == "shards":
            if self._layer is not None:  # a pass-through (the empty-epoch check) after a layer
                self._layer[3].append(node)
            return
        mapped = type(node) is _MapNode and isinstance(stage, MapStage)
        slot = self._slot(f"{k}:{stage_label(stage)}", kind, "own" if mapped else "inclusive", stage)
        if mapped:
            assert isinstance(node, _MapNode) and node.upstream is not None
            up = self._unlayer(node.upstream)
            node._it = timed_map(
                node.upstream, node.fn, stage.handler, stage.stats, stage.drop_none, slot, self, up
            )
            return
        config = getattr(node, "stage", None)
        if kind == "read" and config is not None and hasattr(config, "source"):
            config.stats  # noqa: B018 - create the skip counters now, so the copy shares them
            timed = copy.copy(config)
            timed.source = TimedSource(config.source, self)
            node.stage = timed  # type: ignore[attr-defined]
            self._watch(config.source)
        self._layer = (node, slot, node._it, [])
        node._it = clocked(node._it, slot, self)

    def _unlayer(self, upstream: Node) -> Slot | None:
        """Take the timing layer off the node a map stage is built on, when it was the last layer
        put in and nothing has started (the map stage's loop then times its pulls instead); the
        layer's slot, or None. Shard-level nodes in between (the empty-epoch check) have not
        started either, and count in the pulls."""
        layer, self._layer = self._layer, None
        if layer is None:
            return None
        node, slot, inner, between = layer
        while upstream is not node:
            if all(upstream is not b for b in between) or not _unstarted(upstream._it):
                return None
            assert upstream.upstream is not None
            upstream = upstream.upstream
        if getattr(node._it, "gi_code", None) is not clocked.__code__ or not _unstarted(node._it):
            return None
        node._it = inner
        return slot

    def consumer(self, last: Node) -> None:
        """Time the pass's last node as a whole (unless it is already wrapped in a layer)."""
        self._layer = None  # the pass is built: hold none of its nodes
        if getattr(last._it, "gi_code", None) is not clocked.__code__:
            last._it = clocked(last._it, self._slot("consumer", "consumer", "inclusive", None), self)

    def _slot(self, label: str, kind: str, mode: str, stage: Any) -> Slot:
        j = self._cursor
        self._cursor += 1
        if j == len(self.slots):
            self.slots.append(Slot(label, kind, mode, stage))
        return self.slots[j]

    def _watch(self, source: Any) -> None:
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
        estimated_ns, skipped)`` (the time of its pulls or of its function, I/O excluded).
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
            stats = s.stage.__dict__.get("_stats") if hasattr(s.stage, "__dict__") else None
            per_node += (s.count(), s.estimate(), stats.skipped if stats is not None else 0)
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

    def light(self, now: int) -> tuple[int, ...]:
        """The counters that must be exact when a worker's last batch leaves, cheap to take:
        ``(now, collate_ns, batches, opens, io_bytes, node, items)`` (``node``: the index of the
        reading node, whose items are the samples, or of the last node)."""
        slots = self.slots
        if self._light_key[0] != len(slots):
            k = next((i for i, s in enumerate(slots) if s.kind == "read"), len(slots) - 1)
            self._light_key = (len(slots), k)
        k = self._light_key[1]
        items = slots[k].count() if slots else 0
        return (now, self.collate_ns, self.batches, self.opens, self.io_bytes, k, items)

    def view(self) -> dict[str, Any]:
        """This process's counters as plain data (see :func:`process_view`)."""
        return process_view(self.schema(), self.raw())

    def tick(self, now: int) -> None:
        """Log one summary line (at most every ``log_interval`` seconds)."""
        self.next_log = self._next_log(now)
        where = "worker" if in_worker() else "pipeline"
        log.info("telemetry (%s %d): %s", where, os.getpid(), one_line(summarize([self.view()])))


def _unstarted(it: Any) -> bool:
    return inspect.isgenerator(it) and inspect.getgeneratorstate(it) == inspect.GEN_CREATED


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


def pipeline_stats(setting: Setting, steps: list[Any]) -> dict[str, Any]:
    """``DataPipeline.stats()``: the report of this process, with every stage's skip counters."""
    from ._telemetry_report import summarize

    skips = skip_counters(steps)
    errors = {label.partition(":")[0]: stats.last_error for label, stats in skips}
    if isinstance(setting, Recorder):
        report = summarize([setting.view()] if setting.slots else [])
        for entry in report["stages"]:
            if entry["kind"] not in ("io", "collate"):
                entry["last_error"] = errors.get(entry["stage"].partition(":")[0])
        if not setting.slots:
            report["verdict"] = (
                "no data in this process yet: iterate the dataset here (its DataLoader workers "
                "report through WebLoader(..., telemetry=True).stats())"
            )
    else:
        report = {
            "telemetry": False,
            "stages": [
                {"stage": label, "skipped": s.skipped, "last_error": s.last_error} for label, s in skips
            ],
            "verdict": "telemetry is off: Dataset(..., telemetry=True), .with_telemetry(), "
            "WebLoader(..., telemetry=True) or SHARDSTREAM_TELEMETRY=1",
        }
    report["skipped"] = sum(s.skipped for _, s in skips)
    return report
