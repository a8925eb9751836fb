"""bench_worker_start: what each way of starting DataLoader workers costs, to the first batch.

WebLoader forks its workers when no other thread runs in the process and starts them from
shardstream's forkserver otherwise (``loader/_start.py``): a process started once per parent,
with torch and shardstream imported, that forks workers from a single thread. This measures,
alternately in one run on the same shards (2 workers, ``decode("rgb8")``, batches of 16), the
time from ``iter(loader)`` to the first batch and to the end of the epoch for:

* **fork**: the fast path (no other thread running);
* **shardstream forkserver, warm**: the server already runs (every start after the first);
* **shardstream forkserver, cold**: the server is started by this ``iter()`` (the first start of a
  process; WebLoader starts it when it is built if threads already run, overlapping the imports
  with the caller's own work);
* **stdlib forkserver** (``multiprocessing_context="forkserver"``) and **spawn**: each worker
  imports torch itself;
* **persistent workers, 2nd epoch** (shardstream forkserver): no start at all;
* the peer, **webdataset 1.0.2** ``WebLoader`` with torch's default (fork).

    .venv/bin/python benchmarks/bench_worker_start.py [--rounds 5] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import build_image_dataset, emit_report, machine_line  # noqa: E402

BATCH = 16


def _pipeline(urls: list[str]) -> Any:
    import shardstream as ss

    return ss.ShardStream(urls).decode("rgb8").to_tuple("jpg", "cls").batched(BATCH)


def _epoch(make: Callable[[], Any], *, epochs: int = 1) -> tuple[float, float]:
    """(seconds to the first batch, seconds to the end) of the last of ``epochs`` epochs."""
    loader = make()
    try:
        for _ in range(epochs - 1):
            for _batch in loader:
                pass
        start = time.perf_counter()
        first = None
        for _batch in loader:
            if first is None:
                first = time.perf_counter() - start
        return (first or 0.0), time.perf_counter() - start
    finally:
        close = getattr(loader, "close", None)
        if close is not None:
            close()


def contenders(urls: list[str]) -> dict[str, Callable[[], tuple[float, float]]]:
    import torch.utils.data as tud
    import webdataset

    import shardstream as ss
    from shardstream.loader import _start

    def ss_loader(method: str, **kw: Any) -> Callable[[], Any]:
        def make() -> Any:
            os.environ["SHARDSTREAM_WORKER_START"] = method
            return ss.WebLoader(_pipeline(urls), batch_size=None, num_workers=2, **kw)

        return make

    def cold() -> tuple[float, float]:
        _start.stop_server()
        return _epoch(ss_loader("forkserver"))

    def wds() -> Any:
        dataset = webdataset.WebDataset(urls, shardshuffle=False, nodesplitter=webdataset.split_by_node)
        return webdataset.WebLoader(
            dataset.decode("rgb8").to_tuple("jpg", "cls").batched(BATCH), batch_size=None, num_workers=2
        )

    def plain(context: str) -> Callable[[], Any]:
        return lambda: tud.DataLoader(
            _pipeline(urls), batch_size=None, num_workers=2, multiprocessing_context=context
        )

    return {
        "fork (shardstream, no other thread)": lambda: _epoch(ss_loader("fork")),
        "shardstream forkserver, warm": lambda: _epoch(ss_loader("forkserver")),
        "shardstream forkserver, cold (server start included)": cold,
        "stdlib forkserver (no preload)": lambda: _epoch(plain("forkserver")),
        "spawn": lambda: _epoch(plain("spawn")),
        "persistent workers, 2nd epoch (shardstream forkserver)": lambda: _epoch(
            ss_loader("forkserver", persistent_workers=True), epochs=2
        ),
        "webdataset 1.0.2 WebLoader (fork)": lambda: _epoch(wds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", type=Path, default=Path("bench-data"))
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    urls = build_image_dataset(args.data, count=256, shards=8, size=64)
    runs = contenders(urls)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for run in runs.values():  # warm-up: imports, page cache, the servers
        run()
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for name in order:
            results[name].append(runs[name]())
            print(f"round {r + 1} {name}: first batch {results[name][-1][0] * 1000:.0f} ms", flush=True)
    fork_first = statistics.median(f for f, _ in results["fork (shardstream, no other thread)"])
    lines = [
        "# bench_worker_start: time from iter() to the first batch, by start method",
        "",
        f"Machine: {machine_line()}. 256 64x64 JPEGs in 8 shards, decode rgb8, batches of {BATCH}, "
        f"2 workers; {args.rounds} alternating rounds after a warm-up; medians (best).",
        "",
        "| start method | first batch, ms | whole epoch, ms | first batch vs fork |",
        "|---|---:|---:|---:|",
    ]
    for name, values in results.items():
        firsts, totals = [f for f, _ in values], [t for _, t in values]
        lines.append(
            f"| {name} | {statistics.median(firsts) * 1000:.0f} ({min(firsts) * 1000:.0f}) | "
            f"{statistics.median(totals) * 1000:.0f} ({min(totals) * 1000:.0f}) | "
            f"{statistics.median(firsts) / fork_first:.2f}x |"
        )
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
