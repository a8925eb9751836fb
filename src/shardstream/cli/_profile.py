"""``shardstream bench --profile``: the loader's telemetry over the run, as a table and a PNG.

:class:`Timeline` takes the loader's telemetry every ``interval`` seconds while the bench loop
runs (between two batches: no thread, no extra work in the workers). :func:`write_png` draws it
with matplotlib (the ``plot`` extra), without pyplot's global state: above, the time each stage
took per second of the run, stacked (worker-seconds per second: with 2 busy workers the stack
reaches 2); below, samples per second of each worker (thread mode, which has no workers: of the
loader). A report without timings (telemetry off) is named by :func:`no_timings` instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["Timeline", "have_matplotlib", "no_timings", "series", "write_png"]


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


class Timeline:
    """Snapshots of ``stats()`` (time per stage, samples per worker) taken at most every
    ``interval`` seconds; :meth:`maybe` costs one clock read between snapshots."""

    def __init__(self, stats: Callable[[], dict[str, Any]], interval: float = 0.25) -> None:
        self.stats, self.interval = stats, interval
        self.start = time.perf_counter()
        self.next = self.start + interval
        self.points: list[dict[str, Any]] = []

    def maybe(self) -> None:
        now = time.perf_counter()
        if now >= self.next:
            self.next = now + self.interval
            self.take(now)

    def take(self, now: float | None = None) -> dict[str, Any]:
        """Take a snapshot now; returns the full report it came from."""
        report = self.stats()
        t = (time.perf_counter() if now is None else now) - self.start
        self.points.append(
            {
                "t": t,
                # (a report without timings lists the stages' skip counters only)
                "stages": {s["stage"]: s["time_s"] for s in report.get("stages", []) if "time_s" in s},
                "workers": {str(w["worker"]): w["samples"] for w in report.get("workers", [])},
                "samples": report.get("samples", 0),
            }
        )
        return report


def no_timings(report: dict[str, Any]) -> str | None:
    """Why ``report`` cannot be drawn or tabulated (its loader measured no time: telemetry was
    off), or ``None`` when it can."""
    if report.get("telemetry") and "wait_s" in report:
        return None
    why = report.get("verdict") or "telemetry is off"
    return f"the loader reported no timings ({why}), so there is no table or plot to show"


def series(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per interval between two snapshots: its middle time, seconds of each stage per second,
    samples per second of each worker, and of the whole loader (``samples``)."""
    mids: list[float] = []
    stages: dict[str, list[float]] = {}
    workers: dict[str, list[float]] = {}
    samples: list[float] = []
    names = list(dict.fromkeys(name for p in points for name in p["stages"]))
    ids = list(dict.fromkeys(w for p in points for w in p["workers"]))
    for a, b in zip(points, points[1:], strict=False):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        mids.append((a["t"] + b["t"]) / 2)
        for name in names:
            spent = b["stages"].get(name, 0.0) - a["stages"].get(name, 0.0)
            stages.setdefault(name, []).append(max(0.0, spent) / dt)
        for w in ids:
            done = b["workers"].get(w, 0) - a["workers"].get(w, 0)
            workers.setdefault(w, []).append(max(0, done) / dt)
        samples.append(max(0, b.get("samples", 0) - a.get("samples", 0)) / dt)
    return {"t": mids, "stages": stages, "workers": workers, "samples": samples}


def write_png(points: list[dict[str, Any]], report: dict[str, Any], path: str) -> None:
    """Draw the snapshots ``points`` (with ``report``'s verdict as the title) into the PNG ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = series(points)
    fig = Figure(figsize=(10, 7), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    t = data["t"]
    if t and data["stages"]:
        labels = list(data["stages"])
        top.stackplot(t, *(data["stages"][name] for name in labels), labels=labels)
        top.legend(loc="upper left", fontsize="small", ncols=2)
    if data["workers"]:
        top.axhline(len(data["workers"]), color="grey", linestyle="--", linewidth=1)
        top.annotate("every worker busy", (0, len(data["workers"])), fontsize="small", color="grey")
    # Thread mode has no workers: its stages' times are seconds of this process's threads.
    top.set_ylabel("worker-seconds per second" if data["workers"] else "thread-seconds per second")
    top.set_title("time per stage (stacked)", fontsize="medium")
    for worker, rates in data["workers"].items():
        bottom.plot(t, rates, label=f"worker {worker}")
    if data["workers"]:
        bottom.legend(loc="upper left", fontsize="small")
        bottom.set_title("samples per second, per worker", fontsize="medium")
    else:
        bottom.plot(t, data["samples"], label="the loader")
        bottom.set_title("samples per second", fontsize="medium")
    bottom.set_ylabel("samples/s")
    bottom.set_xlabel("seconds since the start of the run")
    fig.suptitle(report.get("verdict", ""), fontsize="medium")
    fig.savefig(path, format="png", dpi=100)
