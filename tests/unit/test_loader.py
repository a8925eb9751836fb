"""WebLoader and worker splitting with a real torch DataLoader and worker processes."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pytest
import torch

import shardstream as wds


def test_two_workers_read_every_sample_once(make_shards) -> None:
    spec, keys = make_shards([5, 6, 7, 8])
    ds = wds.WebDataset(spec).to_tuple("__key__", "cls")
    with wds.WebLoader(ds, batch_size=None, num_workers=2) as loader:
        got = [k for k, _ in loader]
    assert sorted(got) == sorted(keys)


def test_default_collation_batches_numpy_tensors_numbers_strings(make_shards) -> None:
    spec, keys = make_shards([4, 4])
    ds = wds.WebDataset(spec).map(
        lambda s: (
            s["__key__"],
            int(s["cls"]),
            np.full(3, int(s["cls"]), dtype=np.float32),
            torch.tensor([int(s["cls"])]),
        )
    )
    with wds.WebLoader(ds, batch_size=4, num_workers=2) as loader:
        batches = list(loader)
    assert len(batches) == 2
    k, cls, arr, ten = batches[0]
    assert list(k) == keys[:4]  # strings stay a sequence (torch's default_collate)
    assert cls.shape == (4,) and arr.shape == (4, 3) and ten.shape == (4, 1)


def test_fewer_shards_than_workers_leaves_workers_idle_but_an_empty_epoch_raises(
    make_shards, tmp_path
) -> None:
    spec, keys = make_shards([3])
    with wds.WebLoader(wds.WebDataset(spec).to_tuple("__key__"), batch_size=None, num_workers=2) as loader:
        assert [k for (k,) in loader] == keys  # worker 1 is idle, worker 0 reads the shard
    empty = tmp_path / "empty.tar"
    with wds.TarWriter(str(empty)):
        pass
    with wds.WebLoader(wds.WebDataset(str(empty)), batch_size=None, num_workers=2) as loader:
        with pytest.raises(Exception, match="no samples in this epoch"):
            list(loader)


def test_fluent_methods_on_loader_and_epoch_advance(make_shards) -> None:
    spec, keys = make_shards([10, 10, 10, 10])
    ds = wds.WebDataset(spec, shardshuffle=True).to_tuple("__key__", "cls")
    loader = wds.WebLoader(ds, batch_size=None, num_workers=2)
    pipeline = loader.batched(5)
    epochs = [[k for batch in pipeline for k in batch[0]] for _ in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(keys)
    assert epochs[0] != epochs[1]  # the shard order advanced with the epoch in the workers
    loader.close()


def test_close_shuts_down_workers(make_shards) -> None:
    spec, _ = make_shards([50, 50])
    me = psutil.Process(os.getpid())
    before = {p.pid for p in me.children()}  # e.g. a session-wide test server
    loader = wds.WebLoader(wds.WebDataset(spec), batch_size=None, num_workers=2)
    it = iter(loader)
    next(it)
    workers = {p.pid for p in me.children()} - before
    assert len(workers) == 2
    loader.close()
    deadline = time.monotonic() + 10
    while workers & {p.pid for p in me.children()} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workers & {p.pid for p in me.children()}


def test_batches_of_arrays_cross_workers_as_shared_tensors(make_shards) -> None:
    spec, keys = make_shards([8, 8])
    ds = (
        wds.WebDataset(spec)
        .map(lambda s: (np.full((32, 32, 3), int(s["cls"]), dtype=np.uint8), int(s["cls"])))
        .batched(4)
    )
    direct = next(iter(ds))
    assert isinstance(direct[0], np.ndarray) and direct[0].shape == (4, 32, 32, 3)  # main process: numpy
    with wds.WebLoader(ds, batch_size=None, num_workers=2) as loader:
        batches = list(loader)
    assert len(batches) == 4
    for images, labels in batches:
        assert (
            isinstance(images, torch.Tensor)
            and images.dtype == torch.uint8
            and images.shape == (4, 32, 32, 3)
        )
        assert [int(images[i, 0, 0, 0]) for i in range(4)] == labels.tolist()
