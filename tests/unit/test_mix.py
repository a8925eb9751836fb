"""ss.Mix: exact proportions in every window, determinism, stop rules, upsampling, state; and
WebDataset's RandomMix and RoundRobin on the same stage."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from _components import require_module

import shardstream as ss
from shardstream.errors import ConfigurationError, StateError
from shardstream.pipeline.mix import PASS_STRIDE
from shardstream.shards.mixing import Balanced, RandomDraws, balanced_count, phases

#: Uneven sources: (name, shard sizes). Samples are keyed ``<name><shard>_<index>``.
SOURCES = {"a": [23, 31, 17], "b": [40, 9], "c": [6, 7, 5, 8], "d": [50]}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("mix")
    urls: dict[str, list[str]] = {}
    for name, sizes in SOURCES.items():
        for s, n in enumerate(sizes):
            with ss.ShardWriter(str(root / f"{name}{s}-%02d.tar"), maxcount=1000) as sink:
                for i in range(n):
                    sink.write({"__key__": f"{name}{s}_{i:03d}", "cls": i})
            urls.setdefault(name, []).append(str(root / f"{name}{s}-00.tar"))
    return urls


def _sources(shards: dict[str, list[str]], names: str, **kw: Any) -> list[ss.ShardStream]:
    return [ss.ShardStream(shards[n], seed=10 + k, **kw) for k, n in enumerate(names)]


def _keys(items: Any) -> list[str]:
    return [s["__key__"] for s in items]


def _worst_window(labels: Sequence[str], weights: dict[str, float], window: int) -> float:
    """The largest gap, in points, between a source's share and its weight in any window."""
    worst = 0.0
    for name, w in weights.items():
        hits = np.concatenate([[0], np.cumsum([x == name for x in labels])])
        shares = (hits[window:] - hits[:-window]) / window
        worst = max(worst, float(np.abs(shares - w).max()) * 100)
    return worst


@pytest.mark.parametrize(
    ("names", "weights"),
    [("ab", [0.7, 0.3]), ("abc", [0.5, 0.3, 0.2]), ("abcd", [0.4, 0.3, 0.2, 0.1]), ("cd", [0.05, 0.95])],
)
def test_every_window_of_600_keeps_the_weights(
    shards: dict[str, list[str]], names: str, weights: list[float]
) -> None:
    mix = ss.Mix(_sources(shards, names), weights=weights, stop="never", seed=4)
    labels = [k[0] for k in _keys(itertools.islice(mix, 3000))]
    target = dict(zip(names, weights, strict=True))
    for name, w in target.items():  # the long run: within 1.5 points (it is within one sample)
        assert abs(labels.count(name) / len(labels) - w) * 100 < 1.5
    assert _worst_window(labels, target, 600) < 5.0
    assert _worst_window(labels, target, 600) <= 2 / 600 * 100 + 1e-9  # about one sample either way


def test_the_schedule_stays_within_two_items_over_a_long_run() -> None:
    weights = [0.55, 0.25, 0.15, 0.05]
    schedule = Balanced(weights, phases(4, 9))
    picks: list[int] = []
    while len(picks) < 100_000:
        block = schedule.plan([True] * 4)
        schedule.commit(len(block))
        picks += block
    counts = np.cumsum(np.eye(4, dtype=np.int64)[picks], axis=0)
    ideal = np.outer(np.arange(1, len(picks) + 1), weights)
    assert np.abs(counts - ideal).max() < 2


def test_same_seed_same_order_other_seed_other_order(shards: dict[str, list[str]]) -> None:
    def order(seed: int) -> list[str]:
        return _keys(ss.Mix(_sources(shards, "abc"), weights=[0.5, 0.3, 0.2], seed=seed))

    first = order(1)
    assert first == order(1)
    other = order(2)
    assert [k[0] for k in other] != [k[0] for k in first]  # the interleave itself changes


def test_each_source_keeps_its_own_order_and_epochs(shards: dict[str, list[str]]) -> None:
    """A source's items in the mixture are exactly that source read alone (its own seed and shard
    shuffle), and a mixture's epoch e runs every source's epoch e."""
    mix = ss.Mix(_sources(shards, "ab"), weights=[0.5, 0.5], stop="longest")
    alone = _sources(shards, "ab")
    for epoch in range(2):
        got = _keys(mix)
        for k, name in enumerate("ab"):
            alone[k].set_epoch(epoch)
            assert [x for x in got if x[0] == name] == _keys(alone[k])


