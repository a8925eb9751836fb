"""The automatic mode's choice (loader/_choice.py) as a function of the cores a loader may use and
what it measured: threads below the bound, processes (with threads each on many cores) above it,
never more cores than it may use; the choices that need no measurement."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream.loader._choice import BUSY_CORES, GIL_BOUND, Measured, choose, initial
from shardstream.loader._cores import Cores, usable_cores


def _cores(root: Path, cpus: int, machine: int) -> Cores:
    return usable_cores(affinity=range(cpus), machine=machine, root=root, environ={})


def _given(usable: int) -> Cores:
    return usable_cores(affinity=range(usable + (usable > 2)), machine=64, root="/nonexistent", environ={})


def _measured(share: float, threads: int, busy: float | None = None) -> Measured:
    """A measurement whose loader did ``share`` of its work holding the GIL, its threads busy
    ``busy`` cores' worth (default: all of them); ``busy=None`` with ``threads=0``: no per-thread
    times (the GIL's share of the wall time decides)."""
    if threads == 0:
        return Measured(1.0, 20, 2, share, 500, None, None, None, 1.0, [])
    cores = float(threads) if busy is None else busy
    return Measured(1.0, 20, threads, share * cores, 500, cores * 0.6, cores * 0.4, share, 1.0, [])


def test_the_choice_never_takes_more_cores_than_usable() -> None:
    for usable in (2, 3, 4, 7, 15, 31, 63):
        cores = _given(usable)
        assert cores.usable == usable
        for share in (0.0, 0.01, 0.05, 0.1, 0.17, 0.2, 0.3, 0.5, 0.7, 1.0):
            choice = choose(cores, _measured(share, usable))
            used = max(choice.num_workers, 1) * choice.num_threads
            assert used <= usable, (usable, share, choice)
            assert (choice.num_workers > 0) == (usable * share >= GIL_BOUND), (usable, share)
            if choice.num_workers:  # each process below the bound, and no more than a process's
                assert choice.num_threads * share < GIL_BOUND or choice.num_threads == 1
                assert usable - used < choice.num_threads  # worth of cores left unused


def test_threads_below_the_bound_processes_above_both_on_many_cores() -> None:
    two = _given(2)
    simplejpeg = choose(two, _measured(0.12, 2))
    assert (simplejpeg.num_workers, simplejpeg.num_threads) == (0, 2)
    assert "12% of the loader's work, so 2 threads at full speed would keep it busy 24%" in simplejpeg.why
    pillow = choose(two, _measured(0.27, 2))
    assert (pillow.num_workers, pillow.num_threads) == (2, 1) and "54% of the time, 35% or more" in pillow.why
    both = choose(_given(15), _measured(0.1, 15))  # 3 threads per process: 0.3 of its GIL
    assert (both.num_workers, both.num_threads) == (5, 3)
    whole = choose(_given(15), _measured(0.12, 15))  # 7 x 2 would leave a core unused
    assert (whole.num_workers, whole.num_threads) == (15, 1)
    eight = choose(_given(8), _measured(0.1, 8))  # 3 per process would leave 2 cores unused
    assert (eight.num_workers, eight.num_threads) == (4, 2)
    assert (choose(_given(15), _measured(1.0, 15)).num_workers, 15) == (15, 15)


def test_a_loader_whose_threads_mostly_wait_keeps_threads() -> None:
    # A stage that sleeps (or reads) leaves the loader's threads idle: what little work there is
    # holds the GIL, yet nothing waits for it.
    idle = choose(_given(2), _measured(0.9, 2, busy=BUSY_CORES - 0.05))
    assert (idle.num_workers, idle.num_threads) == (0, 2) and "they wait" in idle.why


def test_without_per_thread_times_the_gil_share_of_the_wall_time_decides() -> None:
    assert choose(_given(2), _measured(0.1, 0)).num_workers == 0
    assert choose(_given(2), _measured(0.5, 0)).num_workers == 2


def test_choices_that_need_no_measurement(tmp_path: Path) -> None:
    one = _cores(tmp_path, 1, 8)
    assert initial(one, has_gil=True, no_processes=None) == initial(one, has_gil=True, no_processes="x")
    choice = initial(one, has_gil=True, no_processes=None)
    assert choice is not None and (choice.num_workers, choice.num_threads) == (0, 1)
    four = _cores(tmp_path, 5, 8)
    free = initial(four, has_gil=False, no_processes=None)
    assert free is not None and (free.num_workers, free.num_threads) == (0, 4) and "without a GIL" in free.why
    kept = initial(four, has_gil=True, no_processes="each worker would read it all")
    assert kept is not None and kept.num_workers == 0 and "each worker would read it all" in kept.why
    assert initial(four, has_gil=True, no_processes=None) is None  # measure


@pytest.mark.parametrize("usable", [2, 4])
def test_describe(usable: int) -> None:
    assert choose(_given(usable), _measured(0.0, usable)).describe() == f"{usable} threads in this process"
    assert choose(_given(2), _measured(1.0, 2)).describe() == "2 worker processes x 1 thread"
