"""Pipelines, loaders and faults for the healing tests; run as a script, restores states in a
fresh process (``{"urls", "runs": [{"case", "loader", "num_workers", "state"}]}`` -> the keys
of each restored run's batches)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import _resume_cases

import shardstream as ss

COUNTS = [9, 14, 11, 17, 12, 20]  # 83 samples
CASES = ("plain", "shuffled", "mix", "resampled", "exact")
LOADERS = ("ss.Loader", "WebLoader")


def write_shards(root: Path) -> list[str]:
    return _resume_cases.write_shards(root, COUNTS)


class Fault:
    """A map stage that ends its own worker process the way the kernel or a hung store would:
    ``"SIGKILL"`` or ``"SIGSTOP"`` (a stall) when DataLoader worker ``worker`` makes its ``at``-th
    sample (counted in that process), once per ``at``: a marker file in ``markers`` says it was
    done, so the replacement goes on. ``markers=None``: every time (a poison sample)."""

    def __init__(self, how: str, markers: str | None, at: tuple[int, ...] = (30,), worker: int = 1) -> None:
        self.how, self.markers, self.at, self.worker = how, markers, at, worker
        self.count = 0

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        import torch.utils.data

        info = torch.utils.data.get_worker_info()
        if info is None or info.id != self.worker:
            return sample
        self.count += 1
        if self.count in self.at:
            if self.markers is not None:
                try:
                    os.close(os.open(os.path.join(self.markers, f"{self.count}"), os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    return sample
            os.kill(os.getpid(), getattr(signal, self.how))
        return sample


class PoisonKey:
    """A map stage that kills (or stops) whatever process makes the sample ``key``, every time."""

    def __init__(self, key: str, how: str = "SIGKILL") -> None:
        self.key, self.how = key, how

    def __call__(self, sample: Any) -> Any:
        key = sample[0] if isinstance(sample, tuple) else sample["__key__"]
        if key == self.key:
            os.kill(os.getpid(), getattr(signal, self.how))
        return sample


def pipeline(case: str, urls: list[str], fault: Any = None, world: Any = None, batch: int = 4) -> Any:
    """``fault`` (a map stage, or None) runs on the raw samples, before any buffer; ``world`` and
    ``batch``: the rank and the batch size a ``split="equal"`` run plans for (default: detected, 4)."""

    def faulty(ds: Any) -> Any:
        return ds.map(fault) if fault is not None else ds.map(_same)

    if case == "plain":
        return faulty(ss.ShardStream(urls, shuffle_shards=False)).to_tuple("__key__", "cls")
    if case == "shuffled":
        return faulty(ss.ShardStream(urls, seed=3)).shuffle(20).decode().to_tuple("__key__", "cls")
    if case == "resampled":  # shards drawn with replacement, 40 samples per worker and epoch
        ds = ss.ShardStream(urls, seed=3, split="resampled")
        return faulty(ds).shuffle(10).decode().to_tuple("__key__", "cls").with_epoch(40)
    if case == "mix":
        sources = [
            faulty(ss.ShardStream(urls[:3], seed=3)).decode(),
            ss.ShardStream(urls[3:], seed=4).shuffle(10).decode(),
        ]
        return ss.Mix(sources, weights=[0.6, 0.4], stop="all_exhausted", seed=1).to_tuple("__key__", "cls")
    if case in ("equal", "exact"):  # every rank the same number of batches (under torch.distributed)
        ds = ss.ShardStream(urls, seed=5, world=world, split=ss.SplitPolicy(case, batch_size=batch))
        return faulty(ds).decode().to_tuple("__key__", "cls")
    raise ValueError(case)


def _same(sample: dict[str, Any]) -> dict[str, Any]:
    """The fault's place in a run without a fault (the stages, hence the state's fingerprint, match)."""
    return sample


def make(
    case: str,
    urls: list[str],
    loader: str,
    fault: Any = None,
    num_workers: int = 2,
    world: Any = None,
    batch: int = 4,
    **kw: Any,
) -> Any:
    ds = pipeline(case, urls, fault, world, batch)
    if loader == "ss.Loader":
        return ss.Loader(ds, batch_size=batch, num_workers=num_workers, **kw)
    return ss.WebLoader(ds, batch_size=batch, num_workers=num_workers, **kw)


def keys(batch: Any) -> list[str]:
    return list(batch[0])


if __name__ == "__main__":
    job = json.loads(Path(sys.argv[1]).read_text())
    out = []
    for run in job["runs"]:
        loader = make(run["case"], job["urls"], run["loader"], num_workers=run["num_workers"])
        loader.load_state_dict(run["state"])
        out.append([keys(b) for b in loader])
        loader.close()
    Path(sys.argv[2]).write_text(json.dumps(out))
