"""WebLoader telemetry: workers send their counters with their batches; the main process adds
them up and measures how long the training loop waits for data.

Each DataLoader worker's pipeline keeps its own :class:`~shardstream.pipeline._telemetry.Recorder`.
:class:`TelemetryCollate` runs in the worker right after the batch is made: it times the
collate function and attaches the worker's counters (one flat tuple of numbers; the stage names
only when they change) to the batch, as :class:`~shardstream.loader._state.StampingCollate`
attaches positions, so there is no round trip and no shared memory. The main process keeps the
latest counters of each worker; a worker started again (non-persistent workers start anew every
epoch) has a new recorder, whose counters are added to those of its predecessors.

The counters a worker sends with its last batch miss only the pull that found the end of its
data (and the last items of sampled map stages, counted at their end).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..config import read_settings
from ..pipeline._telemetry import Recorder
from ..pipeline._telemetry_report import add_views, one_line, process_view, summarize, verdict

__all__ = ["LoaderTelemetry", "TelemetryCollate", "Telemetered", "attach_telemetry", "loader_stats"]

log = logging.getLogger(__name__)


class Telemetered:
    """A batch with its worker's telemetry counters (unwrapped in the main process)."""

    __slots__ = ("value", "worker", "token", "schema", "raw")

    def __init__(self, value: Any, worker: int, token: str, schema: Any, raw: tuple[Any, ...]) -> None:
        self.value, self.worker, self.token, self.schema, self.raw = value, worker, token, schema, raw

    def pin_memory(self) -> Telemetered:
        # DataLoader(pin_memory=True) calls this on objects it does not know.
        from torch.utils.data._utils.pin_memory import pin_memory

        value = pin_memory(self.value)  # type: ignore[no-untyped-call]
        return Telemetered(value, self.worker, self.token, self.schema, self.raw)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Telemetered, (self.value, self.worker, self.token, self.schema, self.raw))


class TelemetryCollate:
    """Wraps the loader's collate function: time it, then attach the worker's counters."""

    def __init__(self, collate: Callable[[Any], Any], main_dataset: Any) -> None:
        self.collate = collate
        self.main_dataset = main_dataset
        self._own: Recorder | None = None  # for a dataset that is not a shardstream pipeline
        self._sent: tuple[str, int] | None = None

    def __call__(self, data: Any) -> Any:
        from torch.utils.data import get_worker_info

        t = time.perf_counter_ns()
        out = self.collate(data)
        spent = time.perf_counter_ns() - t
        info = get_worker_info()
        dataset = info.dataset if info is not None else self.main_dataset
        rec = getattr(dataset, "_telemetry", None)
        if not isinstance(rec, Recorder):
            rec = self._own = self._own if self._own is not None else Recorder()
        rec.add_collate(spent)
        shape = (rec.token, len(rec.slots))
        schema = None
        if shape != self._sent:  # the stage names travel once per worker process and pass shape
            schema, self._sent = rec.schema(), shape
        return Telemetered(out, info.id if info is not None else 0, rec.token, schema, rec.raw())

    def __getstate__(self) -> dict[str, Any]:
        # Workers get their own dataset copy; do not pickle the main one a second time.
        return {"collate": self.collate, "main_dataset": None, "_own": None, "_sent": None}


class _Worker:
    """What the main process knows of one worker slot: the finished processes' sum, the latest."""

    __slots__ = ("token", "schema", "raw", "done")

    def __init__(self) -> None:
        self.token: str | None = None
        self.schema: Any = ()
        self.raw: tuple[Any, ...] = ()
        self.done: dict[str, Any] | None = None

    def view(self) -> dict[str, Any] | None:
        views = [v for v in (self.done, process_view(self.schema, self.raw) if self.raw else None) if v]
        return add_views(views) if views else None


