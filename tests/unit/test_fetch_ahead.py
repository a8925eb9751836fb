"""The fetch-ahead engine on real threads: order, bounds, errors as values, and a clean stop."""

from __future__ import annotations

import threading
import time

import pytest

from shardstream.objects.fetch import FetchAhead


def _fetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("shardstream-fetch")]


class Recorder:
    """A fetch function that sleeps per job and records what ran, and how many ran at once."""

    def __init__(self, delays: dict[int, float] | None = None) -> None:
        self.delays = delays or {}
        self.lock = threading.Lock()
        self.started: list[int] = []
        self.running = self.most = 0

    def __call__(self, job: int) -> str:
        with self.lock:
            self.started.append(job)
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.delays.get(job, 0.001))
            if job % 10 == 7:
                raise ValueError(f"job {job} failed")
            return f"r{job}"
        finally:
            with self.lock:
                self.running -= 1


def test_ordered_delivery_keeps_job_order_and_delivers_errors_in_place() -> None:
    fetch = Recorder({0: 0.05, 1: 0.03})  # the first jobs finish last
    got = list(FetchAhead(fetch, window=8).run(range(30)))
    assert [job for job, _ in got] == list(range(30))
    for job, result in got:
        if job % 10 == 7:
            assert isinstance(result, ValueError) and str(result) == f"job {job} failed"
        else:
            assert result == f"r{job}"
    assert 1 < fetch.most <= 8
    assert not _fetch_threads()


def test_unordered_delivery_is_as_completed() -> None:
    fetch = Recorder({0: 0.2})
    got = [job for job, _ in FetchAhead(fetch, window=4, ordered=False).run(range(6))]
    assert sorted(got) == list(range(6)) and got[0] != 0 and got[-1] == 0


@pytest.mark.parametrize(("window", "max_bytes", "ahead"), [(3, 1 << 30, 3), (32, 250, 3)])
def test_window_and_bytes_bound_what_runs_ahead_of_the_consumer(
    window: int, max_bytes: int, ahead: int
) -> None:
    fetch = Recorder()
    run = FetchAhead(fetch, window=window, max_bytes=max_bytes, nbytes=lambda job: 100).run(range(50))
    try:
        next(run)
        time.sleep(0.1)  # the engine has had time to start everything it may
        # The job being delivered counts: ``ahead`` jobs were taken (by count, or by 100-byte
        # jobs: the window fills while fewer than 250 bytes are held).
        assert len(fetch.started) == ahead
        next(run)
        time.sleep(0.1)
        assert len(fetch.started) == ahead + 1  # one consumed, one more taken
    finally:
        run.close()
    assert not _fetch_threads()


def test_closing_early_wakes_running_jobs_and_joins_every_thread() -> None:
    stop = threading.Event()
    ran: list[tuple[int, bool]] = []

    def fetch(job: int) -> int:
        if job:
            stop.wait(5)  # jobs after the first wait until the run is closed
        ran.append((job, stop.is_set()))
        return job

    run = FetchAhead(fetch, window=4, stop=stop).run(range(1000))
    assert next(run) == (0, 0)
    assert len(_fetch_threads()) == 4
    t = time.monotonic()
    run.close()
    assert time.monotonic() - t < 4  # the stop event woke the waiting jobs (they wait 5 s)
    assert not _fetch_threads()
    # Jobs 1-3 were running and saw the stop; nothing after the window was started.
    assert sorted(ran) == [(0, False), (1, True), (2, True), (3, True)]
    assert not stop.is_set()  # down again, for fetches made directly afterwards


def test_an_empty_run_and_a_window_below_one() -> None:
    assert list(FetchAhead(Recorder()).run([])) == []
    with pytest.raises(ValueError, match="window=0"):
        FetchAhead(Recorder(), window=0)
