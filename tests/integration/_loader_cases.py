"""Pipelines for the ss.Loader tests; run as a script, restores states in a fresh process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import _resume_cases

import shardstream as ss

COUNTS = [9, 14, 11, 17, 12, 20]


def write_shards(root: Path) -> list[str]:
    return _resume_cases.write_shards(root, COUNTS, text=True)


def _odd_only(sample: dict[str, Any]) -> dict[str, Any] | None:
    return sample if sample["cls"] % 5 else None  # drops every fifth sample (select-like)


def pipeline(case: str, urls: list[str]) -> Any:
    if case == "shuffled":  # shuffle buffer before the per-sample stages, a dropping map after
        return ss.ShardStream(urls, seed=3).shuffle(20).decode().map(_odd_only).to_tuple("__key__", "cls")
    if case == "equal":  # the epoch planner: every rank the same number of batches
        ds = ss.ShardStream(urls, seed=5, split=ss.SplitPolicy("equal", batch_size=4))
        return ds.decode().to_tuple("__key__", "cls")
    if case == "webdataset":
        return ss.WebDataset(urls, shardshuffle=True, seed=7).shuffle(10).decode().to_tuple("__key__", "cls")
    raise ValueError(case)


def make(case: str, urls: list[str], num_threads: int = 1, num_workers: int = 0) -> ss.Loader:
    return ss.Loader(pipeline(case, urls), batch_size=4, num_threads=num_threads, num_workers=num_workers)


def keys(batch: Any) -> list[str]:
    return list(batch[0])


def state_after(loader: Any, n: int) -> dict[str, Any]:
    """The loader's state after ``n`` batches, through JSON (as a checkpoint keeps it); closes it."""
    it = iter(loader)
    for _ in range(n):
        next(it)
    state: dict[str, Any] = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    return state


STOPS = ("end", "break", "close", "exception", "garbage")


def stop(how: str, loader: Any, it: Any) -> bool:
    """End an epoch the way a training loop can (one of :data:`STOPS`). Returns False for
    ``garbage``: the caller then drops its own references to both and collects."""
    import pytest

    if how == "end":
        for _ in it:
            pass
    elif how == "break":
        for _ in it:
            break
        it.close()  # what the loop's frame does with the iterator when it ends
    elif how == "exception":
        with pytest.raises(RuntimeError), loader:
            raise RuntimeError("the training step failed")
        return True
    elif how == "garbage":
        return False
    loader.close()
    return True


if __name__ == "__main__":
    job = json.loads(Path(sys.argv[1]).read_text())
    out = []
    for run in job["runs"]:
        with make(run["case"], job["urls"], run["num_threads"], run["num_workers"]) as loader:
            loader.load_state_dict(run["state"])
            out.append([keys(b) for b in loader])
    Path(sys.argv[2]).write_text(json.dumps(out))
