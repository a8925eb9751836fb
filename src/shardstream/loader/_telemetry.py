"""WebLoader telemetry: workers send their counters with their batches; the main process adds
them up and measures how long the training loop waits for data.

Each DataLoader worker's pipeline keeps its own :class:`~shardstream.telemetry.recorder.Recorder`.
:class:`TelemetryCollate` runs in the worker right after the batch is made: it times the collate
function and attaches the worker's counters to the batch (a packet, see :data:`MARK`), as
:class:`~shardstream.loader._state.StampingCollate` attaches positions, so there is no round trip
and no shared memory. Every counter (one flat tuple of numbers; the stage names only when they
change) travels at most every 50 ms; the batches in between carry only the counts that must be
exact when a worker's last batch arrives (batches, opens, bytes, and every stage's items, samples
included), which the main process patches into the last full set. The main process keeps the latest
counters of each worker; a worker started again (non-persistent workers start anew every epoch) has
a new recorder, whose counters are added to those of its predecessors.

The batches a worker makes after its pipeline found the end of its data (its last, partial
one, or those a shuffle buffer drains) carry every counter, so each stage's items count the last
batch too; only the pull that found the end is left out.

``ss.Loader``'s thread mode has no workers: :func:`thread_telemetry` gives it one recorder that
every copy of the pipeline it runs counts into (kept by the loader, so its report outlives each
epoch's copy and adds up every epoch, as the workers' counters do in process mode), a
:class:`TimedCollate` that adds the batch maker's time to it (there the JPEGs deferred by a
decode stage are decoded), and the same measure of the training loop's wait per batch
(:meth:`LoaderTelemetry.wait`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..config import read_settings
from ..pipeline.seams import LoaderDataset
from ..telemetry import Recorder, add_views, one_line, process_view, summarize, verdict

__all__ = [
    "MARK",
    "LoaderTelemetry",
    "TelemetryCollate",
    "TimedCollate",
    "attach_telemetry",
    "is_packet",
    "loader_stats",
    "thread_telemetry",
]

log = logging.getLogger(__name__)

#: A worker sends every counter with a batch at most this often (nanoseconds); the batches in
#: between carry only the counts that must be exact when its last batch arrives (a ``_LIGHT``-tuple).
FULL_EVERY_NS = 50_000_000
_LIGHT = 6
_get_worker_info: Callable[[], Any] | None = None


#: The first element of a telemetry packet (a batch with its worker's counters). A packet is a
#: plain tuple ``(MARK, batch, worker, token, schema, raw)``: a tuple of builtins pickles and
#: unpickles in half the time of an instance of a class (no class lookup when it is loaded).
#: ``pin_memory=True`` turns it into a list, which is recognised as well.
MARK = "\x00shardstream-telemetry-packet"


def is_packet(item: Any) -> bool:
    """Whether ``item``, as the DataLoader delivered it, is a telemetry packet."""
    return (type(item) is tuple or type(item) is list) and len(item) == 6 and item[0] == MARK


class TelemetryCollate:
    """Wraps the loader's collate function: time it, then attach the worker's counters."""

    def __init__(self, collate: Callable[[Any], Any], main_dataset: Any) -> None:
        self.collate = collate
        self.main_dataset = main_dataset
        self._own: Recorder | None = None  # for a dataset that is not a shardstream pipeline
        self._sent: tuple[str, int] | None = None
        self._next_full = 0

    def __call__(self, data: Any) -> Any:
        global _get_worker_info
        if _get_worker_info is None:  # an import statement here would cost a microsecond per batch
            from torch.utils.data import get_worker_info

            _get_worker_info = get_worker_info
        t = time.perf_counter_ns()
        out = self.collate(data)
        spent = time.perf_counter_ns() - t
        info = _get_worker_info()
        dataset = info.dataset if info is not None else self.main_dataset
        rec = getattr(dataset, "_telemetry", None)
        if not isinstance(rec, Recorder):
            rec = self._own = self._own if self._own is not None else Recorder()
        rec.add_collate(spent)
        shape = (rec.token, len(rec.slots))
        schema = None
        if shape != self._sent:  # the stage names travel once per worker process and pass shape
            schema, self._sent = rec.schema(), shape
            self._next_full = 0
        now = t + spent
        if now >= self._next_full or rec.ended:  # every counter, at most every FULL_EVERY
            self._next_full = now + FULL_EVERY_NS  # seconds, and with the pass's last batches
            raw = rec.raw()
        else:  # only the counts (a tenth of the cost per batch); the times follow with the next
            raw = rec.light(now)
        return (MARK, out, info.id if info is not None else 0, rec.token, schema, raw)

    def __getstate__(self) -> dict[str, Any]:
        # Workers get their own dataset copy; do not pickle the main one a second time.
        return {"collate": self.collate, "main_dataset": None, "_own": None, "_sent": None, "_next_full": 0}


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
        local: thread mode: the recorder the loader's copies of the pipeline count into, in
            place of workers' counters (the report then has no ``workers``).
    """

    def __init__(self, log_interval: float, local: Recorder | None = None) -> None:
        self.log_interval = log_interval
        self.local = local
        self.workers: dict[int, _Worker] = {}
        self.wait_ns = self.first_ns = 0
        self.start_ns = self.last_ns = 0
        self.next_log: float = self._next(time.perf_counter_ns())
        self.lock = threading.Lock()  # thread mode: batches are made on several threads at once
        #: The loader's replaced workers (``_heal.Restarts``), counted in the report and the log line.
        self.restarts: Any = None

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
            packet = is_packet(item)
            worker = item[2] if packet else 0
            if worker not in started:  # a worker's first batch: its start-up, not steady state
                started.add(worker)
                self.first_ns += now - t
            if packet:
                self._take(item)
                item = item[1]
            if now >= self.next_log:
                self.next_log = self._next(now)
                self._log()
            yield item

    def wait(self, get: Callable[[], Any], *, first: bool) -> Any:
        """``get()`` (the next batch for the training loop), its wait timed as :meth:`watch`
        times it; ``first``: the epoch's first batch (start-up, reported apart)."""
        clock = time.perf_counter_ns
        t = clock()
        if not self.start_ns:
            self.start_ns = t
        try:
            return get()
        finally:
            now = self.last_ns = clock()
            self.wait_ns += now - t
            if first:
                self.first_ns += now - t
            if now >= self.next_log:
                self.next_log = self._next(now)
                self._log()

    def _log(self) -> None:
        """The periodic log line, with the workers replaced so far when there were any."""
        report = self.stats()
        lost = report.get("restarts", {}).get("count", 0)
        restarts = f"; {lost} worker restart(s): {report['restarts']['causes']}" if lost else ""
        log.info("telemetry (loader): %s%s", one_line(report), restarts)

    def _take(self, packet: Any) -> None:
        _, _, number, token, schema, raw = packet
        worker = self.workers.get(number)
        if worker is None:
            worker = self.workers[number] = _Worker()
        if token != worker.token:  # a new worker process: keep what the last one did
            worker.done = worker.view()
            worker.token, worker.raw = token, ()
        if schema is not None:
            worker.schema = schema
        if len(raw) != _LIGHT:
            worker.raw = tuple(raw)
        elif worker.raw:  # the counts: patch them into the last full counters
            now, collate_ns, batches, opens, io_bytes, items = raw
            full = list(worker.raw)
            full[1] = max(full[1], now)
            full[3], full[4], full[5], full[6] = io_bytes, opens, collate_ns, batches
            full[12 : 12 + 3 * len(items) : 3] = items  # every node's item count
            worker.raw = tuple(full)

    def stats(self) -> dict[str, Any]:
        """The loader's report (see ``WebLoader.stats``; thread mode: ``ss.Loader.stats``)."""
        wall = max(0, self.last_ns - self.start_ns) / 1e9
        if self.local is not None:
            return summarize(
                [self.local.view()] if self.local.slots else [],
                wall_s=wall,
                wait_s=self.wait_ns / 1e9,
                first_s=self.first_ns / 1e9,
                consumer="pipeline",
            )
        views = {k: v for k, v in ((k, w.view()) for k, w in sorted(self.workers.items())) if v}
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
        if self.restarts is not None:
            report["restarts"] = self.restarts.stats()
        return report


