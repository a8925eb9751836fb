"""A map node's saved positions of items pulled and not yet yielded: the one-thread form, thread
mode's form (one list per chunk), and any other state, which is not one of them."""

from __future__ import annotations

from shardstream.pipeline.base import pending_positions


def test_the_flat_form_gives_its_positions_in_order() -> None:
    assert pending_positions({"pending": [[0, 5], [0, 9]]}) == [[0, 5], [0, 9]]


def test_thread_modes_form_gives_the_runs_positions_in_order() -> None:
    state = {"pending_runs": [[(0, 5), (0, 9)], [(1, 0)], [(1, 4), (1, 8)]]}
    assert pending_positions(state) == [(0, 5), (0, 9), (1, 0), (1, 4), (1, 8)]


def test_other_states_hold_no_pending_positions() -> None:
    assert pending_positions(None) is None
    assert pending_positions({}) is None
    assert pending_positions({"buffer": [1, 2]}) is None
    assert pending_positions({"pending": [1], "other": 2}) is None
