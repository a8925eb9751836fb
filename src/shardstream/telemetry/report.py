"""Telemetry as plain data: per-process views, their sum, the verdict line and the table.

Everything here is a pure function of JSON-able data (no torch, no clocks), so the same code
reports a dataset iterated in one process, a WebLoader's workers seen from the main process, and
``shardstream bench --profile``.

The verdict compares how long the consumer waited for data with the wall time: a training loop
that waits at least :data:`LOADER_BOUND` of its time (after the first batch, which includes
starting workers and opening shards) is *loader-bound*, and the stage with the most time is the
one to speed up; otherwise it is *training-bound*.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "GIL_BOUND",
    "INTO_BATCH",
    "LOADER_BOUND",
    "add_views",
    "format_table",
    "one_line",
    "process_view",
    "summarize",
    "threads_verdict",
    "verdict",
]

#: Waiting this share of the wall time (or more) for data makes a run loader-bound.
LOADER_BOUND = 0.10
#: The label suffix of a decode stage that leaves its JPEGs to the batch maker (deferred
#: decoding, ``decoders/deferred.py``): the batch maker's time is reported as that stage's.
INTO_BATCH = " (into the batch)"
_GLOBALS = 12
_SUMMED = (
    "wall_s", "first_item_s", "busy_s", "worker_s",
    "samples", "batches", "bytes", "opens", "retries", "throttles",
)  # fmt: skip


def process_view(schema: Sequence[Sequence[str]], raw: Sequence[Any]) -> dict[str, Any]:
    """One process's counters (``Recorder.schema()``/``raw()``) as plain data.

    Nodes report their own time (map stages) or their inclusive time (others; their own time is
    that minus the inclusive time upstream). Times come without I/O (measured exactly, not
    sampled), which is added back from the reading node on; the reading node's own time is
    reported as ``io`` (open and read calls of its source) and ``read tar`` (the rest).

    A run of per-sample stages on a loader's threads is one node: ``part`` slots (one per stage,
    with the wall time the pool sampled of its calls) and the ``run`` slot that times the node.
    The run's own time is shared among its stages in proportion to those samples (equally
    before any), and each stage counts the items that came out of the run plus those that the
    stages from it on skipped: a row per stage, as without threads.

    A decode stage labelled ``decode (into the batch)`` read only the JPEG headers: the pixels
    were decoded by the batch maker, straight into the batch. Its row then holds the batch
    maker's time too (the ``collate`` row, which is left out): one decode stage, named for
    what took the time, instead of a cheap decode and a costly ``collate``.
    """
    first, last, io_ns, io_bytes, opens, collate_ns, batches, retries, throttles, hits, misses, head = raw[
        :_GLOBALS
    ]
    stages: list[dict[str, Any]] = []
    below = 0  # inclusive time of everything up to here
    samples: int | None = None
    parts: list[tuple[str, str, int, int]] = []  # the stages of a run on threads, until its end
    for i, (label, kind, mode) in enumerate(schema):
        items, ns, skipped = raw[_GLOBALS + 3 * i : _GLOBALS + 3 * i + 3]
        if mode == "part":
            parts.append((label, kind, ns, skipped))
            continue
        if kind == "read" and samples is None:
            samples = items
            number, _, name = label.partition(":")
            stages.append(_stage(f"{number}:io", "io", io_ns, items, 0))
            # The rest of the reader's time: parsing tar members, or assembling fetched objects.
            rest = "tar" if name == "read" else "assemble"
            stages.append(_stage(f"{number}:{name} {rest}", rest, max(0, ns - below), items, skipped))
            below = max(below, ns) + io_ns
            continue
        if mode == "own":
            own = ns
            below += ns
        else:
            inclusive = ns + (io_ns if samples is not None else 0)  # downstream of the reader
            own = max(0, inclusive - below)
            below = max(below, inclusive)
        if mode == "run":
            stages += _shared(parts, own, items)
            parts = []
            continue
        if kind == "consumer":  # unwrapped stages and hand-offs between the last ones
            label, kind = "other", "other"
        stages.append(_stage(label, kind, own, items, skipped))
    into = next((s for s in stages if s["kind"] == "decode" and s["stage"].endswith(INTO_BATCH)), None)
    if into is not None:
        into["time_s"] += collate_ns / 1e9
    elif batches:
        stages.append(_stage("collate", "collate", collate_ns, batches, 0))
    if samples is None:
        samples = stages[-1]["items"] if schema else 0
    return {
        "wall_s": max(0, last - first) / 1e9,
        "first_item_s": head / 1e9,
        "busy_s": below / 1e9,
        "worker_s": (below + collate_ns) / 1e9,
        "samples": samples,
        "batches": batches,
        "bytes": io_bytes,
        "opens": opens,
        "retries": retries,
        "throttles": throttles,
        "cache": {"hits": hits, "misses": misses},
        "stages": stages,
    }


def _shared(parts: list[tuple[str, str, int, int]], ns: int, items: int) -> list[dict[str, Any]]:
    """The rows of a run's stages: ``ns`` shared by their weights, ``items`` out of the run."""
    if not parts:
        return []
    weights = sum(weight for _, _, weight, _ in parts)
    rows = []
    later = 0  # items skipped by this stage and the ones after it: this stage saw them too
    for label, kind, weight, skipped in reversed(parts):
        later += skipped
        share = ns * weight // weights if weights else ns // len(parts)
        rows.append(_stage(label, kind, share, items + later, skipped))
    return rows[::-1]


