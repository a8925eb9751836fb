"""The fork gate's bookkeeping: which threads are ours, re-entrant busy regions, waiting for exits,
and how the threads that are not ours are found (``shardstream.forks``)."""

from __future__ import annotations

import threading
import time
import types
from pathlib import Path

import pytest

from shardstream.forks import ForkGate, GatedExecutor, foreign_threads, gate


def test_threads_started_through_the_gate_or_a_gated_pool_are_ours_and_not_foreign() -> None:
    go = threading.Event()
    mine = gate.start(go.wait, name="ours")
    pool = GatedExecutor(1, thread_name_prefix="ours-pool")
    started = threading.Event()
    pool.submit(lambda: (started.set(), go.wait()))
    assert started.wait(5)
    try:
        assert mine.ident in gate.ours()
        assert len(gate.ours()) >= 2
        assert not any("ours" in t for t in foreign_threads())
    finally:
        go.set()
        mine.join(5)
        pool.shutdown()
    assert mine.ident not in gate.ours()


def test_a_thread_of_someone_else_is_named_foreign() -> None:
    go = threading.Event()
    other = threading.Thread(target=go.wait, name="user-metrics-exporter", daemon=True)
    other.start()
    try:
        assert any("user-metrics-exporter" in t for t in foreign_threads())
    finally:
        go.set()
        other.join(5)
    assert not any("user-metrics-exporter" in t for t in foreign_threads())


def test_busy_regions_nest_and_a_thread_inside_one_starts_threads_during_a_fork() -> None:
    g = ForkGate()
    inside, forking, started = threading.Event(), threading.Event(), threading.Event()
    result: list[bool] = []
    order: list[str] = []  # list.append is atomic: the order the two threads got there

    def work() -> None:
        with g.busy():
            inside.set()
            forking.wait(5)
            time.sleep(0.2)  # the fork is waiting for this region now
            with g.busy():  # nested: must not wait for the fork (which waits for us)
                g.start(started.set, name="inner")
                result.append(started.wait(5))
            order.append("region ended")

    t = threading.Thread(target=work)
    t.start()
    assert inside.wait(5)
    forking.set()
    g.before_fork()  # what os.fork() runs first
    order.append("fork went on")
    g.after_fork_in_parent()
    t.join(5)
    assert result == [True]  # the nested region did not deadlock
    # The fork waited for the region; an order, not a duration, so a loaded machine that runs
    # this thread late cannot pass a gate that does not wait (nor fail one that does).
    assert order == ["region ended", "fork went on"]


def test_a_fork_waits_until_a_finished_thread_of_ours_has_left_the_kernel() -> None:
    if not Path("/proc/self/task").exists():
        pytest.skip("needs /proc (Linux)")
    g = ForkGate()
    go = threading.Event()
    exiting = threading.Thread(target=go.wait, daemon=True)  # stands for a thread still in pthread_exit
    exiting.start()
    assert exiting.native_id is not None
    # A thread whose Python code has ended (not alive) while the kernel still has its task.
    g._threads[1] = types.SimpleNamespace(is_alive=lambda: False, native_id=exiting.native_id)  # type: ignore[assignment]
    timer = threading.Timer(0.3, go.set)
    timer.start()
    t0 = time.monotonic()
    g.before_fork()
    waited = time.monotonic() - t0
    g.after_fork_in_parent()
    timer.join()
    exiting.join(5)
    assert waited >= 0.25, "the fork did not wait for the thread to leave the kernel"
    assert not g._threads  # forgotten once gone
