"""The lazy, vectorised epoch plan against the first planner (kept here as the reference).

Exact mode and ``granularity="sample"`` must cut the same runs as the first planner did, given
the epoch's shard order; ``granularity="shard"`` has a new assignment, checked for the guarantees
the old one gave (exact quotas, no sample twice, only top-ups start inside a shard, a shard of
its own per slot, a new assignment every epoch, the same SplitError).
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream.errors import SplitError
from shardstream.readers.counts import clear_cache, shard_counts
from shardstream.shards.plan import (
    EpochPlan,
    batches_per_rank,
    epoch_order,
    epoch_permutation,
    plan_epoch,
    worker_quotas,
)
from shardstream.shards.runs import Run
from shardstream.shards.world import derive_seed
from shardstream.tar.index import IndexEntry, write_index
from shardstream.tar.samples import TarFormat
from shardstream.tar.sharded_writer import ShardWriter


# -- the first planner (commit 2d9cb08), given the shard order ------------------------------------
class RefStream:
    def __init__(self, segments: Sequence[Run], pos: int = 0) -> None:
        self.segments = segments
        self.total = sum(p.size for p in segments)
        self.index, self.offset = 0, 0
        if self.total:
            self.offset = pos % self.total
            while self.offset >= segments[self.index].size:
                self.offset -= segments[self.index].size
                self.index += 1

    def take(self, n: int, pad: bool = False) -> list[Run]:
        pieces: list[Run] = []
        while n > 0:
            seg = self.segments[self.index]
            k = min(n, seg.size - self.offset)
            pieces.append(Run(seg.url, seg.start + self.offset, k, pad=pad))
            n -= k
            self.offset += k
            if self.offset == seg.size:
                self.index, self.offset = (self.index + 1) % len(self.segments), 0
        return pieces

    def rest(self) -> list[Run]:
        if self.index == 0 and self.offset == 0:
            return []
        seg = self.segments[self.index]
        head = (
            [Run(seg.url, seg.start + self.offset, seg.size - self.offset, pad=seg.pad)]
            if self.offset
            else [seg]
        )
        return head + list(self.segments[self.index + 1 :])


def ref_exact(
    shards: Sequence[Run], total: int, world_size: int, per_rank: Sequence[int]
) -> list[tuple[Run, ...]]:
    stream = RefStream(shards)
    slots: list[tuple[Run, ...]] = []
    start = 0
    for rank in range(world_size):
        real = total // world_size + (rank < total % world_size)
        pad_stream = RefStream(shards, start)
        start += real
        for quota in per_rank:
            k = min(real, quota)
            real -= k
            slots.append(tuple(stream.take(k) + pad_stream.take(quota - k, pad=True)))
    return slots


def ref_exact_slot(
    shards: Sequence[Run], total: int, world_size: int, per_rank: Sequence[int], rank: int, worker: int
) -> tuple[Run, ...]:
    """One slot of :func:`ref_exact`, walking the streams only for that rank (for large inputs)."""
    main, start = 0, 0
    for r in range(rank):
        real = total // world_size + (r < total % world_size)
        for quota in per_rank:
            k = min(real, quota)
            real, main = real - k, main + k
        start += total // world_size + (r < total % world_size)
    real = total // world_size + (rank < total % world_size)
    stream, pad_stream = RefStream(shards, main), RefStream(shards, start)
    for w, quota in enumerate(per_rank):
        k = min(real, quota)
        real -= k
        pieces = stream.take(k) + pad_stream.take(quota - k, pad=True)
        if w == worker:
            return tuple(pieces)
    raise AssertionError("worker out of range")


def ref_by_shard(shards: Sequence[Run], quotas: Sequence[int]) -> list[tuple[Run, ...]]:
    active = [s for s, q in enumerate(quotas) if q > 0]
    if len(shards) < len(active):
        raise SplitError("too few shards")
    assigned: list[list[Run]] = [[] for _ in quotas]
    load = [0] * len(quotas)
    heap = [(0, -quotas[s], s) for s in active]
    heapq.heapify(heap)
    for shard in shards:
        _, _, s = heapq.heappop(heap)
        assigned[s].append(shard)
        load[s] += shard.size
        heapq.heappush(heap, (1, load[s] - quotas[s], s))
    cut: list[list[Run]] = []
    spare: list[Run] = []
    for s, quota in enumerate(quotas):
        stream = RefStream(assigned[s])
        cut.append(stream.take(min(quota, load[s])))
        if load[s] > quota:
            spare.extend(stream.rest() if quota else assigned[s])
    spare_stream = RefStream(spare)
    return [
        tuple(cut[s] + (spare_stream.take(q - min(q, load[s])) if q > min(q, load[s]) else []))
        for s, q in enumerate(quotas)
    ]


def reference(
    plan: EpochPlan, counts: dict[str, int], granularity: str
) -> tuple[list[Run], list[tuple[Run, ...]] | None]:
    """The reference's slots for ``plan``'s order and world (``None``: the equal-by-shard split
    the reference could not make)."""
    shards = [Run(u, 0, counts[u], pad=False) for u in plan.order]
    total = sum(counts[u] for u in plan.order)
    per_rank = worker_quotas(plan.batches_per_rank, plan.num_workers, plan.batch_size)
    if plan.mode == "exact":
        return shards, ref_exact(shards, total, plan.world_size, per_rank)
    if granularity == "sample":
        stream = RefStream(shards)
        return shards, [tuple(stream.take(q)) for q in per_rank * plan.world_size]
    try:
        return shards, ref_by_shard(shards, per_rank * plan.world_size)
    except SplitError:
        return shards, None


def random_case(seed: int) -> tuple[list[str], list[int], dict[str, int]]:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    counts = [rng.choice([0, 1, 2, 5, 9, 17, 30, rng.randint(0, 60)]) for _ in range(n)]
    urls = [f"s3://b/{seed}/shard-{i:03d}.tar" for i in range(n)]
    return urls, counts, dict(zip(urls, counts, strict=True))


def plan_or_error(urls: list[str], counts: list[int], **kwargs: object) -> EpochPlan | None:
    try:
        return plan_epoch(urls, counts, **kwargs)  # type: ignore[arg-type]
    except SplitError:
        return None


# -- exact and sample granularity: the first planner's runs ----------------------------------------
@pytest.mark.parametrize("mode_granularity", [("exact", "shard"), ("equal", "sample")])
def test_stream_cuts_are_the_first_planners_runs(mode_granularity: tuple[str, str]) -> None:
    mode, granularity = mode_granularity
    compared = 0
    for seed in range(400):
        urls, counts, by_url = random_case(seed)
        rng = random.Random(-seed)
        shape = {
            "world_size": rng.randint(1, 6),
            "num_workers": rng.randint(1, 4),
            "batch_size": rng.choice([1, 2, 3, 8]),
            "epoch": rng.randint(0, 3),
            "seed": seed,
            "shuffle": rng.random() < 0.8,
        }
        plan = plan_or_error(urls, counts, mode=mode, granularity=granularity, **shape)
        total = sum(counts)
        if plan is None:
            assert batches_per_rank(total, shape["world_size"], shape["batch_size"], mode) == 0  # type: ignore[arg-type]
            continue
        _, expected = reference(plan, by_url, granularity)
        assert list(plan.slots) == expected, (seed, shape)
        assert [plan.slot(r, w) for r in range(plan.world_size) for w in range(plan.num_workers)] == expected
        compared += 1
    assert compared > 300


def test_exact_padding_wraps_around_a_tiny_dataset_like_the_first_planner() -> None:
    urls, counts = ["a", "b"], [2, 1]
    plan = plan_epoch(urls, counts, world_size=2, num_workers=3, mode="exact", batch_size=4, shuffle=False)
    _, expected = reference(plan, dict(zip(urls, counts, strict=True)), "shard")
    assert list(plan.slots) == expected
    assert plan.padded == 2 * 4 - 3 and sum(r.size for s in plan.slots for r in s if r.pad) == plan.padded


# -- equal by shard: the new assignment's guarantees ----------------------------------------------
def check_by_shard(plan: EpochPlan, counts: dict[str, int]) -> None:
    slots = plan.slots
    owner: dict[tuple[str, int], int] = {}
    inside = 0
    for s, (runs, quota) in enumerate(zip(slots, plan.quotas, strict=True)):
        assert sum(r.size for r in runs) == quota  # exactly its quota
        assert all(r.pad is False and r.offset == -1 and r.stop <= counts[r.url] for r in runs)
        if quota:
            assert runs[0].start == 0  # a shard of its own comes first
        for r in runs:
            for i in range(r.start, r.stop):
                assert (r.url, i) not in owner  # no sample read twice
                owner[(r.url, i)] = s
    for s, runs in enumerate(slots):
        for r in runs:
            if r.start > 0:  # a top-up piece: the samples before it were another slot's
                inside += 1
                assert owner[(r.url, r.start - 1)] != s
    active = sum(1 for q in plan.quotas if q)
    assert inside <= 2 * active
    assert plan.truncated == sum(counts.values()) - len(owner) < plan.world_size * plan.batch_size


def test_equal_by_shard_keeps_the_guarantees_and_fails_where_the_first_planner_did() -> None:
    checked = 0
    for seed in range(400):
        urls, counts, by_url = random_case(seed)
        rng = random.Random(seed + 10_000)
        shape = {
            "world_size": rng.randint(1, 5),
            "num_workers": rng.randint(1, 4),
            "batch_size": rng.choice([1, 2, 4]),
            "epoch": rng.randint(0, 3),
            "seed": seed,
        }
        plan = plan_or_error(urls, counts, mode="equal", **shape)
        sample_plan = plan_or_error(urls, counts, mode="equal", granularity="sample", **shape)
        if sample_plan is None:  # fewer samples than a batch per rank: both refuse
            assert plan is None
            continue
        _, expected = reference(sample_plan, by_url, "shard")
        assert (plan is None) == (expected is None), (seed, shape)  # too few shards: both refuse
        if plan is None:
            continue
        check_by_shard(plan, by_url)
        assert plan.batches_per_rank == sample_plan.batches_per_rank
        checked += 1
    assert checked > 150


def test_equal_by_shard_gives_slots_new_shards_every_epoch() -> None:
    urls = [f"s{i}.tar" for i in range(400)]
    counts = [50 + (i * 37) % 40 for i in range(400)]
    plans = [plan_epoch(urls, counts, world_size=4, num_workers=4, epoch=e, batch_size=8) for e in range(3)]
    shards = [[frozenset(r.url for r in p.slot(r, w)) for r in range(4) for w in range(4)] for p in plans]
    for a, b in ((0, 1), (1, 2)):
        assert sum(x != y for x, y in zip(shards[a], shards[b], strict=True)) == 16


def test_too_few_shards_is_a_split_error_naming_the_fixes() -> None:
    with pytest.raises(SplitError, match=r"3 non-empty shards .* 2 ranks x 2 .*granularity='sample'"):
        plan_epoch(["a", "b", "c", "d"], [4, 4, 0, 4], world_size=2, num_workers=2)


def test_a_slot_outside_the_world_is_an_index_error() -> None:
    plan = plan_epoch(["a", "b"], [4, 4], world_size=2, num_workers=1)
    with pytest.raises(IndexError, match="rank=2, worker=0"):
        plan.slot(2, 0)


# -- the permutation --------------------------------------------------------------------------------
def test_the_plans_permutation_is_numpys_legacy_stream_and_stable() -> None:
    # Pinned values: a change here changes every plan (and breaks resuming old checkpoints).
    assert epoch_permutation(10, 0, 0, True).tolist() == [0, 5, 8, 2, 7, 1, 3, 4, 6, 9]
    key = derive_seed(0, "shards", 0)
    legacy = np.random.RandomState(np.array([key & 0xFFFFFFFF, key >> 32], dtype=np.uint32))
    assert epoch_permutation(10, 0, 0, True).tolist() == legacy.permutation(10).tolist()
    assert epoch_permutation(10, 1, 0, True).tolist() != epoch_permutation(10, 0, 0, True).tolist()
    assert epoch_permutation(5, 3, 7, False).tolist() == [0, 1, 2, 3, 4]
    order = epoch_permutation(1000, 2, 42, True)
    assert sorted(order.tolist()) == list(range(1000))
    plan = plan_epoch(
        [f"s{i}" for i in range(1000)], [1] * 1000, world_size=1, num_workers=1, epoch=2, seed=42
    )
    assert plan.order == tuple(f"s{i}" for i in order)


def test_shard_lists_keep_their_order() -> None:
    order = list(range(10))
    random.Random(derive_seed(0, "shards", 0)).shuffle(order)
    assert epoch_order(10, 0, 0, True) == order


# -- medium scale: a few slots checked against the reference (no timing) ---------------------------
def test_100k_shards_2048_ranks_8_workers() -> None:
    n, world_size, workers, batch = 100_000, 2_048, 8, 32
    urls = [f"s3://b/train/{i:06d}.tar" for i in range(n)]
    counts = [0 if i % 997 == 0 else 200 + (i * 7_919) % 300 for i in range(n)]
    by_url = dict(zip(urls, counts, strict=True))
    picks = [(0, 0), (1, 7), (777, 3), (world_size - 1, workers - 1)]
    exact = plan_epoch(
        urls, counts, world_size=world_size, num_workers=workers, mode="exact", batch_size=batch, epoch=5
    )
    shards = [Run(u, 0, by_url[u], pad=False) for u in exact.order]
    total = sum(counts)
    per_rank = worker_quotas(exact.batches_per_rank, workers, batch)
    for rank, worker in picks:
        assert exact.slot(rank, worker) == ref_exact_slot(shards, total, world_size, per_rank, rank, worker)
    sample = plan_epoch(
        urls, counts, world_size=world_size, num_workers=workers, granularity="sample", batch_size=batch
    )
    shards = [Run(u, 0, by_url[u], pad=False) for u in sample.order]
    quotas = sample.quotas
    for rank, worker in picks:
        k = rank * workers + worker
        assert sample.slot(rank, worker) == tuple(RefStream(shards, sum(quotas[:k])).take(quotas[k]))
    plan = plan_epoch(urls, counts, world_size=world_size, num_workers=workers, batch_size=batch, epoch=5)
    slots = plan.slots
    # Every quota met, no sample twice (as intervals per shard), each slot's first run a whole-shard start.
    assert [sum(r.size for r in s) for s in slots] == list(plan.quotas)
    assert all(s[0].start == 0 for s in slots)
    intervals = sorted((r.url, r.start, r.stop) for s in slots for r in s)
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in zip(intervals, intervals[1:], strict=False))
    assert plan.truncated == total - world_size * plan.samples_per_rank
    assert Counter(len(s) for s in slots).most_common(1)[0][0] <= 10
    assert np.all(np.diff(np.asarray([plan.quota(r, 0) for r in range(world_size)])) == 0)


# -- counts of many shards: one dataset-level index, read once ------------------------------------
class CountingFormat(TarFormat):
    """The tar format, counting its index reads and shard counting passes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.counted: list[str] = []

    def read_counts(self, location: str, storage_options: Mapping[str, Any] | None) -> dict[str, int]:
        self.reads.append(location)
        return super().read_counts(location, storage_options)

    def count(self, source: Any, url: str) -> int:
        self.counted.append(url)
        return int(super().count(source, url))