def _stage(label: str, kind: str, ns: int, items: int, skipped: int) -> dict[str, Any]:
    return {"stage": label, "kind": kind, "time_s": ns / 1e9, "items": items, "skipped": skipped}


def add_views(views: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The sum of several views (workers, or one worker's successive processes)."""
    total: dict[str, Any] = {"cache": {"hits": 0, "misses": 0}, "stages": []}
    for key in (
        "wall_s",
        "busy_s",
        "worker_s",
        "samples",
        "batches",
        "bytes",
        "opens",
        "retries",
        "throttles",
    ):
        total[key] = sum(v[key] for v in views)
    by_label: dict[str, dict[str, Any]] = {}
    for view in views:
        for name in ("hits", "misses"):
            total["cache"][name] += view["cache"][name]
        for stage in view["stages"]:
            entry = by_label.get(stage["stage"])
            if entry is None:
                by_label[stage["stage"]] = dict(stage)
                total["stages"].append(by_label[stage["stage"]])
            else:
                for key in ("time_s", "items", "skipped"):
                    entry[key] += stage[key]
    return total


def summarize(
    views: Sequence[dict[str, Any]],
    *,
    wall_s: float | None = None,
    wait_s: float | None = None,
    first_s: float = 0.0,
    consumer: str = "pipeline",
) -> dict[str, Any]:
    """The report: totals, each stage's share of the processes' time, and the verdict.

    Args:
        views: one :func:`process_view` per process (or per worker, already added up).
        wall_s / wait_s: the consumer's wall time and time spent waiting for data; default (a
            pipeline iterated in this process): its wall time and the time inside the pipeline.
        first_s: the start-up part of ``wait_s`` and ``wall_s``, left out of the wait share: a
            loader's wait for each worker's first batch, a pipeline's first pull of each pass.
        consumer: what the shares are of, for the verdict (``pipeline`` or ``worker``).
    """
    total = add_views(views)
    if wall_s is None:
        wall_s = max((v["wall_s"] for v in views), default=0.0)
        first_s = max((v["first_item_s"] for v in views), default=0.0)
    if wait_s is None:
        wait_s = total["busy_s"]
    work = total["worker_s"]
    stages = [{**s, "share": s["time_s"] / work if work > 0 else 0.0} for s in total["stages"]]
    steady_wall, steady_wait = wall_s - first_s, wait_s - first_s
    share = steady_wait / steady_wall if steady_wall > 0 else (1.0 if wait_s > 0 else 0.0)
    report: dict[str, Any] = {
        "telemetry": True,
        "wall_s": wall_s,
        "wait_s": wait_s,
        "first_item_s": first_s,
        "wait_share": max(0.0, min(1.0, share)),
        "samples": total["samples"],
        "samples_per_s": total["samples"] / wall_s if wall_s > 0 else 0.0,
        "bytes": total["bytes"],
        "bytes_per_s": total["bytes"] / wall_s if wall_s > 0 else 0.0,
        "batches": total["batches"],
        "opens": total["opens"],
        "work_s": work,
        "stages": stages,
        "cache": total["cache"],
        "retries": total["retries"],
        "throttles": total["throttles"],
    }
    report["verdict"] = verdict(report, consumer)
    return report


def verdict(report: dict[str, Any], consumer: str = "pipeline") -> str:
    """One line: ``loader-bound: 83% of wall time waiting for data; slowest stage: map f (61% ...)``."""
    stages = report["stages"]
    if not stages or report["wall_s"] <= 0:
        return "no data yet: iterate the dataset or loader first"
    slow = max(stages, key=lambda s: s["time_s"])
    waited = f"{report['wait_share']:.0%} of wall time waiting for data"
    name = slow["stage"].partition(":")[2] or slow["stage"]
    where = f"{name} ({slow['share']:.0%} of {consumer} time)"
    if report["wait_share"] >= LOADER_BOUND:
        busy = [w["utilisation"] for w in report.get("workers", [])]
        if busy and sum(busy) / len(busy) < 0.5:
            # The loop waits, yet the workers mostly do not work: the hand-off is the limit.
            return (
                f"loader-bound: {waited}, but workers were busy only {sum(busy) / len(busy):.0%} "
                "of their time: handing batches to the main process (pickling, queues) or too "
                f"few CPU cores limits it more than any stage (slowest: {where})"
            )
        return f"loader-bound: {waited}; slowest stage: {where}"
    return f"training-bound: {waited}; the loader keeps up (its slowest stage: {where})"


def one_line(report: dict[str, Any]) -> str:
    """The periodic log line: throughput, then the verdict."""
    return (
        f"{report['samples']:,} samples, {report['samples_per_s']:,.0f} samples/s, "
        f"{report['bytes_per_s'] / 1e6:,.1f} MB/s, {report['retries']} retries; {report['verdict']}"
    )


def format_table(report: dict[str, Any]) -> str:
    """The report as a text table: one row per stage, then the loop's wait, workers and verdict."""
    rows = [f"{'stage':<28} {'kind':<8} {'time s':>9} {'share':>6} {'items':>10} {'skipped':>7}"]
    for s in report["stages"]:
        rows.append(
            f"{s['stage'][:28]:<28} {s['kind']:<8} {s['time_s']:>9.3f} {s['share']:>6.1%} "
            f"{s['items']:>10,} {s['skipped']:>7}"
        )
    rows.append(
        f"{'wait for data (loop)':<28} {'wait':<8} {report['wait_s']:>9.3f} "
        f"{report['wait_share']:>6.1%}  of {report['wall_s']:.3f} s wall"
        + (f", {report['first_item_s']:.3f} s of it start-up" if report["first_item_s"] else "")
    )
    for w in report.get("workers", []):
        rows.append(
            f"worker {w['worker']:<21} {'':<8} {w['busy_s']:>9.3f} {w['utilisation']:>6.1%} "
            f"{w['samples']:>10,}  {w['samples_per_s']:,.0f} samples/s"
        )
    cache = report["cache"]
    rows.append(
        f"samples {report['samples']:,} ({report['samples_per_s']:,.0f}/s), "
        f"{report['bytes'] / 1e6:,.1f} MB ({report['bytes_per_s'] / 1e6:,.1f} MB/s), "
        f"{report['opens']} opens, cache {cache['hits']} hits / {cache['misses']} misses, "
        f"{report['retries']} retries ({report['throttles']} throttled)"
    )
    rows.append(report["verdict"])
    return "\n".join(rows) + "\n"


def threads_verdict(stages: list[dict[str, Any]], num_threads: int) -> str:
    """Whether the per-sample stages ran in parallel on the threads (see :meth:`Loader.stats`)."""
    if num_threads == 1:
        return (
            "one thread: num_threads=N runs the per-sample stages (decode, map) in parallel when "
            "they release the GIL; see threads in stats() after a run with N > 1"
        )
    if not stages:
        return "no per-sample stage has run on the threads yet (iterate the loader first)"
    held = [s for s in stages if s["gil_wait"] >= GIL_BOUND]
    if not held:
        return (
            f"threads run the per-sample stages in parallel: they waited for the GIL "
            f"{_waits(stages)} of their time"
        )
    return (
        f"{', '.join(s['stage'] for s in held)} waited for the GIL {_waits(held)} of its time on "
        f"{num_threads} threads: it holds the GIL (Python code), so the threads take turns on it "
        f"and do not help. Worker processes run it in parallel: ss.Loader(..., num_workers=M) "
        "(with num_threads per worker for stages that release the GIL)"
    )


#: A stage blocked this share of its time on threads holds the GIL (a pure-Python map on 2 threads
#: waits about half of its time; a JPEG decode waits a few percent).
GIL_BOUND = 0.25


def _waits(stages: list[dict[str, Any]]) -> str:
    return "/".join(f"{s['gil_wait']:.0%}" for s in stages)
