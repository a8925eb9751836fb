"""Pipelines that exercise every built-in stage, for the save/restore contract suite.

Each case builds a fresh pipeline over the shards in ``root`` (made by :func:`write_shards`).
The contract test runs a case uninterrupted, saves its state after several prefixes, and
restores each state in a fresh process (``python _stage_cases.py``), which must continue with
exactly the rest of the uninterrupted output.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import shardstream as ss
import shardstream.compat.tariterators as tariterators
from shardstream.readers import ShardShuffle
from shardstream.shards.world import World

SHARD_COUNTS = [7, 3, 11, 5, 9, 6]


def write_shards(root: Path) -> None:
    """Shards of uneven size (and a gzipped one) with an index, written by our own writer."""
    for s, n in enumerate(SHARD_COUNTS):
        suffix = ".tar.gz" if s == 3 else ".tar"
        with ss.ShardWriter(str(root / f"part{s}-%02d{suffix}"), maxcount=1000) as sink:
            for i in range(n):
                sink.write({"__key__": f"s{s}_{i:03d}", "txt": f"text {s} {i}", "cls": s * 100 + i})
    objects = root / "objects"  # the same kind of samples as single objects ({key}.{ext} files)
    objects.mkdir(exist_ok=True)
    for i in range(23):
        (objects / f"o{i:03d}.txt").write_text(f"object {i}")
        (objects / f"o{i:03d}.cls").write_text(str(i))


def urls(root: Path) -> list[str]:
    return sorted(str(p) for p in root.iterdir() if ".tar" in p.name)


def _plain_double(src: Any) -> Any:
    """A WebDataset-style plain function stage (cannot save state: the pipeline replays)."""
    for sample in src:
        yield {**sample, "cls": sample["cls"] * 2}


def _reader(root: Path) -> list[Any]:
    return [ss.SimpleShardList(urls(root)), ss.ReadShards()]


def _base(root: Path, *stages: Any, **kw: Any) -> ss.DataPipeline:
    return ss.DataPipeline(*_reader(root), *stages, **kw)


CASES: dict[str, Callable[[Path], ss.DataPipeline]] = {
    "objects": lambda r: ss.ObjectStream(str(r / "objects"), seed=4),
    "objects+equal+shuffle": lambda r: ss.ObjectStream(
        str(r / "objects"), seed=4, split="equal", batch_size=2
    ).shuffle(5),
    "read": lambda r: _base(r),
    "read+gzip-only": lambda r: ss.DataPipeline(
        ss.SimpleShardList([u for u in urls(r) if u.endswith(".gz")]), ss.ReadShards()
    ),
    "shard_shuffle": lambda r: ss.DataPipeline(
        ss.SimpleShardList(urls(r)), ShardShuffle(), ss.ReadShards(), seed=5
    ),
    "seeded_shard_list": lambda r: ss.DataPipeline(ss.SimpleShardList(urls(r), seed=3), ss.ReadShards()),
    "split_by_node": lambda r: ss.DataPipeline(
        ss.SimpleShardList(urls(r)), ss.split_by_node, ss.ReadShards(), world=World(1, 2)
    ),
    "split_by_worker": lambda r: ss.DataPipeline(
        ss.SimpleShardList(urls(r)), ss.split_by_worker, ss.ReadShards()
    ),
    "resampled_shards": lambda r: ss.DataPipeline(
        ss.ResampledShards(urls(r), nshards=9, seed=1), ss.ReadShards()
    ),
    "resampled_stage": lambda r: ss.DataPipeline(
        ss.SimpleShardList(urls(r)), ss.resampled(5), ss.ReadShards(), seed=6
    ),
    "tarfile_to_samples": lambda r: ss.DataPipeline(
        ss.SimpleShardList(urls(r)), tariterators.tarfile_to_samples()
    ),
    "planned_equal_shard": lambda r: ss.DataPipeline(
        ss.PlannedSamples(urls(r), mode="equal", batch_size=4), world=World(0, 2)
    ),
    "planned_equal_sample": lambda r: ss.DataPipeline(
        ss.PlannedSamples(urls(r), mode="equal", granularity="sample", batch_size=3), world=World(1, 3)
    ),
    "planned_exact": lambda r: ss.DataPipeline(
        ss.PlannedSamples(urls(r), mode="exact", batch_size=4), world=World(1, 2)
    ),
    "planned_resampled": lambda r: ss.DataPipeline(
        ss.PlannedSamples(urls(r), mode="resampled", epoch_size=25), world=World(0, 2)
    ),
    "dataset_equal": lambda r: (
        ss.ShardStream(urls(r), split=ss.SplitPolicy("equal", batch_size=2), seed=9)
        .decode()
        .to_tuple("txt", "cls")
    ),
    "dataset_shards": lambda r: ss.ShardStream(urls(r), seed=2).shuffle(10).decode(),
    "webdataset": lambda r: (
        ss.WebDataset(urls(r), shardshuffle=True, seed=4).shuffle(8).decode().to_tuple("txt", "cls")
    ),
    "shuffle": lambda r: _base(r, ss.shuffle(10, initial=4), seed=7),
    "shuffle_big_buffer": lambda r: _base(r, ss.shuffle(1000), seed=7),
    "detshuffle": lambda r: _base(r, ss.detshuffle(6, 3, seed=11)),
    "decode": lambda r: _base(r, ss.decode()),
    "map": lambda r: _base(r, ss.map(lambda s: None if s["__key__"].endswith("3") else {**s, "n": 1})),
    "map_dict": lambda r: _base(r, ss.decode(), ss.map_dict(cls=lambda c: c + 1)),
    "to_tuple+map_tuple": lambda r: _base(
        r, ss.decode(), ss.to_tuple("txt", "cls"), ss.map_tuple(str.upper, None)
    ),
    "select": lambda r: _base(r, ss.decode(), ss.select(lambda s: s["cls"] % 2 == 0)),
    "rename": lambda r: _base(r, ss.rename(label="cls", keep=False)),
    "rename_keys": lambda r: _base(r, ss.rename_keys(label="cls", text="txt")),
    "extract_keys": lambda r: _base(r, ss.extract_keys("txt", "cls")),
    "xdecode": lambda r: _base(r, ss.xdecode(cls=lambda s: int(s.read()), txt=lambda s: s.read().decode())),
    "associate": lambda r: _base(r, ss.associate(lambda key: {"extra": key.upper()})),
    "info": lambda r: _base(r, ss.info(n=2)),
    "rsample": lambda r: _base(r, ss.rsample(0.6), seed=3),
    "slice": lambda r: _base(r, ss.slice(2, 30, 3)),
    "non_empty": lambda r: _base(r, ss.non_empty),
    "batched": lambda r: _base(r, ss.decode(), ss.to_tuple("txt", "cls"), ss.batched(4)),
    "listed": lambda r: _base(r, ss.listed(5)),
    "batched+unbatched": lambda r: _base(
        r, ss.decode(), ss.to_tuple("txt", "cls"), ss.batched(4), ss.unbatched()
    ),
    "listed+unlisted": lambda r: _base(r, ss.listed(6), ss.unlisted()),
    "shuffle+batched+shuffle": lambda r: _base(r, ss.shuffle(8), ss.listed(3), ss.shuffle(4), seed=1),
    "nested_pipeline": lambda r: ss.DataPipeline(_base(r, ss.decode()), ss.map(lambda s: s["cls"])),
    "with_epoch": lambda r: _base(r, ss.shuffle(5), seed=2).with_epoch(17),
    "repeat": lambda r: _base(r, ss.listed(7)).repeat(2),
    "mix_all_exhausted+shuffle": lambda r: ss.Mix(
        [ss.ShardStream(urls(r)[:2], seed=1), ss.ShardStream(urls(r)[2:3], seed=2).shuffle(3)],
        weights=[0.4, 0.6],
        stop="all_exhausted",
        seed=5,
    ).shuffle(6),
    "mix_equal_first_exhausted": lambda r: ss.Mix(
        [
            ss.ShardStream(
                urls(r)[:3], split=ss.SplitPolicy("equal", batch_size=2), seed=s, world=World(1, 2)
            )
            for s in (3, 4)
        ]
        + [ss.ShardStream(urls(r)[3:], split=ss.SplitPolicy("equal", batch_size=2), seed=5)],
        weights=[0.5, 0.3, 0.2],
    ).decode(),
    "random_mix": lambda r: ss.RandomMix(
        [ss.ShardStream(urls(r)[:3], seed=1), ss.ShardStream(urls(r)[3:], seed=2)],
        probs=[1, 2],
        longest=True,
        seed=3,
    ),
    "round_robin": lambda r: ss.RoundRobin([ss.ShardStream(urls(r)[:2]), ss.ShardStream(urls(r)[2:])]),
    "plain_function_replays": lambda r: _base(r, ss.decode(), _plain_double),
    "cached_replays": lambda r: _base(r, ss.Cached()),
}

#: Cases whose state cannot be saved by position: the pipeline saves a replay count instead.
REPLAY_CASES = {"plain_function_replays", "cached_replays"}

#: Cases whose saved state spans two iter() calls (windows over a continuing stream).
WINDOWED = {"with_epoch"}


def canon(item: Any) -> Any:
    """A JSON-comparable form of an item (dict keys sorted, bytes and arrays as lists)."""
    if isinstance(item, dict):
        return {k: canon(v) for k, v in sorted(item.items())}
    if isinstance(item, (list, tuple)):
        return [canon(v) for v in item]
    if isinstance(item, np.ndarray):
        return item.tolist()
    if isinstance(item, np.generic):
        return item.item()
    if isinstance(item, bytes):
        return item.decode("latin-1")
    return item


def run_epochs(case: str, root: Path, epochs: int = 2) -> list[list[Any]]:
    """The uninterrupted output of ``epochs`` iterations (epochs, or windows)."""
    pipeline = CASES[case](root)
    return [[canon(x) for x in pipeline] for _ in range(epochs)]


def save_after(case: str, root: Path, epoch: int, k: int) -> dict[str, Any]:
    """The state after ``k`` items of iteration ``epoch`` (earlier iterations run fully)."""
    pipeline = CASES[case](root)
    for _ in range(epoch):
        for _ in pipeline:
            pass
    it = iter(pipeline)
    for _ in range(k):
        next(it)
    state: dict[str, Any] = json.loads(json.dumps(pipeline.state_dict()))  # plain data only
    if hasattr(it, "close"):
        it.close()
    return state


def restore(case: str, root: Path, state: dict[str, Any]) -> list[Any]:
    """The rest of the interrupted iteration, after loading ``state`` into a new pipeline."""
    pipeline = CASES[case](root)
    pipeline.load_state_dict(state)
    return [canon(x) for x in pipeline]


if __name__ == "__main__":
    # Child process: restore every state in the job file, write what each continued with.
    job = json.loads(Path(sys.argv[1]).read_text())
    results = [restore(j["case"], Path(job["root"]), j["state"]) for j in job["jobs"]]
    Path(sys.argv[2]).write_text(json.dumps(results))
