"""Shared benchmark helpers: synthetic datasets, CPU-aware timing, alternating rounds, tables.

Every benchmark runs shardstream and webdataset 1.0.2 *alternately* in one process on the same
files and reports the best round of each side (the machine is shared, so the best round is the
least disturbed one) next to the median, plus the ratio of the best rounds.
"""

from __future__ import annotations

import io
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "IMAGE_SPEC",
    "TINY_SPEC",
    "Measurement",
    "Side",
    "build_image_dataset",
    "build_tiny_dataset",
    "children",
    "cpu_seconds",
    "dataset_bytes",
    "machine_line",
    "measure",
    "not_client",
    "paired_ratio",
    "run_alternating",
    "shard_paths",
]

#: (samples, shards) of the two synthetic datasets named in issue 2.
TINY_SPEC = (100_000, 10)
IMAGE_SPEC = (2_000, 8)


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (of all its threads), from ``/proc``; none where there
    is no ``/proc``."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return found


#: Live helper processes of the benchmark itself (the memory sampler of ``_rss``): not the client.
_NOT_CLIENT: set[int] = set()


def not_client(pid: int) -> None:
    """Leave the live child ``pid`` out of :func:`cpu_seconds` (a helper of the benchmark that
    runs this Python, such as the memory sampler, kept for the whole run)."""
    _NOT_CLIENT.add(pid)


