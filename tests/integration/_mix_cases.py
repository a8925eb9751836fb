"""Mixtures for the resume tests; run as a script, restores states in a fresh process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import _resume_cases

import shardstream as ss

COUNTS = [9, 14, 11, 17, 12, 20, 6, 15]
LOADERS = ("web0", "web2", "threads", "processes")


def write_shards(root: Path) -> list[str]:
    return _resume_cases.write_shards(root, COUNTS)


def pipeline(case: str, urls: list[str]) -> Any:
    if case == "shuffled":  # restarts (all_exhausted), a shuffled source, a buffer after the mixture
        sources = [  # per-sample stages inside the sources (on ss.Loader's threads in thread mode)
            ss.ShardStream(urls[:3], seed=3).decode(),
            ss.ShardStream(urls[3:5], seed=4).shuffle(10).decode(),
            ss.ShardStream(urls[5:], seed=5).decode(),
        ]
        mix = ss.Mix(sources, weights=[0.5, 0.3, 0.2], stop="all_exhausted", seed=1)
        return mix.shuffle(20).to_tuple("__key__", "cls")
    if case == "equal":  # planned sources: every rank the same number of batches
        policy = ss.SplitPolicy("equal", batch_size=4)
        sources = [
            ss.ShardStream(urls[:4], seed=5, split=policy),
            ss.ShardStream(urls[4:], seed=6, split=policy),
        ]
        return ss.Mix(sources, weights=[0.6, 0.4]).to_tuple("__key__", "cls")
    raise ValueError(case)


def make(case: str, urls: list[str], loader: str, num_threads: int = 2) -> Any:
    """``loader``: WebLoader with 0 or 2 workers, or ss.Loader with threads or 2 processes."""
    if loader.startswith("web"):
        return ss.WebLoader(pipeline(case, urls).batched(4), batch_size=None, num_workers=int(loader[3:]))
    workers = 2 if loader == "processes" else 0
    return ss.Loader(pipeline(case, urls), batch_size=4, num_threads=num_threads, num_workers=workers)


def keys(batch: Any) -> list[str]:
    return list(batch[0])


if __name__ == "__main__":
    job = json.loads(Path(sys.argv[1]).read_text())
    out = []
    for run in job["runs"]:
        loader = make(run["case"], job["urls"], run["loader"], run["num_threads"])
        loader.load_state_dict(run["state"])
        out.append([keys(b) for b in loader])
        loader.close()
    Path(sys.argv[2]).write_text(json.dumps(out))