def test_first_exhausted_stops_when_a_source_ends(shards: dict[str, list[str]]) -> None:
    sources = _sources(shards, "abc", split="equal")  # a planned split: every length is known
    mix = ss.Mix(sources, weights=[0.2, 0.2, 0.6], stop="first_exhausted")
    got = _keys(mix)
    assert len(got) == len(set(got))  # nothing repeats
    counts = Counter(k[0] for k in got)
    assert counts["c"] == sum(SOURCES["c"])  # the source that ran out first was read whole
    assert counts["a"] < sum(SOURCES["a"]) and counts["b"] < sum(SOURCES["b"])
    assert len(mix) == len(got)
    assert len(mix.batched(8)) == -(-len(got) // 8) == len(list(mix.batched(8)))


def test_all_exhausted_repeats_the_small_source_with_its_next_epochs(shards: dict[str, list[str]]) -> None:
    sources = _sources(shards, "bc", split="equal")
    mix = ss.Mix(sources, weights=[0.5, 0.5], stop="all_exhausted")
    got = _keys(mix)
    b = [k for k in got if k[0] == "b"]
    c = [k for k in got if k[0] == "c"]
    assert set(b) == {f"b{s}_{i:03d}" for s, n in enumerate(SOURCES["b"]) for i in range(n)}
    assert len(b) == len(set(b))  # the large source was read once
    n_c = sum(SOURCES["c"])
    passes = [c[i : i + n_c] for i in range(0, len(c), n_c)]
    assert len(passes) >= 2 and all(sorted(p) == sorted(passes[0]) for p in passes[:-1])
    assert passes[0] != passes[1]  # the next pass is the source's next epoch: another shard order
    sources[1].set_epoch(PASS_STRIDE)  # the source's pass 1 in the mixture's epoch 0
    assert passes[1] == _keys(sources[1])[: len(passes[1])]
    assert len(mix) == len(got)


def test_upsampling_by_weight(shards: dict[str, list[str]]) -> None:
    """A weight far above a source's share of the data repeats it: 20/80 of 49 and 26 samples."""
    mix = ss.Mix(_sources(shards, "bc"), weights=[0.2, 0.8], stop="all_exhausted")
    got = _keys(mix)
    counts = Counter(got)
    assert {v for k, v in counts.items() if k[0] == "b"} == {1}  # b read once, whole
    assert len(counts) == sum(SOURCES["b"]) + sum(SOURCES["c"])
    c_repeats = Counter(v for k, v in counts.items() if k[0] == "c")
    assert set(c_repeats) <= {7, 8}  # 196 items of a 26-item source: 7.5 passes
    labels = [k[0] for k in got]
    assert abs(labels.count("c") / len(labels) - 0.8) < 0.01


def test_never_is_endless_and_every_source_restarts(shards: dict[str, list[str]]) -> None:
    mix = ss.Mix(_sources(shards, "ac"), weights=[0.5, 0.5], stop="never")
    got = _keys(itertools.islice(mix, 1000))
    assert len(got) == 1000
    assert Counter(k[0] for k in got) == {"a": 500, "c": 500}
    assert max(Counter(got).values()) >= 500 // sum(SOURCES["c"])  # the small source cycles
    with pytest.raises(TypeError, match="endless"):
        len(mix)


def test_longest_reads_everything_once_and_renormalises(shards: dict[str, list[str]]) -> None:
    mix = ss.Mix(_sources(shards, "bcd", split="equal"), weights=[0.25, 0.5, 0.25], stop="longest")
    got = _keys(mix)
    assert len(got) == len(set(got)) == sum(sum(SOURCES[n]) for n in "bcd") == len(mix)
    # c (26 items) is gone after about 52; then b and d share 50/50 until b runs out.
    after = [k[0] for k in got[60:140]]
    assert abs(after.count("b") - after.count("d")) <= 2


def test_resume_anywhere_in_process_including_across_restarts_and_buffers(
    shards: dict[str, list[str]],
) -> None:
    def make() -> ss.Mix:
        sources = [ss.ShardStream(shards["a"], seed=1).shuffle(7), ss.ShardStream(shards["c"], seed=2)]
        return ss.Mix(sources, weights=[0.3, 0.7], stop="all_exhausted", seed=3).shuffle(9)

    full = _keys(make())
    assert len(full) > 2 * sum(SOURCES["c"])  # c restarted at least twice
    for k in (0, 1, 13, 27, 60, len(full) - 1, len(full)):
        mix = make()
        it = iter(mix)
        head = [next(it)["__key__"] for _ in range(k)]
        state = json.loads(json.dumps(mix.state_dict()))
        again = make()
        again.load_state_dict(state)
        assert head + _keys(again) == full, k


def test_a_state_of_another_mixture_is_refused_naming_what_differs(shards: dict[str, list[str]]) -> None:
    mix = ss.Mix(_sources(shards, "abc"), weights=[0.5, 0.3, 0.2])
    it = iter(mix)
    next(it)
    state = mix.state_dict()
    with pytest.raises(StateError, match=r"weights: saved \[0.5, 0.3, 0.2\], now \[0.2, 0.3, 0.5\]"):
        ss.Mix(_sources(shards, "abc"), weights=[0.2, 0.3, 0.5]).load_state_dict(state)
    with pytest.raises(StateError, match="sources: saved 3, now 2"):
        ss.Mix(_sources(shards, "ab"), weights=[0.5, 0.5]).load_state_dict(state)
    with pytest.raises(StateError, match="stop"):
        ss.Mix(_sources(shards, "abc"), weights=[0.5, 0.3, 0.2], stop="never").load_state_dict(state)
    with pytest.raises(StateError, match="source1"):  # a source with another seed
        swapped = [
            ss.ShardStream(shards["a"], seed=10),
            ss.ShardStream(shards["b"], seed=99),
            ss.ShardStream(shards["c"]),
        ]
        ss.Mix(swapped, weights=[0.5, 0.3, 0.2]).load_state_dict(state)
    corrupted = json.loads(json.dumps(state))
    corrupted["nodes"][0]["sources"].pop()
    same = ss.Mix(_sources(shards, "abc"), weights=[0.5, 0.3, 0.2])
    same.load_state_dict(corrupted)
    with pytest.raises(StateError, match="2 sources but this one has 3"):
        list(same)


def test_arguments_are_checked(shards: dict[str, list[str]]) -> None:
    sources = _sources(shards, "ab")
    with pytest.raises(ConfigurationError, match="2 weights for 3 sources"):
        ss.Mix(_sources(shards, "abc"), weights=[0.5, 0.5])
    with pytest.raises(ConfigurationError, match="positive"):
        ss.Mix(sources, weights=[1.0, 0.0])
    with pytest.raises(ConfigurationError, match="stop='sometimes'"):
        ss.Mix(sources, stop="sometimes")
    with pytest.raises(ConfigurationError, match="source 1 .* list"):
        ss.Mix([sources[0], [{"__key__": "x"}]])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="with_epoch"):
        ss.Mix([sources[0], ss.ShardStream(shards["b"]).with_epoch(10)])