def _live_children_cpu(pid: int) -> float:
    """CPU seconds of ``pid``'s live descendants running this Python (forked DataLoader workers,
    persistent ones included), from ``/proc``; 0 where there is no ``/proc``. Other programs
    (the S3 server a benchmark starts, which is not the client) and the benchmark's own helpers
    (:func:`not_client`) are left out; short-lived tools (curl, s5cmd) are counted once they are
    reaped."""
    total = 0.0
    try:
        exe = os.readlink("/proc/self/exe")
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for child in children(pid):
        if child in _NOT_CLIENT:
            continue
        try:
            if os.readlink(f"/proc/{child}/exe") != exe:
                continue
            with open(f"/proc/{child}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks + _live_children_cpu(child)
    return total


def cpu_seconds() -> float:
    """User + system CPU of this process and of its children, reaped (DataLoader workers, pipes)
    or still alive (persistent workers): a child is counted alive until it is reaped, then in
    the reaped total, so a difference of two readings counts each child once."""
    # process_time() has nanosecond resolution; os.times() counts in 10 ms clock ticks, too coarse
    # for a 100 ms pass (children are only known in ticks).
    t = os.times()
    return time.process_time() + t.children_user + t.children_system + _live_children_cpu(os.getpid())


@dataclass
class Measurement:
    """One timed pass over a dataset."""

    samples: int
    wall: float
    cpu: float
    nbytes: int = 0
    passes: int = 1

    @property
    def rate(self) -> float:
        """Samples per second."""
        return self.samples / self.wall if self.wall > 0 else float("nan")

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.wall / 1e6 if self.wall > 0 else float("nan")

    @property
    def cpu_per_1k(self) -> float:
        """CPU-seconds per 1,000 samples."""
        return self.cpu / self.samples * 1000 if self.samples else float("nan")

    @property
    def cpu_per_gb(self) -> float:
        """CPU-seconds per GB (1e9 bytes) of shard data."""
        return self.cpu / (self.nbytes / 1e9) if self.nbytes else float("nan")


def measure(run: Callable[[], int | Measurement], nbytes: int = 0, *, min_time: float = 0.0) -> Measurement:
    """Time ``run()`` (one pass; returns the samples it consumed) in wall and CPU seconds.

    The pass is repeated until ``min_time`` seconds have elapsed, so that a fast contender is not
    timed over a few tens of milliseconds (where scheduler noise on a shared machine dominates);
    a slow one runs once. Rates are per pass, so repeating does not favour either side.

    A ``run`` that times itself returns its own :class:`Measurement` instead (its passes, wall and
    CPU: e.g. ``_curl.WarmCurl``, which leaves out a warm-up inside the call); those are added up
    until they reach ``min_time``, and ``nbytes`` is not used.
    """
    c0, t0 = cpu_seconds(), time.perf_counter()
    n = passes = 0
    timed: list[Measurement] = []
    while True:
        got = run()
        if isinstance(got, Measurement):
            timed.append(got)
            if sum(m.wall for m in timed) >= min_time:
                break
            continue
        n += got
        passes += 1
        if time.perf_counter() - t0 >= min_time:
            break
    if timed:
        return Measurement(
            sum(m.samples for m in timed),
            sum(m.wall for m in timed),
            sum(m.cpu for m in timed),
            sum(m.nbytes for m in timed),
            sum(m.passes for m in timed),
        )
    t1, c1 = time.perf_counter(), cpu_seconds()
    return Measurement(n, t1 - t0, c1 - c0, nbytes * passes, passes)


@dataclass
class Side:
    """All rounds of one contender in one comparison."""

    name: str
    rounds: list[Measurement] = field(default_factory=list)

    @property
    def best(self) -> Measurement:
        return max(self.rounds, key=lambda m: m.rate)

    @property
    def median_rate(self) -> float:
        return statistics.median(m.rate for m in self.rounds)


def paired_ratio(a: Side, b: Side, metric: Callable[[Measurement], float]) -> tuple[float, float]:
    """``(best-vs-best, median of per-round ratios)`` of ``metric`` for ``a`` over ``b``.

    Rounds of two sides ran next to each other, so the per-round ratio cancels slow drifts in
    machine load that a best-vs-best comparison can pick up from different rounds.
    """
    best = max(metric(m) for m in a.rounds) / max(metric(m) for m in b.rounds)
    per_round = statistics.median(metric(x) / metric(y) for x, y in zip(a.rounds, b.rounds, strict=True))
    return best, per_round


def run_alternating(
    cases: Sequence[tuple[str, Callable[[], int | Measurement]]],
    *,
    rounds: int,
    nbytes: int = 0,
    expect: int | None = None,
    min_time: float = 1.0,
    warmup: bool = True,
    log: Callable[[str], None] = print,
) -> list[Side]:
    """Run each case once per round, in alternating order, and return every round per case.

    The order flips every round (A B, B A, A B, ...) so neither side always runs right after the
    other's garbage or page-cache effects. Each measurement lasts at least ``min_time`` seconds
    (see :func:`measure`). With ``warmup``, every case first runs one unmeasured pass (imports,
    client set-up, first connections, page cache; a self-timed case's first call, which it may use
    to calibrate itself).
    """
    sides = [Side(name) for name, _ in cases]
    if warmup:
        for _name, run in cases:
            run()
    for r in range(rounds):
        order = list(range(len(cases)))
        if r % 2:
            order.reverse()
        for i in order:
            m = measure(cases[i][1], nbytes, min_time=min_time)
            if expect is not None and m.samples != expect * m.passes:
                raise RuntimeError(
                    f"{cases[i][0]} yielded {m.samples} samples in {m.passes} passes, expected {expect} each"
                )
            sides[i].rounds.append(m)
            rate = f"{m.rate:11,.0f} samples/s  {m.cpu_per_1k:7.3f} CPU-s/1k" if m.samples else " " * 37
            extra = f"  {m.mb_per_s:8.1f} MB/s  {m.cpu_per_gb:6.2f} CPU-s/GB" if nbytes else ""
            log(f"    round {r + 1} {cases[i][0]:<28} {rate}{extra}  ({m.passes} passes)")
    return sides


# ------------------------------------------------------------------------------------------------
# Datasets


def shard_paths(directory: Path, prefix: str, count: int) -> list[str]:
    return [str(directory / f"{prefix}-{i:06d}.tar") for i in range(count)]


def dataset_bytes(paths: Iterable[str]) -> int:
    return sum(os.path.getsize(p) for p in paths)


def _ready(directory: Path, params: dict[str, Any]) -> bool:
    marker = directory / "_bench.json"
    try:
        return bool(json.loads(marker.read_text()) == params)
    except (OSError, ValueError):
        return False


def _mark(directory: Path, params: dict[str, Any]) -> None:
    (directory / "_bench.json").write_text(json.dumps(params))


def _write_shards(directory: Path, prefix: str, samples: Iterable[dict[str, Any]], per_shard: int) -> None:
    from shardstream.tar.sharded_writer import ShardWriter

    directory.mkdir(parents=True, exist_ok=True)
    with ShardWriter(str(directory / f"{prefix}-%06d.tar"), maxcount=per_shard, mtime=0) as sink:
        for sample in samples:
            sink.write(sample)


def build_tiny_dataset(root: Path, count: int = TINY_SPEC[0], shards: int = TINY_SPEC[1]) -> list[str]:
    """``count`` samples of one ~100-byte ``txt`` member, in ``shards`` shards (cached in ``root``)."""
    directory = root / "tiny"
    params = {"kind": "tiny", "count": count, "shards": shards, "version": 1}
    if not _ready(directory, params):
        filler = "abcdefghijklmnopqrstuvwxyz0123456789" * 3

        def gen() -> Iterable[dict[str, Any]]:
            for i in range(count):
                text = f"sample {i:08d} " + filler
                yield {"__key__": f"s{i:08d}", "txt": text[:100]}

        _write_shards(directory, "tiny", gen(), per_shard=-(-count // shards))
        _mark(directory, params)
    return shard_paths(directory, "tiny", shards)


def _jpeg(i: int, size: int) -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(i)
    # Smooth gradients plus mild noise: compresses like a photo (tens of KB), not like pure noise.
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    phase = rng.uniform(0, 6.28, 3)
    channels = [
        127 + 100 * np.sin(x / rng.uniform(8, 40) + phase[c]) * np.cos(y / rng.uniform(8, 40) - phase[c])
        for c in range(3)
    ]
    image = np.stack(channels, axis=-1) + rng.normal(0, 12, (size, size, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def build_image_dataset(
    root: Path, count: int = IMAGE_SPEC[0], shards: int = IMAGE_SPEC[1], size: int = 256
) -> list[str]:
    """``count`` ``size``x``size`` JPEG samples with a ``cls`` label in ``shards`` shards (cached)."""
    # Other shapes get their own directory: benchmarks that share bench-data do not rebuild
    # each other's images every run.
    default = (count, shards, size) == (*IMAGE_SPEC, 256)
    directory = root / ("images" if default else f"images-{count}-{shards}-{size}")
    params = {"kind": "images", "count": count, "shards": shards, "size": size, "version": 1}
    if not _ready(directory, params):

        def gen() -> Iterable[dict[str, Any]]:
            for i in range(count):
                yield {"__key__": f"img{i:07d}", "jpg": _jpeg(i, size), "cls": str(i % 1000)}

        _write_shards(directory, "images", gen(), per_shard=-(-count // shards))
        _mark(directory, params)
    return shard_paths(directory, "images", shards)


def machine_line() -> str:
    """A one-line description of the machine and software versions."""
    import numpy

    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:  # pragma: no cover - torch is required by the benchmarks in practice
        torch_version = "absent"
    return (
        f"{platform.machine()}, {os.cpu_count()} cores (shared), Linux {platform.release()}, "
        f"Python {sys.version.split()[0]}, torch {torch_version}, numpy {numpy.__version__}"
    )


def emit_report(lines: list[str], markdown: Path | None) -> None:
    """Print the Markdown report and, when asked, write it to ``markdown``."""
    text = "\n".join(lines)
    print()
    print(text)
    if markdown:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(text + "\n")
