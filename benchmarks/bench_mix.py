"""A 3-source mixture against its sources read alone and webdataset 1.0.2's RandomMix (issue 26).

Three local datasets of 10 shards x 500 small samples (a ~100-byte ``txt`` and a ``cls``), weights
0.5 / 0.3 / 0.2, shard shuffle on. One pass of each contender, alternating every round:

* ``ss.Mix`` (``stop="first_exhausted"``): ends when the 0.5 source has given its 5,000 samples,
  after 10,000 items;
* the sources alone: the same three ``ss.ShardStream`` objects read one after another for exactly the
  counts the mixture took from each (the mixture's overhead per sample is the difference);
* the same picks interleaved by hand (a list of source indices and the sources' iterators): what
  any mixture costs by reading three streams in turn, without the mixture's own code;
* ``ss.Mix`` and the sources alone again, with 256 KiB tar read blocks instead of 1 MiB (three
  readers' 1 MiB buffers do not fit one core's 1 MiB L2 cache together; one does);
* webdataset 1.0.2 ``RandomMix`` over ``webdataset.WebDataset`` sources of the same shards, with
  the same probabilities (random draws: it stops at a random point, so rates are per sample);
* shardstream's ``RandomMix`` (the WebDataset name, on the same stage as ``ss.Mix``).

Reported: best and median samples/s, CPU-seconds per 1,000 samples, and ratios best-vs-best, as the
median of per-round ratios (rounds alternate, so a per-round ratio compares runs made under the
same load) and per CPU-second (far less disturbed by other jobs on this shared machine).

    .venv/bin/python benchmarks/bench_mix.py [--rounds 5] [--markdown benchmarks/results/bench_mix.md]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import logging
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Side, emit_report, machine_line, paired_ratio, run_alternating  # noqa: E402

NAMES = ("alpha", "beta", "gamma")
WEIGHTS = (0.5, 0.3, 0.2)
SHARDS, PER_SHARD = 10, 500
SMALL_BLOCK = 256 << 10


def build(root: Path) -> dict[str, list[str]]:
    """Three datasets of ``SHARDS`` x ``PER_SHARD`` small samples (written once, kept in ``root``)."""
    from shardstream.tar.sharded_writer import ShardWriter

    urls: dict[str, list[str]] = {}
    filler = "abcdefghijklmnopqrstuvwxyz0123456789" * 3
    for name in NAMES:
        directory = root / "mix" / name
        paths = [str(directory / f"{name}-{s:06d}.tar") for s in range(SHARDS)]
        if not all(Path(p).exists() for p in paths):
            directory.mkdir(parents=True, exist_ok=True)
            with ShardWriter(str(directory / f"{name}-%06d.tar"), maxcount=PER_SHARD, mtime=0) as sink:
                for i in range(SHARDS * PER_SHARD):
                    sink.write(
                        {"__key__": f"{name}{i:07d}", "txt": f"{name} {i:07d} {filler}"[:100], "cls": i}
                    )
        urls[name] = paths
    return urls


def _count(items: Any) -> int:
    n = 0
    for _ in items:
        n += 1
    return n


def cases(urls: dict[str, list[str]]) -> tuple[list[tuple[str, Callable[[], int]]], dict[str, int]]:
    import webdataset

    import shardstream as ss
    from shardstream.tar.samples import TarFormat

    def sources(blocksize: int = 1 << 20) -> list[ss.ShardStream]:
        fmt = TarFormat(blocksize=blocksize)
        return [ss.ShardStream(urls[name], seed=k, format=fmt) for k, name in enumerate(NAMES)]

    def mixture(blocksize: int = 1 << 20) -> ss.Mix:
        return ss.Mix(sources(blocksize), weights=list(WEIGHTS), seed=1)

    mix, small_mix = mixture(), mixture(SMALL_BLOCK)
    picks = [NAMES.index(s["__key__"].rstrip("0123456789")) for s in mix]
    taken = Counter(NAMES[i] for i in picks)
    alone, small_alone = sources(), sources(SMALL_BLOCK)

    def read_alone(datasets: list[ss.ShardStream]) -> Callable[[], int]:
        def run() -> int:
            return sum(
                _count(itertools.islice(ds, taken[name])) for ds, name in zip(datasets, NAMES, strict=True)
            )

        return run

    def by_hand() -> int:
        nexts = [iter(ds).__next__ for ds in alone]
        for i in picks:
            nexts[i]()
        return len(picks)

    def ss_random_mix() -> int:
        ds = [ss.WebDataset(urls[name], shardshuffle=True, seed=k) for k, name in enumerate(NAMES)]
        return _count(ss.RandomMix(ds, probs=list(WEIGHTS), seed=2))

    def wds_random_mix() -> int:
        ds = [webdataset.WebDataset(urls[name], shardshuffle=True) for name in NAMES]
        return _count(webdataset.RandomMix(ds, probs=list(WEIGHTS)))

    return [
        ("ss.Mix", lambda: _count(mix)),
        ("sources alone, same counts", read_alone(alone)),
        ("same picks, interleaved by hand", by_hand),
        ("ss.Mix, 256 KiB blocks", lambda: _count(small_mix)),
        ("sources alone, 256 KiB blocks", read_alone(small_alone)),
        ("webdataset 1.0.2 RandomMix", wds_random_mix),
        ("shardstream RandomMix", ss_random_mix),
    ], dict(taken)


def report(sides: list[Side], taken: dict[str, int], rounds: int) -> list[str]:
    mix, alone, hand, small_mix, small_alone, wds, ss_random = sides
    lines = [
        f"# bench_mix: a 3-source mixture ({datetime.date.today()})",
        "",
        f"{machine_line()}; {rounds} alternating rounds, each pass repeated for at least 1 s.",
        f"Sources: 3 x {SHARDS} local shards x {PER_SHARD} samples (~100-byte txt + cls), weights "
        f"{' / '.join(map(str, WEIGHTS))}, shard shuffle on; the mixture took "
        f"{', '.join(f'{v} {k}' for k, v in taken.items())}. Tar blocks of 1 MiB (the default) unless "
        "named.",
        "",
        "| contender | samples per pass | best samples/s | median samples/s "
        "| CPU-s / 1k samples (best round) |",
        "|---|---:|---:|---:|---:|",
    ]
    for side in sides:
        best = side.best
        lines.append(
            f"| {side.name} | {best.samples // best.passes:,} | {best.rate:,.0f} | {side.median_rate:,.0f} "
            f"| {best.cpu_per_1k:.4f} |"
        )

    def per_cpu(m: Any) -> float:
        return 1.0 / m.cpu_per_1k

    def rate(m: Any) -> float:
        return float(m.rate)

    rows = [
        ("ss.Mix vs the sources alone", mix, alone, ">= 0.95 (overhead <= 5%)"),
        ("ss.Mix vs the sources alone, 256 KiB blocks", small_mix, small_alone, ">= 0.95 (overhead <= 5%)"),
        ("ss.Mix vs the same picks by hand (the mixture's own code)", mix, hand, "-"),
        ("the same picks by hand vs the sources alone (interleaving itself)", hand, alone, "-"),
        ("ss.Mix vs webdataset 1.0.2 RandomMix", mix, wds, "-"),
        ("shardstream RandomMix vs webdataset 1.0.2 RandomMix", ss_random, wds, "-"),
    ]
    lines += [
        "",
        "| ratio | samples/s, best vs best | samples/s, median per round | per CPU-s, median per round "
        "| target |",
        "|---|---:|---:|---:|---|",
    ]
    for label, a, b, target in rows:
        best, median = paired_ratio(a, b, rate)
        _, cpu = paired_ratio(a, b, per_cpu)
        lines.append(f"| {label} | {best:.2f}x | {median:.2f}x | {cpu:.2f}x | {target} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("bench-data"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    warnings.simplefilter("ignore", DeprecationWarning)
    urls = build(args.data)
    contenders, taken = cases(urls)
    sides = run_alternating(contenders, rounds=args.rounds)
    emit_report(report(sides, taken, args.rounds), args.markdown)


if __name__ == "__main__":
    main()