class LoaderTelemetry:
    """The main process's side: the loop's wait per batch and every worker's latest counters.

    Args:
        log_interval: seconds between INFO summary lines (0: none).
    """

    def __init__(self, log_interval: float) -> None:
        self.log_interval = log_interval
        self.workers: dict[int, _Worker] = {}
        self.wait_ns = self.first_ns = 0
        self.start_ns = self.last_ns = 0
        self.next_log: float = self._next(time.perf_counter_ns())

    def _next(self, now: int) -> float:
        return now + self.log_interval * 1e9 if self.log_interval > 0 else float("inf")

    def watch(self, it: Iterator[Any]) -> Iterator[Any]:
        """Yield the DataLoader's batches, timing the waits and unwrapping the counters."""
        clock = time.perf_counter_ns
        started: set[int] = set()  # workers whose first batch of this iteration has arrived
        while True:
            t = clock()
            if not self.start_ns:
                self.start_ns = t
            try:
                item = next(it)
            except StopIteration:
                self.last_ns = clock()
                self.wait_ns += self.last_ns - t
                return
            now = self.last_ns = clock()
            self.wait_ns += now - t
            worker = item.worker if type(item) is Telemetered else 0
            if worker not in started:  # a worker's first batch: its start-up, not steady state
                started.add(worker)
                self.first_ns += now - t
            if type(item) is Telemetered:
                self._take(item)
                item = item.value
            if now >= self.next_log:
                self.next_log = self._next(now)
                log.info("telemetry (loader): %s", one_line(self.stats()))
            yield item

    def _take(self, packet: Telemetered) -> None:
        worker = self.workers.get(packet.worker)
        if worker is None:
            worker = self.workers[packet.worker] = _Worker()
        if packet.token != worker.token:  # a new worker process: keep what the last one did
            worker.done = worker.view()
            worker.token, worker.raw = packet.token, ()
        if packet.schema is not None:
            worker.schema = packet.schema
        worker.raw = packet.raw

    def stats(self) -> dict[str, Any]:
        """The loader's report (see ``WebLoader.stats``)."""
        views = {k: v for k, v in ((k, w.view()) for k, w in sorted(self.workers.items())) if v}
        wall = max(0, self.last_ns - self.start_ns) / 1e9
        report = summarize(
            list(views.values()),
            wall_s=wall,
            wait_s=self.wait_ns / 1e9,
            first_s=self.first_ns / 1e9,
            consumer="worker",
        )
        report["workers"] = [
            {
                "worker": k,
                "samples": v["samples"],
                "busy_s": v["worker_s"],
                "wall_s": v["wall_s"],
                "samples_per_s": v["samples"] / v["wall_s"] if v["wall_s"] > 0 else 0.0,
                "utilisation": v["worker_s"] / v["wall_s"] if v["wall_s"] > 0 else 0.0,
            }
            for k, v in views.items()
        ]
        report["verdict"] = verdict(report, "worker")
        return report


def attach_telemetry(loader: Any, setting: bool | None) -> LoaderTelemetry | None:
    """Turn telemetry on for ``loader`` when asked (or by ``SHARDSTREAM_TELEMETRY``, or because its
    dataset has it on): the dataset's workers record, the loader collects and logs."""
    settings = read_settings()
    dataset = loader.dataset
    own = getattr(dataset, "_telemetry", None)
    on = setting if setting is not None else (settings.telemetry or isinstance(own, Recorder) or own is True)
    if not on:
        return None
    if callable(getattr(dataset, "with_telemetry", None)):
        # Workers do not log on their own: the loader logs their sum.
        dataset.with_telemetry(True, log_interval=0)
    loader.collate_fn = TelemetryCollate(loader.collate_fn, dataset)
    return LoaderTelemetry(settings.telemetry_interval)


def loader_stats(telemetry: LoaderTelemetry | None) -> dict[str, Any]:
    """``WebLoader.stats()``: the report, or how to turn telemetry on."""
    if telemetry is None:
        return {
            "telemetry": False,
            "verdict": "telemetry is off: WebLoader(..., telemetry=True) or SHARDSTREAM_TELEMETRY=1",
        }
    return telemetry.stats()
