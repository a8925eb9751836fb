"""What resolving and checking a shard spec costs at construction (``datasets/specs.py``), and what
the native default split's counting pass costs on local shards without an index.

Four measurements, best and median of ``--rounds`` (the machine is shared):

1. a brace spec of 1M remote names: ``expand_urls`` alone against ``resolve_shards(check=False)``
   (the spec recognised as plain shard names, no per-URL filesystem call);
2. 100k local shards (empty files): the existence check as ``resolve_shards`` does it (the
   directory listed once) against one ``os.path.exists`` per shard;
3. 1M remote names checked against the ``_info.json`` beside them (a ``memory://`` store, so the
   figure is the check's own work, not a network's);
4. the counting pass ``split="equal"`` (and the several-rank default) runs over local shards
   without an index: the header walk it uses (``tar/walk.py``: a small read per member, the data
   skipped; sequential windows over members of at most 64 KiB) beside the full read it replaced
   (every byte through the tar reader), on the same shards, with the page cache warm and cold
   (``posix_fadvise(DONTNEED)`` on every shard before each round; the shards are fsync-ed first
   so that the pages can be dropped), against reading the counts from an ``_info.json``. Four
   sets of shards: members of 16 KiB (read through in windows), of 128 KiB (an image's size) and
   1 MiB (a header read each), and of 100 bytes, the walk's worst case (its headers are half the
   bytes).

    python benchmarks/bench_specs.py --markdown benchmarks/results/bench_specs.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit_report, machine_line  # noqa: E402

import shardstream as ss  # noqa: E402
from shardstream.datasets.specs import resolve_shards  # noqa: E402
from shardstream.readers.counts import clear_cache, shard_counts  # noqa: E402
from shardstream.sources import Source  # noqa: E402
from shardstream.sources.memory import memory_store  # noqa: E402
from shardstream.tar.index import IndexEntry, write_index  # noqa: E402
from shardstream.tar.samples import TarFormat  # noqa: E402


def timed(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """(best, median) seconds of ``rounds`` calls."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def brace_rows(rounds: int) -> list[str]:
    spec = "s3://bucket/train/a-{0000000..0999999}.tar"
    expand = timed(lambda: ss.expand_urls(spec), rounds)
    resolve = timed(lambda: resolve_shards(spec, check=False), rounds)
    return [
        f"| 1M-name brace spec (s3://): `expand_urls` | {expand[0]:.3f} | {expand[1]:.3f} |",
        f"| the same: `resolve_shards(check=False)` | {resolve[0]:.3f} | {resolve[1]:.3f} |",
    ]


def local_rows(directory: Path, rounds: int, n: int) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    if len(os.listdir(directory)) < n:
        for i in range(n):
            (directory / f"a-{i:06d}.tar").touch()
    spec = f"{directory}/a-{{000000..{n - 1:06d}}}.tar"
    urls = ss.expand_urls(spec)
    listed = timed(lambda: resolve_shards(spec), rounds)
    stats = timed(lambda: [u for u in urls if not os.path.exists(u)], rounds)
    return [
        f"| {n // 1000}k local shards: `resolve_shards` with the check (the directory listed) "
        f"| {listed[0]:.3f} | {listed[1]:.3f} |",
        f"| the same check as one `os.path.exists` per shard | {stats[0]:.3f} | {stats[1]:.3f} |",
    ]


def indexed_rows(rounds: int, n: int) -> list[str]:
    entries = [IndexEntry(url=f"a-{i:07d}.tar", samples=1000, bytes=1) for i in range(n)]
    write_index("memory://bench/train", entries)
    spec = f"memory://bench/train/a-{{0000000..{n - 1:07d}}}.tar"
    checked = timed(lambda: resolve_shards(spec), rounds)
    memory_store.clear()
    return [
        f"| {n // 1_000_000}M remote names checked against their `_info.json` (memory://) "
        f"| {checked[0]:.3f} | {checked[1]:.3f} |"
    ]


