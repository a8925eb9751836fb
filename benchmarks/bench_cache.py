"""Shard cache: shardstream vs webdataset 1.0.2, alternately in one run, same shards, same server.

Run from the repository root::

    .venv/bin/python benchmarks/bench_cache.py [--data ./bench-data/cache] [--rounds 3]

The shards are served by the loopback HTTP file server of the integration tests
(``tests/integration/_servers.py``: Range, ETag, keep-alive); webdataset fetches them with
``curl`` (its ``http://`` opener), shardstream with its HTTP source. HTTP rather than S3 because
webdataset 1.0.2 has no native ``s3://`` opener (it needs ``pipe:aws s3 cp ...``), which would
measure the AWS CLI rather than the cache.

Two comparisons, rounds alternating between the two libraries, each round with fresh cache
directories:

1. **Cold cache, first sample and first batch (32 samples)**: seconds from creating the
   iterator to the first sample / batch. webdataset downloads the whole shard into its cache
   before the first sample; shardstream streams the shard while it is written to the cache.
2. **Warm cache, second epoch**: samples/s of a full pass over a cache filled by the first epoch
   (raw samples, no decoding).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402
from _servers import HTTPFileServer  # noqa: E402

log = logging.getLogger("bench_cache")

SHARDS, SAMPLES_PER_SHARD, SAMPLE_BYTES, BATCH = 8, 160, 100_000, 32


def build(directory: Path) -> list[str]:
    """8 shards of 160 samples of ~100 KB (about 16 MB per shard), written with our ShardWriter."""
    from shardstream.tar.sharded_writer import ShardWriter

    marker = directory / f".built-{SHARDS}-{SAMPLES_PER_SHARD}-{SAMPLE_BYTES}"
    names = [f"cache-{i:06d}.tar" for i in range(SHARDS)]
    if not marker.exists():
        directory.mkdir(parents=True, exist_ok=True)
        block = bytes(range(256)) * (SAMPLE_BYTES // 256)
        with ShardWriter(str(directory / "cache-%06d.tar"), maxcount=SAMPLES_PER_SHARD) as sink:
            for i in range(SHARDS * SAMPLES_PER_SHARD):
                sink.write({"__key__": f"{i:08d}", "bin": block, "cls": str(i % 10)})
        marker.touch()
    return names


def _ours(urls: list[str], cache_dir: str) -> Any:
    import shardstream

    return shardstream.WebDataset(urls, cache_dir=cache_dir, shardshuffle=False)


def _theirs(urls: list[str], cache_dir: str) -> Any:
    import webdataset

    return webdataset.WebDataset(urls, cache_dir=cache_dir, shardshuffle=False)


def _plain(urls: list[str], cache_dir: str) -> Any:
    import shardstream

    return shardstream.WebDataset(urls, shardshuffle=False)  # no cache: the streaming baseline


def cold(make: Callable[[list[str], str], Any], urls: list[str], cache_dir: str) -> tuple[float, float, int]:
    """Seconds to the first sample and to the first batch from a cold cache; then finish the epoch."""
    t0 = time.perf_counter()
    it: Iterator[Any] = iter(make(urls, cache_dir))
    next(it)
    first = time.perf_counter() - t0
    for _ in range(BATCH - 1):
        next(it)
    batch = time.perf_counter() - t0
    n = BATCH + sum(1 for _ in it)  # fills the cache for the warm epoch (not timed)
    return first, batch, n


def warm(make: Callable[[list[str], str], Any], urls: list[str], cache_dir: str) -> tuple[float, int]:
    """Samples/s of a full pass over a warm cache."""
    t0 = time.perf_counter()
    n = sum(1 for _ in make(urls, cache_dir))
    return n / (time.perf_counter() - t0), n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=ROOT / "bench-data" / "cache")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("shardstream").setLevel(logging.WARNING)
    warnings.simplefilter("ignore", DeprecationWarning)
    names = build(args.data)
    expect = SHARDS * SAMPLES_PER_SHARD
    sides = {"shardstream": _ours, "webdataset": _theirs}
    firsts: dict[str, list[float]] = {k: [] for k in sides}
    batches: dict[str, list[float]] = {k: [] for k in sides}
    rates: dict[str, list[float]] = {k: [] for k in sides}
    plain: list[float] = []
    with HTTPFileServer(args.data) as server:
        urls = [server.url_for(n) for n in names]
        log.info("%s", machine_line())
        log.info(
            "%d shards x %d samples x %d KB over loopback HTTP (%s)",
            SHARDS,
            SAMPLES_PER_SHARD,
            SAMPLE_BYTES // 1000,
            server.url,
        )
        for r in range(args.rounds + 1):  # round 0 is a warm-up (imports, connections, page cache)
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                tmp = tempfile.mkdtemp(prefix=f"bench-cache-{name}-")
                try:
                    first, batch, n = cold(sides[name], urls, tmp)
                    time.sleep(0.5)  # let a background fill finish publishing
                    rate, n2 = warm(sides[name], urls, tmp)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                if n != expect or n2 != expect:
                    raise RuntimeError(f"{name} yielded {n}/{n2} samples, expected {expect}")
                if r == 0:
                    continue
                if name == "shardstream":
                    plain.append(cold(_plain, urls, "")[0])
                firsts[name].append(first)
                batches[name].append(batch)
                rates[name].append(rate)
                log.info(
                    "round %d %-12s cold first sample %7.1f ms  first batch %7.1f ms  "
                    "warm epoch %8.0f samples/s",
                    r,
                    name,
                    first * 1e3,
                    batch * 1e3,
                    rate,
                )
    ours, theirs = "shardstream", "webdataset"
    log.info("")
    log.info("%-34s %14s %14s %10s", "best of rounds", ours, theirs, "ratio")
    log.info(
        "%-34s %12.1f ms %12.1f ms %9.1fx faster",
        "cold cache: first sample",
        min(firsts[ours]) * 1e3,
        min(firsts[theirs]) * 1e3,
        min(firsts[theirs]) / min(firsts[ours]),
    )
    log.info(
        "%-34s %12.1f ms %12.1f ms %9.1fx faster",
        f"cold cache: first batch ({BATCH})",
        min(batches[ours]) * 1e3,
        min(batches[theirs]) * 1e3,
        min(batches[theirs]) / min(batches[ours]),
    )
    log.info(
        "%-34s %12.0f /s %12.0f /s %9.2fx",
        "warm cache: second epoch samples/s",
        max(rates[ours]),
        max(rates[theirs]),
        max(rates[ours]) / max(rates[theirs]),
    )
    log.info(
        "median per-round ratios: first batch %.1fx, warm epoch %.2fx",
        statistics.median(t / o for o, t in zip(batches[ours], batches[theirs], strict=True)),
        statistics.median(o / t for o, t in zip(rates[ours], rates[theirs], strict=True)),
    )
    log.info(
        "first sample without any cache (shardstream streaming, the floor): %.1f ms (best)", min(plain) * 1e3
    )
    log.info(
        "one shard is %.1f MB; one sample %.0f KB", SAMPLES_PER_SHARD * SAMPLE_BYTES / 1e6, SAMPLE_BYTES / 1e3
    )


if __name__ == "__main__":
    main()
