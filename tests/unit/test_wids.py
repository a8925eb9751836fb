"""shardstream.wids: wids-style code (the wids README's) runs with one changed import.

The index is written by ``shardstream index --wids``; samples have wids' keys (extensions with
their dot, ``__index__``, ``__shard__``, ...); the samplers split and shuffle as wids' do, and a
real 2-worker DataLoader reads every sample once.
"""

from __future__ import annotations

import gc
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import shardstream as ss
from shardstream.cli.__main__ import main
from shardstream.errors import ConfigurationError


@pytest.fixture(autouse=True)
def _collect_dropped_datasets() -> Iterator[None]:
    """Datasets a test drops close their fetch sessions when collected: collect now, so no
    thread or socket of this test outlives it (later tests count threads and sockets)."""
    yield
    gc.collect()


def _dataset(directory: Path, shards: int = 4, per_shard: int = 25) -> list[str]:
    with ss.ShardWriter(str(directory / "train-%06d.tar"), maxcount=per_shard) as sink:
        for i in range(shards * per_shard):
            sink.write({"__key__": f"s{i:05d}", "txt": f"caption {i}", "cls": i % 10, "json": {"i": i}})
    return [str(directory / f"train-{k:06d}.tar") for k in range(shards)]


def test_index_wids_writes_the_wids_format(tmp_path: Path) -> None:
    urls = _dataset(tmp_path)
    assert main(["index", f"{tmp_path}/train-{{000000..000003}}.tar", "--wids"]) == 0
    index = json.loads((tmp_path / "shardindex.json").read_text())
    assert index["__kind__"] == "wids-shard-index-v1" and index["wids_version"] == 1
    assert index["name"] == "train"
    assert [s["url"] for s in index["shardlist"]] == [Path(u).name for u in urls]  # relative to the index
    assert [s["nsamples"] for s in index["shardlist"]] == [25] * 4
    assert all(s["filesize"] == Path(u).stat().st_size for s, u in zip(index["shardlist"], urls, strict=True))
    from shardstream import wids

    with open(tmp_path / "shardindex.json") as f:  # an open index file, its URLs relative to base=
        assert len(wids.ShardListDataset(f, base=str(tmp_path))) == 100
    with pytest.raises(ConfigurationError, match="list of .*dicts"):
        wids.ShardListDataset(urls)  # type: ignore[arg-type]


def test_readme_example_runs_with_one_changed_import(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    from shardstream import wids  # was: import wids

    _dataset(tmp_path)
    assert main(["index", f"{tmp_path}/train-{{000000..000003}}.tar", "--wids"]) == 0
    dataset = wids.ShardListDataset(str(tmp_path / "shardindex.json"))
    sample = dataset[57]
    assert sorted(sample) == [
        ".cls",
        ".json",
        ".txt",
        "__dataset__",
        "__index__",
        "__key__",
        "__shard__",
        "__shardindex__",
    ]
    assert (sample[".txt"], sample[".cls"], sample[".json"]) == ("caption 57", 7, {"i": 57})
    assert (sample["__index__"], sample["__shardindex__"], sample["__dataset__"]) == (57, 7, "train")
    assert sample["__shard__"] == str(tmp_path / "train-000002.tar")

    def make_sample(sample: dict[str, object]) -> tuple[object, object]:
        return sample[".txt"], sample[".cls"]

    dataset.add_transform(make_sample)
    sampler = wids.ChunkedSampler(dataset, chunksize=30, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2)
    captions = [c for batch_captions, _ in loader for c in batch_captions]
    assert sorted(captions) == sorted(f"caption {i}" for i in range(100))
    assert captions != [f"caption {i}" for i in range(100)]  # shuffled within chunks


def test_raw_fields_are_streams_until_a_transformation_decodes_them(tmp_path: Path) -> None:
    from shardstream import wids

    urls = _dataset(tmp_path, shards=2)
    shards = [{"url": u, "nsamples": 25} for u in urls]
    raw = wids.ShardListDataset(shards, transformations=[], dataset_name="mine")
    sample = raw[30]
    assert isinstance(sample[".txt"], io.BytesIO) and sample[".txt"].read() == b"caption 30"
    assert sample["__dataset__"] == "mine"
    decoded = wids.ShardListDataset(shards, transformations=["PIL", lambda s: s[".cls"]])
    assert decoded[30] == 0 and decoded.__getitems__([1, 2, 49]) == [1, 2, 9]


def test_wrong_nsamples_is_named(tmp_path: Path) -> None:
    from shardstream import wids

    urls = _dataset(tmp_path, shards=1)
    with pytest.raises(ConfigurationError, match="says .*train-000000.tar has 30 samples; it has 25"):
        wids.ShardListDataset([{"url": urls[0], "nsamples": 30}])


def test_chunked_samplers_split_and_shuffle_like_wids(tmp_path: Path) -> None:
    from shardstream import wids

    dataset = wids.ShardListDataset([{"url": u, "nsamples": 25} for u in _dataset(tmp_path)])
    plain = wids.ChunkedSampler(dataset, chunksize=10, shuffle=False)
    assert list(plain) == list(range(100)) and len(plain) == 100
    sampler = wids.ChunkedSampler(dataset, chunksize=10, seed=3)
    first, second = list(sampler), list(sampler)  # epoch 0 keeps the chunk order, epoch 1 does not
    assert [min(first[k : k + 10]) for k in range(0, 100, 10)] == list(range(0, 100, 10))
    assert sorted(first) == sorted(second) == list(range(100)) and first != second
    sampler.set_epoch(1)
    assert list(sampler) == second
    ranks = [wids.DistributedChunkedSampler(dataset, num_replicas=3, rank=r, chunksize=7) for r in range(3)]
    parts = [list(r) for r in ranks]
    assert sorted(i for part in parts for i in part) == list(range(100))
    assert [len(r) for r in ranks] == [34, 34, 34] and [len(p) for p in parts] == [34, 34, 32]
    assert all(max(p) - min(p) < 34 for p in parts)  # each rank a contiguous share
    assert sorted(wids.ShardedSampler(dataset)) == list(range(100))
    with pytest.raises(ConfigurationError, match="rank=3 must be in 0..2"):
        wids.DistributedChunkedSampler(dataset, num_replicas=3, rank=3)
