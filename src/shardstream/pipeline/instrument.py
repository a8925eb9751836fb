"""Telemetry's hooks into a pass: time each node as it is built, and a pipeline's report.

:func:`instrument` replaces a node's generator by a timed one from :mod:`shardstream.telemetry.clock`
(see :mod:`shardstream.telemetry.recorder` for what is timed and why); nothing is replaced when
telemetry is off, so the hot path is then exactly the uninstrumented one. The reading node reads
through a :class:`~shardstream.telemetry.io.TimedSource` (declared by :class:`ReadsSource`).
:func:`instrument_run` does it for a run of per-sample stages on a loader's threads, one node
that reports a row per stage.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from ..telemetry.clock import Slot, clocked, timed_map
from ..telemetry.io import TimedSource
from ..telemetry.recorder import Recorder, Setting
from ..telemetry.report import INTO_BATCH, summarize
from ._epochs import EpochOwner
from .base import MapStage, Node, RunContext, _MapNode
from .decode import Decode
from .labels import skip_counters, stage_kind, stage_label, stage_stats
from .seams import CountsIO, ReadsSource

__all__ = ["consumer", "instrument", "instrument_run", "pipeline_stats"]


def instrument(rec: Recorder, node: Node, stage: Any, ctx: RunContext | None = None) -> None:
    """Time ``node`` (just built from ``stage`` with ``ctx``): replace its generator by a timed one.

    A decode stage that leaves its JPEGs to the batch maker (``Decode.defers``) is labelled
    ``decode (into the batch)``: the report adds the batch maker's time to it (``collate``),
    as that is where the pixels are decoded (:func:`~shardstream.telemetry.report.process_view`).
    """
    if isinstance(stage, EpochOwner):
        return  # a nested pipeline: its own stages were instrumented as they were built
    k = rec.stages_built
    rec.stages_built += 1
    kind = stage_kind(stage)
    if kind == "shards":
        if rec.layer is not None:  # a pass-through (the empty-epoch check) after a layer
            rec.layer[3].append(node)
        return
    mapped = type(node) is _MapNode and isinstance(stage, MapStage)
    label = stage_label(stage)
    if ctx is not None and isinstance(stage, Decode) and stage.defers(ctx):
        label += INTO_BATCH
    slot = rec.slot(f"{k}:{label}", kind, "own" if mapped else "inclusive", stage_stats(stage))
    if mapped:
        assert isinstance(node, _MapNode) and node.upstream is not None
        up = _unlayer(rec, node.upstream)
        node._it = timed_map(node.src, node.fn, stage.handler, stage.stats, stage.drop_none, slot, rec, up)
        return
    if kind == "read" and isinstance(node, ReadsSource):
        rec.watch(node.read_through(lambda source: TimedSource(source, rec)))
    elif kind == "read" and isinstance(node, CountsIO):
        node.count_io(rec)
    rec.layer = (node, slot, node._it, [])
    node._it = clocked(node._it, slot, rec)


def instrument_run(
    rec: Recorder, node: Node, stages: Sequence[MapStage], contexts: Sequence[RunContext]
) -> None:
    """Time ``node``, a run of per-sample stages on a loader's threads (``parallel.py``), built from
    ``stages`` with ``contexts``: one row per stage in the report, numbered as every other stage
    (as :func:`~.labels.leaf_stages` numbers them, so ``stats()["threads"]`` names the same rows).

    The node is timed as a whole (a ``run`` slot: how long the thread reading the pipeline waits
    for the run's items), and each stage gets a ``part`` slot of no time of its own: the report
    shares the run's time among them by the wall time of their calls that the pool samples
    anyway (:attr:`~shardstream.telemetry.stats.StageStats.thread_wall_ns`, for the GIL check),
    so timing a run adds no work per item on the threads. A decode stage that defers its JPEGs
    is labelled ``decode (into the batch)``, as in :func:`instrument`.
    """
    for stage, ctx in zip(stages, contexts, strict=True):
        k = rec.stages_built
        rec.stages_built += 1
        label = stage_label(stage)
        if isinstance(stage, Decode) and stage.defers(ctx):
            label += INTO_BATCH
        rec.slot(f"{k}:{label}", stage_kind(stage), "part", stage.stats)
    slot = rec.slot(f"{k}:run on threads", "run", "run", None)
    rec.layer = (node, slot, node._it, [])
    node._it = clocked(node._it, slot, rec)


def _unlayer(rec: Recorder, upstream: Node) -> Slot | None:
    """Take the timing layer off the node a map stage is built on, when it was the last layer
    put in and nothing has started (the map stage's loop then times its pulls instead); the
    layer's slot, or None. Shard-level nodes in between (the empty-epoch check) have not
    started either, and count in the pulls."""
    layer, rec.layer = rec.layer, None
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
    found: Slot = slot
    return found


def consumer(rec: Recorder, last: Node) -> None:
    """Time the pass's last node as a whole (unless it is already wrapped in a layer)."""
    rec.layer = None  # the pass is built: hold none of its nodes
    if getattr(last._it, "gi_code", None) is not clocked.__code__:
        last._it = clocked(last._it, rec.slot("consumer", "consumer", "inclusive", None), rec)


def _unstarted(it: Any) -> bool:
    return inspect.isgenerator(it) and inspect.getgeneratorstate(it) == inspect.GEN_CREATED


def pipeline_stats(
    setting: Setting, steps: list[Any], summary: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``DataPipeline.stats()``: the report of this process, with every stage's skip counters.

    ``summary``: the report of the counters made elsewhere, in place of this process's own: a
    loader's (``ss.Loader``'s thread mode runs copies of the pipeline that count into its recorder,
    and times its training loop's wait); ``None`` with ``setting`` off: the skip counters alone.
    """
    skips = skip_counters(steps)
    errors = {label.partition(":")[0]: stats.last_error for label, stats in skips}
    if summary is None and isinstance(setting, Recorder):
        summary = summarize([setting.view()] if setting.slots else [])
        if not setting.slots:
            summary["verdict"] = (
                "no data in this process yet: iterate the dataset here (its DataLoader workers "
                "report through WebLoader(..., telemetry=True).stats())"
            )
    if summary is not None:
        report = summary
        for entry in report["stages"]:
            if entry["kind"] not in ("io", "collate"):
                entry["last_error"] = errors.get(entry["stage"].partition(":")[0])
    else:
        report = {
            "telemetry": False,
            "stages": [
                {"stage": label, "skipped": s.skipped, "last_error": s.last_error} for label, s in skips
            ],
            "verdict": "telemetry is off: ShardStream(..., telemetry=True), .with_telemetry(), "
            "WebLoader(..., telemetry=True) or SHARDSTREAM_TELEMETRY=1",
        }
    report["skipped"] = sum(s.skipped for _, s in skips)
    waits = [(label, s.gil_wait()) for label, s in skips]
    threaded = [{"stage": label, "gil_wait": round(x, 3)} for label, x in waits if x is not None]
    if threaded:  # stages that ran on ss.Loader's threads: the share of their time spent blocked
        report["threads"] = threaded
    return report
