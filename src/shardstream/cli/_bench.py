"""``shardstream bench``: the empty-training-loop measurement (iterate a loader, no model).

The pipeline is what a training script would build: ``WebDataset(urls)`` (no shard shuffle),
optional ``.decode(SPEC)`` and ``.to_tuple(...)``, and
``ss.Loader(num_workers=W, num_threads=T, batch_size=B)``: the loader makes the batches itself, so
JPEGs decoded by an ``rgb8`` spec go straight into the batch (``decoders/deferred.py``). With
``--webloader`` it is torch's ``DataLoader`` instead (``WebLoader(num_workers=W, batch_size=None)``,
each worker batching with ``.batched(B)``), as WebDataset training scripts build it. The main
process only counts samples and payload bytes. Reported: samples/s, MB/s (of shard bytes when the
whole dataset was read, and of payload delivered to the loop), the latency to the first batch
(worker start-up and shard opening included), and CPU of the process and its workers.

``--profile`` turns the loader's telemetry on: the time of every stage in every worker (or, with
``--workers 0``, on this process's threads), how long the loop waited, and the one-line answer to
"is the loader the bottleneck, and which stage", as a table, plus a PNG of the run (time per
stage, samples/s per worker) when matplotlib is installed (``shardstream[plot]``). The report
is taken once more after the loader is closed: it keeps what the loader measured.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import redact_url
from ._cpu import CPUMonitor, CPUReport, have_psutil
from ._inspect import URLSPEC_HELP, add_common
from ._options import parse_options
from ._profile import Timeline, have_matplotlib, no_timings, write_png

__all__ = ["BenchConfig", "BenchResult", "add_arguments", "format_result", "run", "run_bench"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchConfig:
    """What to measure (see ``shardstream bench --help``)."""

    urls: tuple[str, ...]
    batch_size: int = 32
    workers: int = 0
    decode: str | None = None
    to_tuple: tuple[str, ...] = ()
    max_samples: int | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    allow_pipe: bool = False
    profile: bool = False
    #: ``ss.Loader``'s threads per process (``num_threads``).
    threads: int = 1
    #: Measure ``WebLoader`` (torch's DataLoader, batches made in the workers) instead of ``ss.Loader``.
    webloader: bool = False


@dataclass(frozen=True)
class BenchResult:
    """One measured pass; ``shard_bytes`` is None when the pass stopped early or sizes were unknown."""

    samples: int
    batches: int
    wall: float
    first_batch: float
    payload_bytes: int
    shard_bytes: int | None
    shards: int
    cpu: CPUReport
    #: With ``--profile``: ``{"report": loader.stats(), "timeline": [snapshots]}``.
    profile: dict[str, Any] | None = None

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall if self.wall > 0 else 0.0

    @property
    def mb_per_s(self) -> float | None:
        """Shard megabytes (1e6) read per second, when known."""
        return None if self.shard_bytes is None or self.wall <= 0 else self.shard_bytes / self.wall / 1e6

    @property
    def payload_mb_per_s(self) -> float:
        return self.payload_bytes / self.wall / 1e6 if self.wall > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            samples_per_s=self.samples_per_s,
            mb_per_s=self.mb_per_s,
            payload_mb_per_s=self.payload_mb_per_s,
            cpu_total=self.cpu.total,
            cpu_cores=self.cpu.cores,
        )
        return data


def _nbytes(value: Any) -> int:
    """Payload bytes in a (possibly collated) field; metadata strings count as nothing."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    nbytes = getattr(value, "nbytes", None)  # numpy arrays, torch tensors (>= 2.1)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for k, v in value.items() if not (k.startswith("__") and k.endswith("__")))
    return 0


