"""The one run-of-samples type: the planner cuts it, a state stores it, an elastic resume re-deals it."""

from __future__ import annotations

import json
import random

import pytest

from shardstream.errors import StateError
from shardstream.shards import Run, plan_epoch
from shardstream.shards.elastic import apportion, batch_quotas, cut


def test_a_run_knows_its_end_and_splits_at_a_sample_boundary() -> None:
    run = Run("s-0.tar", start=10, count=5, pad=False)
    assert (run.size, run.stop) == (5, 15)
    head, rest = run.split(2)
    assert (head.start, head.stop, rest.start, rest.stop) == (10, 12, 12, 15)
    assert head.pad is rest.pad is False
    with pytest.raises(ValueError, match="cannot split"):
        run.split(5)


def test_a_run_without_a_known_length_says_so() -> None:
    run = Run("s-0.tar")
    with pytest.raises(ValueError, match="no known length"):
        _ = run.size
    with pytest.raises(ValueError, match="no sample number"):
        _ = Run("s-0.tar", start=-1, count=1, offset=512).stop


def test_a_run_survives_a_json_round_trip_and_a_corrupt_one_is_refused() -> None:
    run = Run("s3://b/s-1.tar", 3, 4, 2048, True)
    assert Run.from_json(json.loads(json.dumps(run.to_json()))) == run
    with pytest.raises(StateError, match="corrupted"):
        Run.from_json(["s-1.tar", "three", 4, 0, None])
    with pytest.raises(StateError, match="neither a sample number nor an offset"):
        Run("s-1.tar", start=-1)


def test_the_planners_runs_recut_over_new_quotas_cover_the_same_samples() -> None:
    plan = plan_epoch(
        [f"s-{i}.tar" for i in range(5)], [7, 3, 9, 4, 6], epoch=0, seed=1, world_size=2, num_workers=2
    )
    runs = [r for slot in plan.slots for r in slot]
    before = sorted((r.url, i) for r in runs for i in range(r.start, r.stop))
    parts = cut(runs, [5] * (len(before) // 5) + ([len(before) % 5] if len(before) % 5 else []))
    after = sorted((r.url, i) for part in parts for r in part for i in range(r.start, r.stop))
    assert after == before


@pytest.mark.parametrize(
    ("total", "world", "workers", "batch"), [(82, 2, 3, 4), (81, 1, 2, 4), (23, 3, 2, 4), (0, 2, 2, 4)]
)
def test_batch_quotas_give_every_rank_the_same_number_of_batches(
    total: int, world: int, workers: int, batch: int
) -> None:
    quotas = batch_quotas(total, world, workers, batch)
    assert sum(quotas) == total and len(quotas) == world * workers
    per_rank = [quotas[r * workers : (r + 1) * workers] for r in range(world)]
    assert len({sum(-(-q // batch) for q in rank) for rank in per_rank}) == 1  # batches per rank
    assert all(sum(q % batch != 0 for q in rank) <= 1 for rank in per_rank)  # one partial batch at most


def test_batch_quotas_refuse_a_rest_that_no_split_gives_equal_batches() -> None:
    # 9 items over 2 ranks in batches of 4: 5 and 4 items are 2 and 1 batches
    with pytest.raises(StateError, match="cannot yield the same number of batches"):
        batch_quotas(9, 2, 1, 4)


def test_apportion_fills_every_slot_keeping_each_source_within_one_item_of_its_share() -> None:
    rng = random.Random(3)
    for _ in range(2000):
        totals = [rng.randint(0, 40) for _ in range(rng.randint(1, 5))]
        totals[0] += 1  # some item to share
        cuts = sorted(rng.randint(0, sum(totals)) for _ in range(rng.randint(0, 7)))
        quotas = [b - a for a, b in zip([0, *cuts], [*cuts, sum(totals)], strict=True)]
        shares = apportion(totals, quotas)
        assert [sum(row) for row in shares] == totals
        assert [sum(col) for col in zip(*shares, strict=True)] == quotas
        reached, got = 0, [0] * len(totals)
        for s, quota in enumerate(quotas):
            reached += quota
            for i, row in enumerate(shares):
                assert row[s] >= 0
                got[i] += row[s]
                assert abs(got[i] - totals[i] * reached / sum(totals)) < 1
