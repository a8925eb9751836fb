"""bench_loader: ss.Loader (threads, processes) against the decode-only ceiling and the peers.

2,000 256x256 JPEGs decoded to RGB arrays, batches of 32, on this machine's cores. Cases, each
run once per round in alternating order (``--rounds``), every pass reading the whole dataset:

* **ceiling**: the JPEGs already in memory, decoded by 2 forked processes with no pipeline;
* **webdataset 1.0.2 + DataLoader(2 workers)**: its pipeline with the same decoder as ours;
* **shardstream WebLoader(2 workers)**: today's torch DataLoader path;
* **ss.Loader, threads**: one process, ``num_threads`` threads for the per-sample stages;
* **ss.Loader, processes**: 2 worker processes (persistent, as the default).

Both libraries decode with the same function (``--decoder simplejpeg`` or ``pillow``), applied
as a ``map_dict`` on the raw ``jpg`` bytes, so the differences are the engines. Reported: samples
per second (median of rounds) and its share of the ceiling, the ratio to webdataset, time from
``iter()`` to the first batch, and the peak RSS of the whole process tree (sampled every 20 ms).

    .venv/bin/python benchmarks/bench_loader.py [--rounds 3] [--decoder simplejpeg|pillow] [--markdown F]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import build_image_dataset, emit_report, machine_line  # noqa: E402

BATCH = 32
COUNT = 2_000


def _decoder(name: str) -> Callable[[bytes], Any]:
    if name == "simplejpeg":
        import simplejpeg

        decode_jpeg = simplejpeg.decode_jpeg
        return lambda data: decode_jpeg(bytes(data), colorspace="RGB")
    import numpy as np
    from PIL import Image

    return lambda data: np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


class TreeRss:
    """Peak resident memory of this process plus its children, sampled every 20 ms."""

    def __init__(self) -> None:
        import psutil

        self.me = psutil.Process()
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        while not self.stop.wait(0.02):
            total = 0
            try:
                procs = [self.me, *self.me.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> TreeRss:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


class Case:
    """A loader made once per round; a pass iterates it once (workers persist between passes)."""

    def __init__(self, name: str, make: Callable[[], Any]) -> None:
        self.name, self.make = name, make
        self.rates: list[float] = []
        self.first: list[float] = []
        self.rss: list[int] = []

    def round(self, passes: int) -> None:
        with TreeRss() as rss:
            loader = self.make()
            try:
                for _ in range(passes):
                    t0 = time.perf_counter()
                    n, first = 0, None
                    for batch in loader:
                        if first is None:
                            first = time.perf_counter() - t0
                        n += len(batch[1])
                    wall = time.perf_counter() - t0
                    if n != COUNT:
                        raise RuntimeError(f"{self.name} yielded {n} samples, expected {COUNT}")
                    self.rates.append(n / wall)
                    self.first.append(first or 0.0)
            finally:
                close = getattr(loader, "close", None)
                if close is not None:
                    close()
        self.rss.append(rss.peak)


def cases(urls: list[str], decode: Callable[[bytes], Any], threads: int) -> list[Case]:
    import webdataset
    from torch.utils.data import DataLoader

    import shardstream as ss

    def ours() -> Any:
        return ss.Dataset(urls, shuffle_shards=False).map_dict(jpg=decode).to_tuple("jpg", "cls")

    def theirs() -> Any:
        return webdataset.WebDataset(urls, shardshuffle=False).map_dict(jpg=decode).to_tuple("jpg", "cls")

    two = {"batch_size": BATCH, "num_workers": 2, "persistent_workers": True}
    return [
        Case("webdataset 1.0.2 + DataLoader(2 workers)", lambda: DataLoader(theirs(), **two)),
        Case("shardstream WebLoader(2 workers)", lambda: ss.WebLoader(ours(), **two)),
        Case(
            f"ss.Loader, {threads} threads", lambda: ss.Loader(ours(), batch_size=BATCH, num_threads=threads)
        ),
        Case("ss.Loader, 2 processes", lambda: ss.Loader(ours(), batch_size=BATCH, num_workers=2)),
    ]


def ceiling_rate(urls: list[str], decoder: str) -> float:
    """Samples/s of 2 forked processes decoding the in-memory JPEGs (best of 3 passes)."""
    import multiprocessing

    from _ceiling import load_jpegs

    jpegs = load_jpegs(urls)

    def work(part: list[bytes], out: Any) -> None:
        decode = _decoder(decoder)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for data in part:
                decode(data)
            best = min(best, time.perf_counter() - t0)
        out.put(best)

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=work, args=(jpegs[i::2], out)) for i in range(2)]
    for p in procs:
        p.start()
    times = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return len(jpegs) / max(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("bench-data"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=2, help="passes per round (the first counts too)")
    parser.add_argument("--threads", type=int, default=2, help="num_threads of the thread-mode loader")
    parser.add_argument("--decoder", choices=["simplejpeg", "pillow"], default="simplejpeg")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    urls = build_image_dataset(args.data)
    decode = _decoder(args.decoder)
    all_cases = cases(urls, decode, args.threads)
    ceilings = []
    for r in range(args.rounds):
        ceilings.append(ceiling_rate(urls, args.decoder))
        print(f"round {r + 1} ceiling {ceilings[-1]:,.0f} samples/s", flush=True)
        for case in all_cases if r % 2 == 0 else all_cases[::-1]:
            case.round(args.passes)
            print(
                f"round {r + 1} {case.name:<42} "
                f"{statistics.median(case.rates[-args.passes :]):8,.0f} samples/s",
                flush=True,
            )
    ceiling = statistics.median(ceilings)
    peer = all_cases[0]
    peer_rate = statistics.median(peer.rates)
    lines = [
        f"# bench_loader: {COUNT:,} 256x256 JPEGs, {args.decoder} on both sides, batch {BATCH}",
        "",
        f"- machine: {machine_line()}",
        "- command: `.venv/bin/python benchmarks/bench_loader.py "
        f"--rounds {args.rounds} --decoder {args.decoder}`",
        f"- {args.rounds} alternating rounds x {args.passes} passes; medians. Ceiling: 2 forked processes "
        f"decoding the JPEGs from memory, no pipeline: {ceiling:,.0f} samples/s (median of rounds)",
        "",
        "| loader | samples/s | share of the ceiling | vs webdataset | first batch, ms "
        "| peak RSS of the tree, MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for case in all_cases:
        rate = statistics.median(case.rates)
        lines.append(
            f"| {case.name} | {rate:,.0f} | {rate / ceiling:.0%} | {rate / peer_rate:.2f}x | "
            f"{1000 * statistics.median(case.first):.0f} | {max(case.rss) / 2**20:,.0f} |"
        )
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