def test_the_counts_of_many_shards_come_from_one_index_read(tmp_path: Path) -> None:
    n = 20_000
    write_index(
        str(tmp_path),
        (IndexEntry(url=f"{i:06d}.tar", samples=1 + i % 97, bytes=-1) for i in range(n)),
        merge=False,
    )
    urls = [f"{tmp_path}/{i:06d}.tar" for i in range(n)]
    clear_cache()
    fmt = CountingFormat()
    assert shard_counts(urls, format=fmt) == [1 + i % 97 for i in range(n)]
    assert fmt.reads == [str(tmp_path)] and fmt.counted == []
    # Full URLs in a mapping win over basenames; a URL no key names is counted from its shard.
    urls[0] = write_shards_for_counts(tmp_path / "more", 3)
    fmt = CountingFormat()
    known = {**{f"{i:06d}.tar": 5 for i in range(n)}, urls[1]: 7}
    assert shard_counts(urls, index=known, format=fmt)[:3] == [3, 7, 5]
    assert fmt.reads == [] and fmt.counted == [urls[0]]


def write_shards_for_counts(directory: Path, samples: int) -> str:
    directory.mkdir()
    with ShardWriter(str(directory / "x-%d.tar"), maxcount=samples, index=False) as sink:
        for i in range(samples):
            sink.write({"__key__": f"k{i}", "cls": i})
    return str(directory / "x-0.tar")