def _batch_len(batch: Any, batched: bool) -> int:
    if not batched:
        return 1
    if isinstance(batch, dict):
        first = batch.get("__key__", next(iter(batch.values()), ()))
    elif isinstance(batch, (list, tuple)):
        first = batch[0] if batch else ()
    else:
        first = batch
    shape = getattr(first, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    return len(first)


def _shard_bytes(urls: Sequence[str], storage_options: Mapping[str, Any]) -> int | None:
    from ..sources import stat_url

    total = 0
    for url in urls:
        try:
            size = stat_url(url, storage_options=storage_options).size
        except Exception as exc:  # unknown size (pipe:, a server without HEAD): report payload only
            log.debug("cannot stat %s: %s", redact_url(url), redact_url(exc))
            return None
        if size is None:
            return None
        total += int(size)
    return total


def run_bench(config: BenchConfig) -> BenchResult:
    """Build the pipeline, iterate it once (or up to ``max_samples``) and measure."""
    from ..optional import require_torch

    require_torch(purpose="shardstream bench (it measures a torch DataLoader)")
    from ..compat.webdataset import WebDataset
    from ..loader import Loader, WebLoader
    from ._dataset import resolve

    # As ls/stat/verify take them: brace specs, a local directory or glob, a prefix with an index.
    urls = resolve(list(config.urls), storage_options=config.storage_options)
    ds: Any = WebDataset(
        urls, shardshuffle=False, storage_options=config.storage_options, allow_pipe=config.allow_pipe
    )
    if config.decode:
        ds = ds.decode(config.decode)
    if config.to_tuple:
        ds = ds.to_tuple(*config.to_tuple)
    batched = config.batch_size > 0
    # WebLoader: each worker batches (a training script's .batched(B) with batch_size=None);
    # ss.Loader makes the batches itself, and may decode JPEGs straight into them.
    loader_batches = batched and not config.webloader
    if batched and not loader_batches:
        ds = ds.batched(config.batch_size)
    samples = batches = payload = 0
    first_batch = 0.0
    complete = True
    timeline: Timeline | None = None
    monitor = CPUMonitor().start()
    t0 = time.perf_counter()
    try:
        telemetry = True if config.profile else None  # None: SHARDSTREAM_TELEMETRY decides
        made: Any = (
            WebLoader(ds, batch_size=None, num_workers=config.workers, telemetry=telemetry)
            if config.webloader
            else Loader(
                ds,
                batch_size=config.batch_size if loader_batches else None,
                num_workers=config.workers,
                num_threads=config.threads,
                telemetry=telemetry,
            )
        )
        with made as loader:
            if config.profile:
                timeline = Timeline(loader.stats)
                timeline.take()
            for batch in loader:
                if batches == 0:
                    first_batch = time.perf_counter() - t0
                batches += 1
                samples += _batch_len(batch, batched)
                payload += _nbytes(batch)
                if timeline is not None:
                    timeline.maybe()
                if config.max_samples is not None and samples >= config.max_samples:
                    complete = False
                    break
        # Leaving the block shut the workers down, so their CPU is in the totals.
        wall = time.perf_counter() - t0
    finally:
        cpu = monitor.stop()  # also on errors: the polling thread must not outlive the run
    shard_bytes = _shard_bytes(urls, config.storage_options) if complete else None
    profile = None
    if timeline is not None:
        profile = {"report": timeline.take(), "timeline": timeline.points}
    return BenchResult(samples, batches, wall, first_batch, payload, shard_bytes, len(urls), cpu, profile)


def format_result(config: BenchConfig, result: BenchResult, *, cpu_count: int | None = None) -> str:
    """The human-readable report (one ``name: value`` line per field)."""
    import os

    ncpu = cpu_count or os.cpu_count() or 1
    cpu = result.cpu
    if config.webloader:
        pipeline = [f"batch {config.batch_size}", f"WebLoader, {config.workers} workers"]
    else:
        pipeline = [f"batch {config.batch_size}", f"ss.Loader, {config.workers} workers"]
        pipeline.append(f"{config.threads} thread{'s' if config.threads != 1 else ''} per process")
    if config.decode:
        pipeline.append(f"decode {config.decode}")
    if config.to_tuple:
        pipeline.append("to_tuple " + " ".join(config.to_tuple))
    mb = result.mb_per_s
    lines = [
        f"shardstream bench: {result.shards} shards, " + ", ".join(pipeline),
        f"samples:          {result.samples}"
        + ("" if result.shard_bytes is not None else " (stopped early)"),
        f"batches:          {result.batches}",
        f"wall:             {result.wall:.3f} s",
        f"first batch:      {result.first_batch * 1000:.1f} ms",
        f"samples/s:        {result.samples_per_s:,.1f}",
        (
            f"MB/s:             {mb:,.1f} (shard bytes: {result.shard_bytes / 1e6:,.1f} MB)"
            if mb is not None and result.shard_bytes is not None
            else "MB/s:             n/a (shard sizes unknown or pass stopped early)"
        ),
        f"payload MB/s:     {result.payload_mb_per_s:,.1f} (bytes delivered to the loop)",
        f"CPU:              {cpu.total:.2f} s (main {cpu.main:.2f} s, workers {cpu.children:.2f} s"
        f" in {cpu.processes} processes)",
        f"CPU utilisation:  {cpu.cores:.2f} cores ({100 * cpu.cores / ncpu:.0f}% of {ncpu})",
        f"CPU-s/1k samples: {1000 * cpu.total / result.samples if result.samples else 0.0:.3f}",
    ]
    if cpu.peak_rss_mb is not None:
        lines.append(f"peak RSS:         {cpu.peak_rss_mb:,.0f} MB (process tree)")
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("urls", nargs="+", metavar="URLSPEC", help=URLSPEC_HELP + " (several may be given)")
    parser.add_argument(
        "--batch-size", type=int, default=32, help="samples per batch; 0 = no batching (default 32)"
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="worker processes (num_workers; default 0: one process)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="ss.Loader's threads per process (num_threads; default 1)"
    )
    parser.add_argument(
        "--webloader",
        action="store_true",
        help="measure WebLoader (torch's DataLoader, each worker batching with .batched) "
        "instead of ss.Loader",
    )
    parser.add_argument("--decode", metavar="SPEC", help='decoder spec, e.g. "rgb8", "pil", "torchrgb"')
    parser.add_argument(
        "--to-tuple", nargs="+", metavar="FIELD", default=[], help='fields, e.g. "jpg;png" cls'
    )
    parser.add_argument("--max-samples", type=int, help="stop after this many samples")
    add_common(parser, jobs=False)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="loader telemetry: time per stage and worker, a table, the bottleneck verdict, and a PNG",
    )
    parser.add_argument(
        "--profile-png",
        metavar="PATH",
        default="shardstream-profile.png",
        help="where --profile writes its picture (needs matplotlib: pip install 'shardstream[plot]'; "
        "default shardstream-profile.png)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run(args: argparse.Namespace) -> int:
    """Entry point of the ``bench`` subcommand."""
    import sys

    if not have_psutil():
        sys.stderr.write(
            "note: psutil is not installed, so CPU of running workers is not polled (totals still\n"
            "      count workers after they exit). Install it with: pip install 'shardstream[cli]'\n"
        )
    config = BenchConfig(
        urls=tuple(args.urls),
        batch_size=args.batch_size,
        workers=args.workers,
        decode=args.decode,
        to_tuple=tuple(args.to_tuple),
        max_samples=args.max_samples,
        storage_options=parse_options(args.storage_option),
        allow_pipe=args.allow_pipe,
        profile=args.profile,
        threads=args.threads,
        webloader=args.webloader,
    )
    result = run_bench(config)
    if args.json:
        sys.stdout.write(json.dumps(result.as_dict(), default=str) + "\n")
    else:
        sys.stdout.write(format_result(config, result))
    if result.profile is not None:
        _profile_outputs(result.profile, args.profile_png, table=not args.json)
    return 0


def _profile_outputs(profile: dict[str, Any], png: str, *, table: bool) -> None:
    """Print the telemetry table (text mode) and write the PNG, or say how to get one."""
    import sys

    from ..telemetry.report import format_table

    # In --json mode stdout holds the one JSON object: notes go to stderr.
    notes = sys.stdout if table else sys.stderr
    why = no_timings(profile["report"])
    if why is not None:
        notes.write(f"\nprofile: {why}\n")
        return
    if table:
        sys.stdout.write("\n" + format_table(profile["report"]))
    if have_matplotlib():
        write_png(profile["timeline"], profile["report"], png)
        notes.write(f"profile plot: {png}\n")
    else:
        notes.write("profile plot: not drawn, matplotlib is missing; pip install 'shardstream[plot]'\n")
