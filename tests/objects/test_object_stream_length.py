"""The length of an ObjectStream under loader workers: ``len(loader)`` is the number of batches
(or items) the loader really yields, with 0, 2 or 3 DataLoader workers (each batching its own
share of the listing, a partial batch per worker), WebLoader and ss.Loader (threads and
processes), every split mode, ranks of an explicit world, and over S3 (SeaweedFS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _components import require_module
from _lengths import check_lengths, count
from _prefix import Prefix

import shardstream as ss
from shardstream.shards.world import World

# 3 workers on a 2-core machine: torch warns about it, the test wants exactly that
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

torch = require_module("torch", "the PyTorch DataLoader and tensor paths")

COUNTS = (5, 11, 16)
#: (split, batch_size of the split's quotas): every n-th sample, whole batches of 2, exact by 3.
SPLITS = ((None, 1), ("equal", 2), ("exact", 3))
BATCH = 4  # no quota above is a multiple of it: partial batches in the workers


def write_objects(root: Path, n: int) -> str:
    """A local prefix of ``n`` samples ``{i:03d}.txt`` + ``.cls``."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"{i:03d}.txt").write_text(f"sample {i}")
        (root / f"{i:03d}.cls").write_text(str(i % 10))
    return str(root) + "/"


def stream(url: str, split: str | None, size: int, **kw: Any) -> Any:
    return ss.ObjectStream(url, split=split, batch_size=size, seed=2, **kw).to_tuple("__key__", "cls")


def loaders(make: Any) -> dict[str, Any]:
    """Every way of loading ``make()``: WebLoader batching in the pipeline or in the DataLoader
    (per worker), or not at all (items), with 0, 2 and 3 workers; ss.Loader threads and processes."""
    return {
        "web0 pipeline": ss.WebLoader(make().batched(BATCH), batch_size=None, num_workers=0),
        "web2 pipeline": ss.WebLoader(make().batched(BATCH), batch_size=None, num_workers=2),
        "web3 pipeline full batches": ss.WebLoader(
            make().batched(BATCH, partial=False), batch_size=None, num_workers=3
        ),
        "web0 loader": ss.WebLoader(make(), batch_size=BATCH, num_workers=0),
        "web3 loader": ss.WebLoader(make(), batch_size=BATCH, num_workers=3),
        "web2 loader drop_last": ss.WebLoader(make(), batch_size=BATCH, num_workers=2, drop_last=True),
        "web3 items": ss.WebLoader(make(), batch_size=None, num_workers=3),
        "ss threads": ss.Loader(make(), batch_size=BATCH, num_threads=2),
        "ss processes": ss.Loader(make(), batch_size=BATCH, num_workers=2),
        "ss processes drop_last": ss.Loader(make(), batch_size=BATCH, num_workers=3, drop_last=True),
    }


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("split", "size"), SPLITS, ids=["every-nth", "equal-2", "exact-3"])
@pytest.mark.parametrize("n", COUNTS)
def test_len_of_every_loader_is_what_it_yields(tmp_path: Path, n: int, split: str | None, size: int) -> None:
    url = write_objects(tmp_path / "objects", n)
    single = stream(url, split, size)
    assert single.slot_length(World()) == sum(1 for _ in single), "one process: the slot is the rank"
    check_lengths(loaders(lambda: stream(url, split, size)), f"{n} objects, split={split}")


@pytest.mark.parametrize(("split", "size"), SPLITS, ids=["every-nth", "equal-2", "exact-3"])
def test_every_rank_of_an_explicit_world(tmp_path: Path, split: str | None, size: int) -> None:
    """11 objects over 2 ranks (uneven with split=None: 6 and 5), 3 workers each."""
    url = write_objects(tmp_path / "objects", 11)
    for rank in range(2):
        world = World(rank=rank, world_size=2)
        for workers in (0, 3):
            ds = stream(url, split, size, world=world)
            with ss.WebLoader(ds, batch_size=BATCH, num_workers=workers) as loader:
                assert len(loader) == count(loader)[0], (rank, workers)


def test_a_mixture_of_object_streams_counts_per_worker(tmp_path: Path) -> None:
    """Mix asks each source for its slot's share: now known for ObjectStream sources too."""
    a = write_objects(tmp_path / "a", 11)
    b = write_objects(tmp_path / "b", 7)

    def make() -> Any:
        sources = [ss.ObjectStream(a, seed=1), ss.ObjectStream(b, seed=2, split="equal", batch_size=2)]
        return ss.Mix(sources, weights=[0.6, 0.4], stop="longest", seed=3).to_tuple("__key__")

    for workers in (0, 2, 3):
        with ss.WebLoader(make().batched(BATCH), batch_size=None, num_workers=workers) as loader:
            assert len(loader) == count(loader)[0], workers


def test_unknown_slot_lengths(tmp_path: Path) -> None:
    """with_epoch/repeat: unknown per slot (the loaders use their own rule); with_length is the rank's."""
    url = write_objects(tmp_path / "objects", 11)
    two = World().with_worker(1, 2)
    assert stream(url, None, 1).with_epoch(5).slot_length(World()) is None
    assert stream(url, None, 1).repeat(2).slot_length(World()) is None
    declared = stream(url, None, 1).with_length(9, silent=True)
    assert declared.slot_length(World()) == 9 and declared.slot_length(two) is None
    assert stream(url, None, 1).slot_length(two) == 5


@pytest.mark.s3
def test_over_s3_with_workers(samples40: Prefix) -> None:
    """40 objects in 3 workers (14, 13, 13) in batches of 6: 9 batches, not ceil(40 / 6) = 7."""
    opts = samples40.s3.storage_options

    def make() -> Any:
        return ss.ObjectStream(samples40.url, storage_options=opts, seed=1).to_tuple("__key__")

    with ss.WebLoader(make(), batch_size=6, num_workers=3) as loader:
        assert len(loader) == count(loader)[0] == 9
    with ss.Loader(make(), batch_size=6, num_workers=2, drop_last=True) as engine:
        assert len(engine) == count(engine)[0] == 6  # 20 and 20: 3 full batches each


def test_len_of_each_rank_with_split_none(tmp_path: Path) -> None:
    """split=None: rank r reads every world_size-th object from r on, so 11 objects over 2 ranks
    are 6 and 5, and len() says so on each (it used to give every rank the largest share)."""
    url = write_objects(tmp_path / "objects", 11)
    for rank, expected in enumerate((6, 5)):
        ds = stream(url, None, 1, world=World(rank=rank, world_size=2))
        assert len(ds) == expected == sum(1 for _ in ds), rank
        assert len(stream(url, None, 1, world=World(rank=rank, world_size=2)).batched(4)) == -(-expected // 4)
