"""The epoch plan (pure arithmetic) and the PlannedSamples source / WebDataset split modes."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest

from shardstream.compat import WebDataset
from shardstream.errors import ConfigurationError, SplitError
from shardstream.loader.loader import WebLoader
from shardstream.readers import counts as counts_mod
from shardstream.shards.plan import batches_per_rank, plan_epoch, worker_quotas
from shardstream.shards.world import World
from shardstream.tar.index import read_index
from shardstream.tar.sharded_writer import ShardWriter

UNEVEN = [3, 40, 12, 25, 7, 33, 18]
URLS = [f"s{i}.tar" for i in range(len(UNEVEN))]


def write_shards(directory: Path, counts: list[int], *, index: bool = True) -> list[str]:
    """One ShardWriter per shard so shard i has exactly counts[i] samples; returns the URLs."""
    directory.mkdir(parents=True, exist_ok=True)
    urls = []
    for s, n in enumerate(counts):
        with ShardWriter(str(directory / f"d{s:02d}-%d.tar"), maxcount=max(n, 1), index=index) as w:
            for i in range(n):
                w.write({"__key__": f"k{s:02d}_{i:03d}", "cls": i})
        urls.append(str(directory / f"d{s:02d}-0.tar"))
    return urls


def covered(plan_slots: tuple[tuple[object, ...], ...]) -> Counter[tuple[str, int]]:
    return Counter((p.url, i) for slot in plan_slots for p in slot for i in range(p.start, p.stop))  # type: ignore[attr-defined]


# -- pure plan --------------------------------------------------------------------------------
@pytest.mark.parametrize("granularity", ["shard", "sample"])
@pytest.mark.parametrize(("world_size", "num_workers"), [(1, 1), (2, 1), (2, 2), (3, 2), (3, 1)])
def test_equal_plan_fills_every_quota_and_reads_no_sample_twice(
    granularity: str, world_size: int, num_workers: int
) -> None:
    batch = 4
    plan = plan_epoch(
        URLS,
        UNEVEN,
        world_size=world_size,
        num_workers=num_workers,
        epoch=3,
        batch_size=batch,
        granularity=granularity,
    )
    assert plan.batches_per_rank == sum(UNEVEN) // (world_size * batch)
    for slot, quota in zip(plan.slots, plan.quotas, strict=True):
        assert sum(p.size for p in slot) == quota and quota % batch == 0
    for rank in range(world_size):
        assert sum(plan.quota(rank, w) for w in range(num_workers)) == plan.samples_per_rank
    seen = covered(plan.slots)
    assert max(seen.values()) == 1
    assert plan.truncated == sum(UNEVEN) - sum(seen.values()) < world_size * batch


def test_batches_per_rank_do_not_depend_on_num_workers() -> None:
    for mode in ("equal", "exact"):
        counts = {
            plan_epoch(URLS, UNEVEN, world_size=2, num_workers=w, mode=mode, batch_size=5).batches_per_rank
            for w in (1, 2, 3)
        }
        assert len(counts) == 1, mode
    assert worker_quotas(5, 2, 4) == [12, 8]
    assert worker_quotas(1, 3, 4) == [4, 0, 0]


@pytest.mark.parametrize(("world_size", "num_workers"), [(2, 2), (3, 2), (4, 1)])
def test_exact_plan_covers_every_sample_once_plus_marked_padding(world_size: int, num_workers: int) -> None:
    plan = plan_epoch(
        URLS, UNEVEN, world_size=world_size, num_workers=num_workers, mode="exact", batch_size=8
    )
    real = Counter(
        (p.url, i) for slot in plan.slots for p in slot if not p.pad for i in range(p.start, p.stop)
    )
    assert len(real) == sum(UNEVEN) and max(real.values()) == 1
    pads = sum(p.size for slot in plan.slots for p in slot if p.pad)
    assert pads == plan.padded == world_size * plan.samples_per_rank - sum(UNEVEN)
    assert plan.batches_per_rank == batches_per_rank(sum(UNEVEN), world_size, 8, "exact")


def test_order_is_a_fresh_permutation_per_epoch_and_a_function_of_seed() -> None:
    orders = [plan_epoch(URLS, UNEVEN, world_size=2, num_workers=1, epoch=e, seed=7).order for e in range(4)]
    assert len(set(orders)) == 4 and all(sorted(o) == sorted(URLS) for o in orders)
    again = plan_epoch(URLS, UNEVEN, world_size=2, num_workers=1, epoch=2, seed=7)
    assert again.order == orders[2]
    assert plan_epoch(URLS, UNEVEN, world_size=2, num_workers=1, shuffle=False).order == tuple(URLS)


def test_fewer_shards_than_readers_is_a_split_error_naming_numbers_and_fixes() -> None:
    with pytest.raises(SplitError) as info:
        plan_epoch(URLS[:3], UNEVEN[:3], world_size=2, num_workers=2)
    message = str(info.value)
    assert "3 non-empty shards" in message and "2 ranks x 2" in message
    assert (
        "granularity='sample'" in message
        and "split='resampled'" in message
        and "at most 1 workers" in message
    )
    assert isinstance(info.value, ValueError)
    # Sample-level splitting is the fix:
    plan = plan_epoch(URLS[:3], UNEVEN[:3], world_size=2, num_workers=2, granularity="sample")
    assert all(plan.quotas)


def test_too_few_samples_for_one_batch_per_rank() -> None:
    with pytest.raises(SplitError, match="fewer than one batch of 80 for each of 2 ranks"):
        plan_epoch(URLS, UNEVEN, world_size=2, num_workers=1, batch_size=80)


def test_empty_shards_are_skipped() -> None:
    plan = plan_epoch(["a", "b", "c"], [0, 5, 5], world_size=2, num_workers=1)
    assert "a" not in plan.order and plan.samples_per_rank == 5


# -- the source, single process, ranks given explicitly ---------------------------------------
def epoch_batches(
    urls: list[str],
    rank: int,
    world_size: int,
    num_workers: int,
    *,
    mode: str = "equal",
    epoch: int = 0,
    batch: int = 4,
) -> tuple[list[list[str]], int]:
    ds = (
        WebDataset(urls, split=mode, batch_size=batch, world=World(rank=rank, world_size=world_size))
        .to_tuple("__key__", "cls")
        .batched(batch)
    )
    with WebLoader(ds, batch_size=None, num_workers=num_workers) as loader:
        loader.set_epoch(epoch)
        return [list(keys) for keys, _ in loader], len(loader)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 3])
def test_every_rank_yields_the_same_batches_for_0_1_2_workers(tmp_path: Path, world_size: int) -> None:
    urls = write_shards(tmp_path, UNEVEN)
    expected = sum(UNEVEN) // (world_size * 4)
    for num_workers in (0, 1, 2):
        keys: list[str] = []
        for rank in range(world_size):
            batches, length = epoch_batches(urls, rank, world_size, num_workers)
            assert len(batches) == length == expected, (num_workers, rank)
            assert all(len(b) == 4 for b in batches)
            keys += [k for b in batches for k in b]
        assert len(keys) == len(set(keys)) == expected * world_size * 4


def test_len_follows_batching_and_samples(tmp_path: Path) -> None:
    urls = write_shards(tmp_path, UNEVEN)
    ds = WebDataset(urls, split="equal", batch_size=4, world=World(rank=0, world_size=2))
    assert len(ds) == 17 * 4
    assert len(ds.to_tuple("__key__").batched(4)) == 17
    assert len(WebLoader(ds, batch_size=4)) == 17


def test_exact_mode_marks_padding(tmp_path: Path) -> None:
    urls = write_shards(tmp_path, UNEVEN)
    real: list[str] = []
    for rank in range(3):
        ds = WebDataset(urls, split="exact", batch_size=8, world=World(rank=rank, world_size=3))
        samples = list(ds)
        assert len(samples) == len(ds) == 48
        real += [s["__key__"] for s in samples if not s["__pad__"]]
    assert sorted(real) == sorted(set(real)) and len(real) == sum(UNEVEN)


def test_counts_without_index_come_from_a_cached_counting_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    urls = write_shards(tmp_path / "noindex", UNEVEN, index=False)
    counts_mod.clear_cache()
    cache = str(tmp_path / "counts")
    with caplog.at_level(logging.INFO, logger="shardstream.readers.counts"):
        assert counts_mod.shard_counts(urls, cache=cache) == UNEVEN
        assert "counted 138 samples in 7 shards" in caplog.text
        caplog.clear()
        assert counts_mod.shard_counts(urls) == UNEVEN  # process cache
        counts_mod.clear_cache()
        assert counts_mod.shard_counts(urls, cache=cache) == UNEVEN  # persisted index
        assert "counted" not in caplog.text
    assert read_index(cache)["d01-0.tar"] == 40
    assert counts_mod.shard_counts(urls[:2], index={"d00-0.tar": 9, urls[1]: 1}) == [9, 1]


def test_a_shard_shorter_than_its_index_still_fills_the_quota(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    urls = write_shards(tmp_path, UNEVEN)
    stale = {Path(u).name: n + 5 for u, n in zip(urls, UNEVEN, strict=True)}
    ds = WebDataset(urls, split="equal", batch_size=4, index=stale, world=World(rank=1, world_size=2))
    with caplog.at_level(logging.WARNING, logger="shardstream.readers.planned"):
        assert sum(1 for _ in ds) == len(ds)
    assert "fewer than planned" in caplog.text


def test_resampled_epoch_length_is_per_rank(tmp_path: Path) -> None:
    urls = write_shards(tmp_path, UNEVEN)
    ds = WebDataset(urls, split="resampled", batch_size=4, epoch_size=50, world=World(rank=0, world_size=2))
    assert len(ds) == 48
    with WebLoader(ds.to_tuple("__key__").batched(4), batch_size=None, num_workers=2) as loader:
        assert len(loader) == 12
        assert sum(1 for _ in loader) == 12


def test_split_argument_errors(tmp_path: Path) -> None:
    urls = write_shards(tmp_path, [5, 5])
    with pytest.raises(ConfigurationError, match="needs epoch_size"):
        WebDataset(urls, split="resampled")
    with pytest.raises(ConfigurationError, match="unknown"):
        WebDataset(urls, split="balanced")
    with pytest.raises(ConfigurationError, match="drop resampled="):
        WebDataset(urls, split="equal", resampled=True)


def test_epochs_advance_with_the_loader(tmp_path: Path) -> None:
    urls = write_shards(tmp_path, UNEVEN)
    ds = WebDataset(urls, split="equal", batch_size=1, world=World(rank=0, world_size=1)).to_tuple("__key__")
    with WebLoader(ds, batch_size=None, num_workers=0) as loader:
        epochs = [[k for (k,) in loader] for _ in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(epochs[2])


def test_a_recorded_world_never_overrides_live_detection_in_the_main_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pickle

    from shardstream import ShardStream

    dataset = ShardStream(write_shards(tmp_path, [5, 5]), split="equal")
    copy = pickle.loads(pickle.dumps(dataset))  # records "single process" (no launcher yet)
    assert copy._main_world == World()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert (copy.context(0).world.rank, copy.context(0).world.world_size) == (1, 2)
    assert len(copy) == 5
