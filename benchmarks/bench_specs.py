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
   without an index: MB/s and seconds per GB, against reading the counts from an ``_info.json``.

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
from shardstream.sources.memory import memory_store  # noqa: E402
from shardstream.tar.index import IndexEntry, write_index  # noqa: E402


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


def counting_rows(directory: Path, rounds: int, shards: int, samples: int, size: int) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    with ss.ShardWriter(str(directory / "c-%06d.tar"), maxcount=samples, index=False) as sink:
        for i in range(shards * samples):
            sink.write({"__key__": f"k{i:07d}", "bin": bytes(size)})
    urls = sorted(str(p) for p in directory.glob("c-*.tar"))
    total = sum(os.path.getsize(u) for u in urls)

    def count() -> object:
        clear_cache()
        return shard_counts(urls)

    counted = timed(count, rounds)
    write_index(str(directory), [IndexEntry(url=Path(u).name, samples=samples, bytes=-1) for u in urls])
    indexed = timed(lambda: shard_counts(urls), rounds)
    mb = total / 1e6
    return [
        f"| counting pass, {shards} local shards x {samples} samples of {size // 1024} KiB "
        f"({mb:,.0f} MB, page cache warm) | {counted[0]:.3f} | {counted[1]:.3f} |",
        f"| the same counts from an `_info.json` | {indexed[0]:.4f} | {indexed[1]:.4f} |",
        "",
        f"Counting pass: {mb / counted[0]:,.0f} MB/s at best, {counted[0] / mb * 1000:.1f} s per GB.",
    ]


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
        counting = counting_rows(root / "counted", args.rounds, 32, 256, 16 << 10)
    lines = [
        f"# bench_specs: resolving and checking shard specs ({time.strftime('%Y-%m-%d')})",
        "",
        f"{machine_line()}; best and median of {args.rounds} rounds.",
        "",
        "| what | best s | median s |",
        "|---|---:|---:|",
        *rows,
        *counting[:2],
        *counting[2:],
    ]
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
