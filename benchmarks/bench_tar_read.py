"""shardstream vs webdataset 1.0.2 reading local shards, alternately in one run (issue 2 targets).

Run from the repository root::

    .venv/bin/python benchmarks/bench_tar_read.py [--data ./bench-data] [--rounds 3] [--markdown FILE]

Three comparisons, each on the same files, shardstream and webdataset alternating every round:

1. raw sample iteration over 100,000 tiny (~100 byte) samples in 10 shards   (target >= 10x)
2. raw sample iteration over 2,000 256x256 JPEG + cls samples in 8 shards    (target >= 4x)
3. ``.decode("rgb8").to_tuple("jpg", "cls")`` through a DataLoader with 2 workers, batch 32
                                                                              (target >= 1.5x)

Both sides use ``shardshuffle=False`` and their defaults otherwise. Reported per side: the best
round's samples/s, its CPU-seconds per 1,000 samples (DataLoader workers included), the median
samples/s, and the ratio of the best rounds.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    Side,
    build_image_dataset,
    build_tiny_dataset,
    dataset_bytes,
    emit_report,
    machine_line,
    paired_ratio,
    run_alternating,
)

BATCH = 32


def _count(iterable: Any) -> int:
    n = 0
    for _ in iterable:
        n += 1
    return n


def _count_batched(iterable: Any) -> int:
    n = 0
    for batch in iterable:
        n += len(batch[1])
    return n


def raw_cases(urls: list[str]) -> list[tuple[str, Callable[[], int]]]:
    import webdataset

    from shardstream.compat import WebDataset

    return [
        ("shardstream", lambda: _count(WebDataset(urls, shardshuffle=False))),
        ("webdataset 1.0.2", lambda: _count(webdataset.WebDataset(urls, shardshuffle=False))),
    ]


def decode_cases(urls: list[str], workers: int) -> list[tuple[str, Callable[[], int]]]:
    import webdataset

    from shardstream.compat import WebDataset
    from shardstream.loader import WebLoader

    def ours() -> int:
        ds = WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls")
        with WebLoader(ds, batch_size=BATCH, num_workers=workers) as loader:
            return _count_batched(loader)

    def theirs() -> int:
        ds = webdataset.WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls")
        loader = webdataset.WebLoader(ds, batch_size=BATCH, num_workers=workers)
        return _count_batched(loader)

    return [("shardstream", ours), ("webdataset 1.0.2", theirs)]


def plain_loader_cases(urls: list[str], workers: int) -> list[tuple[str, Callable[[], int]]]:
    """The same decode through torch's own DataLoader (as Lightning and most user code use it)."""
    import webdataset
    from torch.utils.data import DataLoader

    from shardstream.compat import WebDataset

    def ours() -> int:
        ds = WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls")
        return _count_batched(DataLoader(ds, batch_size=BATCH, num_workers=workers))

    def theirs() -> int:
        ds = webdataset.WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls")
        return _count_batched(DataLoader(ds, batch_size=BATCH, num_workers=workers))

    return [("shardstream", ours), ("webdataset 1.0.2", theirs)]


def summarize(title: str, sides: list[Side], target: float, nbytes: int) -> list[str]:
    ours, theirs = sides
    ratio, paired = paired_ratio(ours, theirs, lambda m: m.rate)
    cpu_ratio = theirs.best.cpu_per_1k / ours.best.cpu_per_1k
    verdict = "MET" if ratio >= target else "MISSED"
    rows = [
        f"### {title}",
        "",
        "| | samples/s (best) | samples/s (median) | CPU-s / 1k samples | MB/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for side in sides:
        b = side.best
        rows.append(
            f"| {side.name} | {b.rate:,.0f} | {side.median_rate:,.0f} | {b.cpu_per_1k:.3f} | "
            f"{b.mb_per_s:,.1f} |"
        )
    rows += [
        "",
        f"**ratio {ratio:.2f}x** samples/s best vs best ({paired:.2f}x median of per-round ratios), "
        f"{cpu_ratio:.2f}x less CPU per sample; target >= {target}x: **{verdict}**",
        "",
    ]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("bench-data"), help="dataset directory (cached)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per comparison")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers for the decode case")
    parser.add_argument("--only", choices=["tiny", "jpeg", "decode"], action="append", help="run only these")
    parser.add_argument("--markdown", type=Path, help="also write the results as Markdown here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    only = set(args.only or ["tiny", "jpeg", "decode"])

    print("building datasets (cached) ...", flush=True)
    tiny = build_tiny_dataset(args.data)
    images = build_image_dataset(args.data)
    tiny_bytes, image_bytes = dataset_bytes(tiny), dataset_bytes(images)
    print(
        f"  tiny: {len(tiny)} shards, {tiny_bytes / 1e6:.1f} MB; images: {len(images)} shards, "
        f"{image_bytes / 1e6:.1f} MB"
    )

    out = [
        "# bench_tar_read: shardstream vs webdataset 1.0.2, local shards",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {machine_line()}",
        f"- command: `.venv/bin/python benchmarks/bench_tar_read.py --rounds {args.rounds}`",
        f"- datasets: tiny = 100,000 x ~100 B in 10 shards ({tiny_bytes / 1e6:.1f} MB); "
        f"images = 2,000 x 256x256 JPEG + cls in 8 shards ({image_bytes / 1e6:.1f} MB)",
        "- both sides alternate every round on the same files (page cache warm); best round shown",
        "",
    ]
    if "tiny" in only:
        print("raw iteration, tiny samples:", flush=True)
        sides = run_alternating(raw_cases(tiny), rounds=args.rounds, nbytes=tiny_bytes, expect=100_000)
        out += summarize("Raw iteration, 100,000 tiny samples", sides, 10.0, tiny_bytes)
    if "jpeg" in only:
        print("raw iteration, JPEG shards:", flush=True)
        sides = run_alternating(raw_cases(images), rounds=args.rounds, nbytes=image_bytes, expect=2_000)
        out += summarize("Raw iteration, 2,000 JPEG samples", sides, 4.0, image_bytes)
    if "decode" in only:
        print(f"decode rgb8 + to_tuple through a DataLoader, {args.workers} workers:", flush=True)
        sides = run_alternating(
            decode_cases(images, args.workers), rounds=args.rounds, nbytes=image_bytes, expect=2_000
        )
        out += summarize(
            f'`.decode("rgb8").to_tuple("jpg","cls")`, WebLoader {args.workers} workers, batch {BATCH}',
            sides,
            1.5,
            image_bytes,
        )
        print(f"decode rgb8 + to_tuple through a plain torch DataLoader, {args.workers} workers:", flush=True)
        sides = run_alternating(
            plain_loader_cases(images, args.workers), rounds=args.rounds, nbytes=image_bytes, expect=2_000
        )
        out += summarize(
            f'`.decode("rgb8").to_tuple("jpg","cls")`, plain torch DataLoader {args.workers} workers, '
            f"batch {BATCH}",
            sides,
            1.5,
            image_bytes,
        )
    emit_report(out, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