class TimedCollate:
    """Thread mode's batch maker, timed into the loader's recorder (two clock reads and a lock
    per batch: the pool makes several batches at once)."""

    def __init__(self, collate: Callable[[Any], Any], telemetry: LoaderTelemetry) -> None:
        assert telemetry.local is not None
        self.collate, self.recorder, self.lock = collate, telemetry.local, telemetry.lock

    def __call__(self, data: Any) -> Any:
        t = time.perf_counter_ns()
        out = self.collate(data)
        spent = time.perf_counter_ns() - t
        with self.lock:
            self.recorder.add_collate(spent)
        return out


def _wanted(dataset: Any, setting: bool | None) -> bool:
    """Whether a loader records: as asked, else by ``SHARDSTREAM_TELEMETRY`` or because its
    dataset has telemetry on."""
    if setting is not None:
        return setting
    return read_settings().telemetry or (isinstance(dataset, LoaderDataset) and dataset.telemetry_on())


def thread_telemetry(dataset: Any, setting: bool | None) -> LoaderTelemetry | None:
    """Thread mode's telemetry when it is on (as for :func:`attach_telemetry`): one recorder for
    every copy of ``dataset`` the loader runs (which logs nothing itself: the loader logs the
    report, with its loop's wait), or ``None``."""
    if not _wanted(dataset, setting):
        return None
    return LoaderTelemetry(read_settings().telemetry_interval, local=Recorder(0.0))


def attach_telemetry(loader: Any, setting: bool | None) -> LoaderTelemetry | None:
    """Turn telemetry on for ``loader`` when asked (or by ``SHARDSTREAM_TELEMETRY``, or because its
    dataset has it on): the dataset's workers record, the loader collects and logs."""
    settings = read_settings()
    dataset = loader.dataset
    pipeline = isinstance(dataset, LoaderDataset)
    if not _wanted(dataset, setting):
        return None
    if pipeline:
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
