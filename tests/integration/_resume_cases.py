"""Loaders for the resume tests; run as a script, restores states in a fresh process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import shardstream as ss

COUNTS = [7, 10, 13, 16, 19, 22]


def write_shards(root: Path, counts: list[int] = COUNTS, *, text: bool = False) -> list[str]:
    """One shard per entry of ``counts`` (``s{shard}_{i:03d}`` keys, ``cls`` = i, and a ``txt``
    field when ``text``); the loader and mixture case modules use it with their own counts."""
    urls = []
    for s, n in enumerate(counts):
        with ss.ShardWriter(str(root / f"part{s}-%02d.tar"), maxcount=1000) as sink:
            for i in range(n):
                sample: dict[str, Any] = {"__key__": f"s{s}_{i:03d}", "cls": i}
                if text:
                    sample["txt"] = f"sample {s} {i}"
                sink.write(sample)
        urls.append(str(root / f"part{s}-00.tar"))
    return urls


def make(case: str, urls: list[str], num_workers: int) -> ss.WebLoader:
    if case == "shuffled":
        ds: Any = ss.ShardStream(urls, seed=3).shuffle(20).to_tuple("__key__").batched(4)
    elif case == "equal":
        ds = (
            ss.ShardStream(urls, seed=5, split=ss.SplitPolicy("equal", batch_size=4))
            .to_tuple("__key__")
            .batched(4)
        )
    elif case == "webdataset":
        ds = ss.WebDataset(urls, shardshuffle=True, seed=7).shuffle(10).to_tuple("__key__")
        return ss.WebLoader(ds, batch_size=3, num_workers=num_workers)
    else:
        raise ValueError(case)
    return ss.WebLoader(ds, batch_size=None, num_workers=num_workers)


def keys(batch: Any) -> list[str]:
    return list(batch[0])


if __name__ == "__main__":
    job = json.loads(Path(sys.argv[1]).read_text())
    out = []
    for run in job["runs"]:
        loader = make(run["case"], job["urls"], run["num_workers"])
        loader.load_state_dict(run["state"])
        out.append([keys(b) for b in loader])
    Path(sys.argv[2]).write_text(json.dumps(out))
