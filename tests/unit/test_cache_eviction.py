"""LRU eviction as a pure function: minimal, LRU-ordered, never busy entries."""

from __future__ import annotations

import random

from shardstream.cache.eviction import Entry, plan_eviction


def _entries(sizes: list[int], busy: set[int] = frozenset()) -> list[Entry]:  # type: ignore[assignment]
    return [Entry(f"e{i}", s, last_used=float(i), busy=i in busy) for i, s in enumerate(sizes)]


def test_nothing_when_under_limit() -> None:
    assert plan_eviction(_entries([100, 100]), limit=200) == []


def test_evicts_least_recently_used_first_and_no_more_than_needed() -> None:
    entries = _entries([100, 100, 100, 100])
    victims = plan_eviction(entries, limit=350, incoming=100)
    assert [v.name for v in victims] == ["e0", "e1"]  # 500 -> 300: two are needed, not three


def test_busy_entries_are_never_evicted() -> None:
    entries = _entries([100, 100, 100], busy={0})
    assert [v.name for v in plan_eviction(entries, limit=200)] == ["e1"]


def test_cannot_reach_limit_evicts_only_idle() -> None:
    entries = _entries([100, 100, 100], busy={0, 2})
    assert [v.name for v in plan_eviction(entries, limit=50)] == ["e1"]


def test_random_plans_are_minimal_lru_prefixes() -> None:
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(0, 12)
        entries = [Entry(f"e{i}", rng.randint(0, 1000), rng.random(), rng.random() < 0.2) for i in range(n)]
        limit, incoming = rng.randint(0, 6000), rng.randint(0, 500)
        victims = plan_eviction(entries, limit, incoming)
        assert not any(v.busy for v in victims)
        idle = sorted((e for e in entries if not e.busy), key=lambda e: (e.last_used, e.name))
        assert victims == idle[: len(victims)]  # an LRU prefix
        total = sum(e.size for e in entries) + incoming
        after = total - sum(v.size for v in victims)
        if victims:
            # Minimal: without the last victim we would still be over the limit.
            assert after + victims[-1].size > limit
        if after > limit:
            assert victims == idle  # stays over only if every idle entry went
