"""The one run-of-samples type: the planner cuts it, a state stores it, an elastic resume re-deals it."""

from __future__ import annotations

import json

import pytest

from shardstream.errors import StateError
from shardstream.shards import Run, plan_epoch
from shardstream.shards.elastic import cut


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