def test_len_matches_the_items_for_many_shapes() -> None:
    """The closed-form count equals what the stage yields (lists as sources: no I/O)."""
    from shardstream.pipeline.mix import MixSource

    rng = np.random.default_rng(0)
    for _ in range(150):
        k = int(rng.integers(2, 5))
        sizes = [int(x) for x in rng.integers(0, 40, size=k)]
        weights = [float(x) for x in rng.random(k) + 0.05]
        seed = int(rng.integers(0, 1000))
        for stop in ("first_exhausted", "all_exhausted"):
            lists = [[(i, j) for j in range(n)] for i, n in enumerate(sizes)]
            got = ss.DataPipeline(MixSource(lists, weights, stop=stop, seed=seed), seed=seed)
            assert len(list(got)) == balanced_count(weights, phases(k, seed), sizes, stop == "all_exhausted")


def test_picks_before_stop_replays_where_the_mixture_would_have_stopped() -> None:
    """From a saved position, the replayed schedule gives each source's items still to come
    exactly, for both stop rules that end part-way and both schedules (lists: no I/O)."""
    from shardstream.pipeline.base import RunContext
    from shardstream.pipeline.mix import MixSource
    from shardstream.shards.mixing import picks_before_stop

    rng = np.random.default_rng(1)
    for _ in range(120):
        k = int(rng.integers(2, 5))
        sizes = [int(x) for x in rng.integers(0, 30, size=k)]
        weights = [float(x) for x in rng.random(k) + 0.05]
        seed, order = int(rng.integers(0, 1000)), str(rng.choice(["balanced", "random"]))
        for stop in ("first_exhausted", "all_exhausted"):
            lists = [[(i, j) for j in range(n)] for i, n in enumerate(sizes)]
            stage = MixSource(lists, weights, stop=stop, order=order, seed=seed)
            items = list(ss.DataPipeline(stage, seed=seed))
            cut = int(rng.integers(0, len(items) + 1))
            pipe = ss.DataPipeline(stage, seed=seed)
            it = iter(pipe)
            for _ in range(cut):
                next(it)
            state = pipe.state_dict()
            if "nodes" not in state:
                continue  # the pass had ended
            mix = state["nodes"][0]
            left = [n - (s or {}).get("next", n) for n, s in zip(sizes, mix["sources"], strict=True)]
            feeds = [itertools.chain([left[i]], itertools.repeat(sizes[i])) for i in range(k)]
            schedule = stage.schedule(RunContext(0, ss.World(), seed), mix["schedule"])
            got = picks_before_stop(schedule, mix["active"], mix["ended"], feeds, stop == "all_exhausted")
            assert got == [sum(1 for x in items[cut:] if x[0] == i) for i in range(k)], (sizes, stop, cut)


