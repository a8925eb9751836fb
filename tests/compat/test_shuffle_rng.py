"""A shuffle given the caller's ``random.Random`` comes out in WebDataset 1.0.2's order.

Seeded pipelines written for WebDataset (timm's reader, open_clip's shard order) pass their own
``random.Random`` to ``shuffle(rng=)`` or ``filters._shuffle(data, bufsize, initial, rng)``;
WebDataset draws ``rng.randint(0, len(buffer) - 1)`` per item (``filters.pick``), so the same
seed must give the same order here. Without ``rng=`` shardstream keeps its own seeded, resumable
draws (``tests/unit/test_pipeline.py``), which differ from WebDataset's by design.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from _wds_both import run, wds_items

from shardstream.compat import filters as ss_filters

# (bufsize, initial): a buffer smaller than, equal to and larger than the data, and initial > bufsize
CASES = [(10, 3), (50, 50), (100, 100), (1000, 100), (7, 20)]


def numbers() -> list[int]:
    return list(range(60))


@pytest.mark.parametrize(("bufsize", "initial"), CASES)
@pytest.mark.parametrize("seed", [0, 7, 12345])
def test_shuffle_with_an_rng_gives_webdatasets_order(
    wds: ModuleType, ss: ModuleType, bufsize: int, initial: int, seed: int
) -> None:
    theirs = run(wds, numbers(), wds.shuffle(bufsize, initial, rng=random.Random(seed)))
    assert sorted(theirs) == numbers() and theirs != numbers()
    assert run(ss, numbers(), ss.shuffle(bufsize, initial, rng=random.Random(seed))) == theirs


@pytest.mark.parametrize(("bufsize", "initial"), CASES)
def test_the_function_form_with_an_rng_gives_webdatasets_order(
    wds: ModuleType, bufsize: int, initial: int
) -> None:
    theirs = list(wds.filters._shuffle(iter(numbers()), bufsize, initial, random.Random(3)))
    ours = list(ss_filters._shuffle(iter(numbers()), bufsize, initial, random.Random(3)))
    assert ours == theirs and sorted(ours) == numbers()


def test_a_generator_source_gives_webdatasets_order(wds: ModuleType, ss: ModuleType) -> None:
    """A source without positions (a generator function) takes the other branch of the buffer."""

    def source() -> Callable[[], Iterator[int]]:
        return lambda: iter(numbers())

    theirs = list(wds.DataPipeline(source(), wds.shuffle(20, 5, rng=random.Random(5))))
    assert list(ss.DataPipeline(source(), ss.shuffle(20, 5, rng=random.Random(5)))) == theirs


def test_shards_and_the_fluent_method_give_webdatasets_order(
    wds: ModuleType, ss: ModuleType, make_shards
) -> None:
    spec, keys = make_shards(counts=[30, 25, 40])

    def keys_of(lib: ModuleType) -> list[str]:
        dataset = lib.WebDataset(spec, shardshuffle=False).shuffle(50, initial=10, rng=random.Random(42))
        return [sample["__key__"] for sample in wds_items(dataset)]

    theirs = keys_of(wds)
    assert sorted(theirs) == sorted(keys) and theirs != keys
    assert keys_of(ss) == theirs


def test_a_pipeline_with_an_rng_resumes_in_webdatasets_order(wds: ModuleType, ss: ModuleType) -> None:
    """Its state is a replay count: a pipeline rebuilt with a new ``random.Random`` of the same
    seed replays the draws, so the restored run continues the same (WebDataset's) order."""

    def make(lib: ModuleType) -> Any:
        return lib.DataPipeline([numbers()], lib.shuffle(25, 10, rng=random.Random(99)))

    theirs = list(make(wds))
    pipeline = make(ss)
    running = iter(pipeline)
    seen = [next(running) for _ in range(17)]
    state = json.loads(json.dumps(pipeline.state_dict()))
    assert state["replay"] == 17
    resumed = make(ss)
    resumed.load_state_dict(state)
    assert seen + list(resumed) == theirs
