"""Exact mid-epoch resume of WebLoader: save after n batches, restore in a fresh process."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from _loader_cases import state_after
from _procs import run_job
from _resume_cases import keys, make, write_shards

import shardstream as ss
from shardstream.errors import StateError

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("resume"))


def _state_after(case: str, urls: list[str], num_workers: int, n: int) -> dict[str, Any]:
    return state_after(make(case, urls, num_workers), n)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_continues_exactly_in_a_fresh_process(
    urls: list[str], num_workers: int, tmp_path: Path
) -> None:
    rng = random.Random(num_workers)
    runs, expected = [], []
    for case in ("shuffled", "equal", "webdataset"):
        full = [keys(b) for b in make(case, urls, num_workers)]
        # Inside the first and the last shard, the middle, and random points.
        cuts = sorted({1, 2, len(full) // 2, len(full) - 2, len(full) - 1, *rng.sample(range(len(full)), 3)})
        for n in cuts:
            runs.append(
                {"case": case, "num_workers": num_workers, "state": _state_after(case, urls, num_workers, n)}
            )
            expected.append((case, n, full))
    restored = run_job(HERE / "_resume_cases.py", {"urls": urls, "runs": runs}, tmp_path)
    for (case, n, full), rest in zip(expected, restored, strict=True):
        assert full[:n] + rest == full, f"{case}: resumed after {n} of {len(full)} batches"


def test_next_epoch_after_a_resumed_one_matches(urls: list[str]) -> None:
    loader = make("shuffled", urls, 2)
    epoch0, epoch1 = [keys(b) for b in loader], [keys(b) for b in loader]
    state = _state_after("shuffled", urls, 2, 3)
    resumed = make("shuffled", urls, 2)
    resumed.load_state_dict(state)
    assert epoch0[:3] + [keys(b) for b in resumed] == epoch0
    assert [keys(b) for b in resumed] == epoch1


def test_state_is_small_and_needs_no_worker_round_trip(urls: list[str]) -> None:
    ds = ss.ShardStream(urls, seed=1).to_tuple("__key__").batched(4)
    loader = ss.WebLoader(ds, batch_size=None, num_workers=2)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    assert len(json.dumps(state)) < 4096, len(json.dumps(state))
    loader.close()


def test_a_state_that_does_not_fit_is_refused_naming_the_fields(urls: list[str]) -> None:
    state = _state_after("shuffled", urls, 2, 3)
    other_seed = ss.WebLoader(
        ss.ShardStream(urls, seed=4).shuffle(20).to_tuple("__key__").batched(4), batch_size=None
    )
    with pytest.raises(StateError, match="seed"):
        other_seed.load_state_dict(state)
    with pytest.raises(StateError, match="shards"):
        make("shuffled", urls[:-1], 2).load_state_dict(state)
    with pytest.raises(StateError, match="saved by 2 ranks .* holds ranks \\[1\\]"):
        make("shuffled", urls, 2).load_state_dict({**state, "rank": 1, "world_size": 2})
    with pytest.raises(StateError, match="missing"):
        make("shuffled", urls, 2).load_state_dict({k: v for k, v in state.items() if k != "workers"})
    with pytest.raises(StateError, match="version"):
        make("shuffled", urls, 2).load_state_dict({"hello": 1})


def test_load_while_iterating_raises(urls: list[str]) -> None:
    loader = make("shuffled", urls, 0)
    it = iter(loader)
    next(it)
    with pytest.raises(StateError, match="iterat"):
        loader.load_state_dict(loader.state_dict())


@pytest.mark.parametrize("before", ["an epoch", "a dropped iter()"])
def test_a_state_loaded_after_persistent_workers_started_is_restored(urls: list[str], before: str) -> None:
    """Persistent workers get the restore with their dataset copy, so the loader starts new ones.

    A dropped ``iter()`` is what Lightning does to a loader that is not a DataLoader (``ss.Loader``
    in process mode holds a WebLoader) before it loads the checkpoint's state.
    """

    def make_persistent() -> ss.WebLoader:
        ds = ss.ShardStream(urls, seed=3).shuffle(20).to_tuple("__key__").batched(4)
        return ss.WebLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)

    state = _state_after("shuffled", urls, 2, 3)
    full = [keys(b) for b in make("shuffled", urls, 2)]
    loader = make_persistent()
    if before == "an epoch":
        assert len(list(loader)) == len(full)
    else:
        iter(loader)  # workers start; the iterator is dropped unstarted
    loader.load_state_dict(state)
    try:
        assert full[:3] + [keys(b) for b in loader] == full
    finally:
        loader.close()


def test_resume_at_90_percent_over_http_reads_only_the_shard_in_progress(
    http_server: Any, tmp_path: Path
) -> None:
    """Instant: shards before the cursor are not opened; the one in progress is a ranged read."""
    sizes = {}
    for s in range(10):
        with ss.ShardWriter(str(tmp_path / f"r{s}-%02d.tar"), maxcount=1000) as sink:
            for i in range(40):
                sink.write({"__key__": f"r{s}_{i:03d}", "bin": bytes(2000)})
        data = (tmp_path / f"r{s}-00.tar").read_bytes()
        sizes[f"resume90/r{s}.tar"] = len(data)
        http_server.write(f"resume90/r{s}.tar", data)
    urls = [http_server.url_for(p) for p in sizes]

    def make() -> ss.WebLoader:
        ds = ss.ShardStream(urls, seed=1).to_tuple("__key__").batched(10)
        return ss.WebLoader(ds, batch_size=None, num_workers=0)

    full = [list(b[0]) for b in make()]
    loader = make()
    it = iter(loader)
    for _ in range(37):  # 92% of 40 batches: 9 shards done, 10 samples into the 10th
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    http_server.reset_counts()
    resumed = make()
    resumed.load_state_dict(state)
    rest = [list(b[0]) for b in resumed]
    assert full[:37] + rest == full
    requested = {p: http_server.range_headers(p) for p in sizes if http_server.gets(p)}
    # Only the shard in progress is opened, with a range starting at its 11th sample.
    assert len(requested) == 1, requested
    [(path, headers)] = requested.items()
    assert len(headers) == 1 and headers[0] is not None and headers[0].startswith("bytes=")
    offset = int(headers[0].split("=")[1].split("-")[0])
    assert 0 < offset < sizes[path]


def test_a_worker_that_finished_its_share_stays_finished_after_a_restore(tmp_path: Path) -> None:
    # Regression: with DataLoader batching and uneven shards, one worker runs out first; its state
    # then names the next epoch, and the restored loader re-ran that whole epoch in its place.
    from _loader_cases import pipeline
    from _loader_cases import write_shards as write_uneven

    uneven = write_uneven(tmp_path)

    def make_loader() -> ss.WebLoader:
        return ss.WebLoader(pipeline("shuffled", uneven), batch_size=4, num_workers=2)

    full = [keys(b) for b in make_loader()]
    for n in (len(full) - 3, len(full) - 1):
        loader = make_loader()
        it = iter(loader)
        for _ in range(n):
            next(it)
        state = json.loads(json.dumps(loader.state_dict()))
        loader.close()
        assert {"epoch": 1, "start": True} in state["workers"], "the cut is after one worker's last batch"
        resumed = make_loader()
        resumed.load_state_dict(state)
        assert full[:n] + [keys(b) for b in resumed] == full
        # Elastically, with one worker: the finished worker's share is not read again.
        elastic = ss.WebLoader(pipeline("shuffled", uneven), batch_size=4, num_workers=1)
        elastic.load_state_dict(state)
        assert sorted(k for b in elastic for k in keys(b)) == sorted(k for b in full[n:] for k in b)
