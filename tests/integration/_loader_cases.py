"""Pipelines for the ss.Loader tests; run as a script, restores states in a fresh process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import shardstream as ss

COUNTS = [9, 14, 11, 17, 12, 20]


def write_shards(root: Path) -> list[str]:
    urls = []
    for s, n in enumerate(COUNTS):
        with ss.ShardWriter(str(root / f"part{s}-%02d.tar"), maxcount=1000) as sink:
            for i in range(n):
                sink.write({"__key__": f"s{s}_{i:03d}", "cls": i, "txt": f"sample {s} {i}"})
        urls.append(str(root / f"part{s}-00.tar"))
    return urls


def _odd_only(sample: dict[str, Any]) -> dict[str, Any] | None:
    return sample if sample["cls"] % 5 else None  # drops every fifth sample (select-like)


def pipeline(case: str, urls: list[str]) -> Any:
    if case == "shuffled":  # shuffle buffer before the per-sample stages, a dropping map after
        return ss.Dataset(urls, seed=3).shuffle(20).decode().map(_odd_only).to_tuple("__key__", "cls")
    if case == "equal":  # the epoch planner: every rank the same number of batches
        ds = ss.Dataset(urls, seed=5, split=ss.SplitPolicy("equal", batch_size=4))
        return ds.decode().to_tuple("__key__", "cls")
    if case == "webdataset":
        return ss.WebDataset(urls, shardshuffle=True, seed=7).shuffle(10).decode().to_tuple("__key__", "cls")
    raise ValueError(case)


def make(case: str, urls: list[str], num_threads: int = 1, num_workers: int = 0) -> ss.Loader:
    return ss.Loader(pipeline(case, urls), batch_size=4, num_threads=num_threads, num_workers=num_workers)


def keys(batch: Any) -> list[str]:
    return list(batch[0])


if __name__ == "__main__":
    job = json.loads(Path(sys.argv[1]).read_text())
    out = []
    for run in job["runs"]:
        with make(run["case"], job["urls"], run["num_threads"], run["num_workers"]) as loader:
            loader.load_state_dict(run["state"])
            out.append([keys(b) for b in loader])
    Path(sys.argv[2]).write_text(json.dumps(out))