class FullRead(TarFormat):
    """The counting pass as it was before the header walk: every byte through the tar reader."""

    def count(self, source: Source, url: str) -> int:
        return sum(1 for _ in self.samples(source, url))


def write_shards(directory: Path, shards: int, samples: int, size: int) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    with ss.ShardWriter(str(directory / "c-%06d.tar"), maxcount=samples, index=False) as sink:
        for i in range(shards * samples):
            sink.write({"__key__": f"k{i:07d}", "bin": bytes(size)})
    urls = sorted(str(p) for p in directory.glob("c-*.tar"))
    for url in urls:  # written back, so that posix_fadvise(DONTNEED) can drop the pages
        fd = os.open(url, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return urls


def drop_cache(urls: list[str]) -> None:
    """Evict the shards' pages from the page cache (they are clean: see ``write_shards``)."""
    for url in urls:
        fd = os.open(url, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def count_with(urls: list[str], fmt: TarFormat, cold: bool) -> Callable[[], object]:
    def count() -> object:
        clear_cache()
        if cold:
            drop_cache(urls)
        return shard_counts(urls, format=fmt)  # the pass of split="equal", len() and the planner

    return count


def _size(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B"


def counting_rows(
    directory: Path, rounds: int, shards: int, samples: int, size: int, *, indexed: bool = False
) -> tuple[list[str], str]:
    """Table rows and a summary line: the full read and the header walk over the same shards,
    page cache warm and cold (and, when ``indexed``, the counts read from an ``_info.json``)."""
    urls = write_shards(directory, shards, samples, size)
    mb = sum(os.path.getsize(u) for u in urls) / 1e6
    what = f"{shards} local shards x {samples:,} samples of {_size(size)} ({mb:,.0f} MB"
    rows: list[str] = []
    per_gb: list[str] = []
    for label, fmt in (("full read", FullRead()), ("header walk", TarFormat())):
        seconds = []
        for cold in (False, True):
            cache = "page cache cold" if cold else "page cache warm"
            times = timed(count_with(urls, fmt, cold), rounds)
            seconds.append(times[0] / mb * 1000)
            rows.append(f"| counting pass, {label}: {what}, {cache}) | {times[0]:.3f} | {times[1]:.3f} |")
        per_gb.append(f"{label} {seconds[0]:.2f} warm, {seconds[1]:.2f} cold")
    if indexed:
        write_index(str(directory), [IndexEntry(url=Path(u).name, samples=samples, bytes=-1) for u in urls])
        index = timed(lambda: shard_counts(urls), rounds)
        rows.append(f"| the same counts from an `_info.json` | {index[0]:.4f} | {index[1]:.4f} |")
    summary = f"- members of {_size(size)} ({mb:,.0f} MB): " + "; ".join(per_gb) + " (s per GB, best rounds)."
    return rows, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--data", type=Path, default=None, help="working directory (default: a temporary one)"
    )
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.data) as tmp:
        root = Path(tmp)
        rows = brace_rows(args.rounds)
        rows += local_rows(root / "local", args.rounds, 100_000)
        rows += indexed_rows(args.rounds, 1_000_000)
        sets = [
            counting_rows(root / "counted", args.rounds, 64, 256, 16 << 10, indexed=True),
            counting_rows(root / "images", args.rounds, 32, 64, 128 << 10),
            counting_rows(root / "large", args.rounds, 32, 8, 1 << 20),
            counting_rows(root / "tiny", args.rounds, 8, 10_000, 100),  # the walk's worst case
        ]
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"# bench_specs: resolving and checking shard specs ({time.strftime('%Y-%m-%d')})",
        "",
        f"{machine_line()}; best and median of {args.rounds} rounds; load average at the end "
        f"{load} (1 / 5 / 15 min).",
        "",
        "| what | best s | median s |",
        "|---|---:|---:|",
        *rows,
        *(row for counting, _ in sets for row in counting),
        "",
        "Counting pass over local shards without an index, seconds per GB:",
        "",
        *(summary for _, summary in sets),
    ]
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
