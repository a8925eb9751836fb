"""bench_resume: time to the first batch after resuming mid-epoch, against a fresh start and replay.

A training run restarted from a checkpoint needs the loader back at the same sample. Three ways:

* **fresh**: start the epoch over (what WebDataset does; samples repeat) — the floor to beat;
* **replay**: start the epoch over and iterate-and-discard up to the saved point (the usual
  workaround: exact, but costs reading everything before the cursor);
* **shardstream resume**: ``WebLoader.load_state_dict(state)``: shards before the cursor are not
  opened, the shard in progress is opened at the saved byte offset, and a shuffle buffer is
  refilled by one forward read per shard it holds samples of, from the first saved offset in
  that shard (a buffer of 1,000 samples from a few shards costs a few reads, not 1,000).

Measured at 10%, 50% and 90% of an epoch, local shards (page cache warm) and the same shards on
a local SeaweedFS S3 server (``--s3``, ranged GETs), with ``num_workers`` 0 and 2; plus the
state's size (JSON bytes) and the cost of ``state_dict()``. Targets (issue 11):
resume at 90% no slower than a fresh start plus one shard open; state at most 4 KiB without a
shuffle buffer.

    .venv/bin/python benchmarks/bench_resume.py [--rounds 3] [--s3] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import build_tiny_dataset, emit_report, machine_line  # noqa: E402

BATCH = 64
BUFFER = 1000


OPTIONS: dict[str, Any] = {}  # storage options of the S3 run


def _loader(urls: list[str], workers: int, shuffle: bool) -> Any:
    import shardstream as ss

    ds = ss.ShardStream(urls, seed=1, storage_options=OPTIONS or None)
    if shuffle:
        ds = ds.shuffle(BUFFER)
    return ss.WebLoader(ds.to_tuple("__key__", "txt").batched(BATCH), batch_size=None, num_workers=workers)


def _state_at(urls: list[str], workers: int, shuffle: bool, batches: int) -> dict[str, Any]:
    loader = _loader(urls, workers, shuffle)
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state: dict[str, Any] = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    return state


def _first_batch(urls: list[str], workers: int, shuffle: bool, *, state: Any = None, skip: int = 0) -> float:
    loader = _loader(urls, workers, shuffle)
    start = time.perf_counter()
    if state is not None:
        loader.load_state_dict(state)
    it = iter(loader)
    for _ in range(skip):  # the replay approach: read and discard up to the saved point
        next(it)
    next(it)
    elapsed = time.perf_counter() - start
    loader.close()
    return elapsed


def _state_dict_cost(urls: list[str], workers: int, shuffle: bool) -> float:
    loader = _loader(urls, workers, shuffle)
    it = iter(loader)
    for _ in range(20):
        next(it)
    times = []
    for _ in range(200):
        t = time.perf_counter()
        loader.state_dict()
        times.append(time.perf_counter() - t)
    loader.close()
    return statistics.median(times)


def _tables(urls: list[str], per_epoch: int, rounds: int, where: str) -> list[str]:
    lines: list[str] = []
    for workers in (0, 2):
        for shuffle in (True, False):
            buffer = f"shuffle buffer {BUFFER}" if shuffle else "no shuffle buffer"
            lines += [
                f"### {where}, num_workers={workers}, {buffer}",
                "",
                "| resume point | fresh start | replay | shardstream resume | resume / fresh "
                "| replay / resume | state bytes |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            for fraction in (0.1, 0.5, 0.9):
                at = int(per_epoch * fraction)
                state = _state_at(urls, workers, shuffle, at)
                fresh = min(_first_batch(urls, workers, shuffle) for _ in range(rounds))
                replay = min(_first_batch(urls, workers, shuffle, skip=at) for _ in range(rounds))
                resume = min(_first_batch(urls, workers, shuffle, state=state) for _ in range(rounds))
                size = len(json.dumps(state))
                lines.append(
                    f"| {fraction:.0%} (batch {at}) | {fresh:.3f} | {replay:.3f} | {resume:.3f} | "
                    f"{resume / fresh:.2f}x | {replay / resume:.1f}x | {size:,} |"
                )
                print(lines[-1], flush=True)
            cost = _state_dict_cost(urls, workers, shuffle)
            lines += ["", f"`state_dict()` median cost: {cost * 1e6:.0f} µs", ""]
    return lines


def _elastic(urls: list[str], per_epoch: int, rounds: int, where: str) -> list[str]:
    """Resume at 90% with another num_workers: the saved positions are re-split (elastic)."""
    at = int(per_epoch * 0.9)
    lines = [
        f"### {where}, elastic: resumed at 90% (batch {at}) with another `num_workers`",
        "",
        "| workers before -> after | buffer | fresh start (after) | elastic resume | resume / fresh |",
        "|---|---|---:|---:|---:|",
    ]
    for shuffle in (False, True):
        for before, after in ((2, 1), (2, 3)):
            state = _state_at(urls, before, shuffle, at)
            fresh = min(_first_batch(urls, after, shuffle) for _ in range(rounds))
            resume = min(_first_batch(urls, after, shuffle, state=state) for _ in range(rounds))
            buffer = str(BUFFER) if shuffle else "none"
            lines.append(
                f"| {before} -> {after} | {buffer} | {fresh:.3f} | {resume:.3f} | {resume / fresh:.2f}x |"
            )
            print(lines[-1], flush=True)
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--s3", action="store_true", help="also from a local SeaweedFS S3 server")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    root = Path(tempfile.gettempdir()) / "shardstream-bench"
    urls = build_tiny_dataset(root / f"resume-{args.samples}-{args.shards}", args.samples, args.shards)
    per_epoch = args.samples // BATCH

    lines = [
        "# bench_resume: time to the first batch after resuming mid-epoch",
        "",
        f"- date: {time.strftime('%Y-%m-%d')}",
        f"- machine: {machine_line()}",
        f"- command: `.venv/bin/python benchmarks/bench_resume.py --rounds {args.rounds}"
        f"{' --s3' if args.s3 else ''}`",
        f"- dataset: {args.samples:,} tiny samples in {args.shards} shards; "
        f"`ShardStream(urls).shuffle({BUFFER}).to_tuple(...).batched({BATCH})` through `WebLoader`; "
        f"{per_epoch} batches per epoch; best of {args.rounds} rounds (seconds to the first batch)",
        "",
    ]
    lines += _tables(urls, per_epoch, args.rounds, "local disk")
    lines += _elastic(urls, per_epoch, args.rounds, "local disk")
    if args.s3:
        from shardstream.testing.seaweed import SeaweedS3

        with tempfile.TemporaryDirectory(prefix="seaweed-") as data, SeaweedS3(Path(data)) as server:
            server.create_bucket("resume")
            s3_urls = [server.upload_file(u, "resume", Path(u).name) for u in urls]
            OPTIONS.update(server.storage_options)
            lines += [
                "S3: a local SeaweedFS on the same 2 cores (its CPU competes with the loader's); the "
                "shard in progress is opened with a ranged GET at the saved offset.",
                "",
            ]
            lines += _tables(s3_urls, per_epoch, args.rounds, "S3 (SeaweedFS)")
            lines += _elastic(s3_urls, per_epoch, args.rounds, "S3 (SeaweedFS)")
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