# -- WebDataset's RandomMix and RoundRobin --------------------------------------------------------


def _lists() -> list[list[str]]:
    return [[f"x{i}" for i in range(3)], [f"y{i}" for i in range(6)], [f"z{i}" for i in range(2)]]


@pytest.mark.parametrize("longest", [False, True])
def test_round_robin_is_webdataset_s(longest: bool) -> None:
    wds = require_module("webdataset", "the comparison with WebDataset 1.0.2")
    theirs = list(wds.RoundRobin(_lists(), longest=longest))
    assert list(ss.RoundRobin(_lists(), longest=longest)) == theirs
    assert theirs[:6] == ["x0", "y0", "z0", "x1", "y1", "z1"]


def test_random_mix_draws_by_probs_and_longest_reads_everything_once() -> None:
    big = [[f"{name}{i}" for i in range(20_000)] for name in "pqr"]
    mixed = list(itertools.islice(ss.RandomMix(big, probs=[0.6, 0.3, 0.1], seed=5), 3000))
    shares = Counter(k[0] for k in mixed)
    assert abs(shares["p"] / 3000 - 0.6) < 0.04 and abs(shares["r"] / 3000 - 0.1) < 0.03
    assert mixed == list(itertools.islice(ss.RandomMix(big, probs=[0.6, 0.3, 0.1], seed=5), 3000))
    assert mixed != list(itertools.islice(ss.RandomMix(big, probs=[0.6, 0.3, 0.1], seed=6), 3000))
    everything = list(ss.RandomMix(_lists(), probs=[1, 5, 1], longest=True, seed=1))
    assert sorted(everything) == sorted(sum(_lists(), []))
    for source in _lists():
        assert [x for x in everything if x in source] == source  # each in its own order
    shortest = list(ss.RandomMix(_lists(), probs=[1, 5, 1], seed=1))
    assert len(shortest) < len(everything)  # stops at the first list that runs out


def test_random_draws_are_webdataset_s_rule() -> None:
    """A draw picks the first source whose cumulative normalised weight reaches it."""
    draws = RandomDraws([1.0, 3.0], seed=7)
    picks = draws.plan([True, True], size=1000)
    import random

    rng = random.Random(7)
    expected = [0 if rng.random() <= 0.25 else 1 for _ in range(1000)]
    assert picks == expected


@pytest.mark.parametrize("kind", ["random", "robin"])
def test_compat_mixes_save_and_restore_their_position(shards: dict[str, list[str]], kind: str) -> None:
    def make() -> Any:
        sources = _sources(shards, "bcd")
        if kind == "random":
            return ss.RandomMix(sources, probs=[0.2, 0.5, 0.3], longest=True, seed=2)
        return ss.RoundRobin(sources, longest=True)

    full = _keys(make())
    assert len(full) == sum(sum(SOURCES[n]) for n in "bcd")
    for k in (1, 30, 61, len(full) - 1):
        mix = make()
        it = iter(mix)
        head = [next(it)["__key__"] for _ in range(k)]
        state = json.loads(json.dumps(mix.state_dict()))
        again = make()
        again.load_state_dict(state)
        assert head + _keys(again) == full


def test_each_rank_mixes_its_own_share(shards: dict[str, list[str]]) -> None:
    """With an explicit world, each rank's sources split by rank, and the mixture covers each
    rank's share: the two ranks together read every sample of a longest mixture once."""
    halves = [
        _keys(
            ss.Mix(
                [ss.ShardStream(shards[n], seed=1, world=ss.World(r, 2), split="shards") for n in "ac"],
                stop="longest",
            )
        )
        for r in (0, 1)
    ]
    assert not set(halves[0]) & set(halves[1])
    assert len(halves[0]) + len(halves[1]) == sum(SOURCES["a"]) + sum(SOURCES["c"])
