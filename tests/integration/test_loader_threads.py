"""ss.Loader: thread mode gives the one-thread batches, resumes exactly in a fresh process (also
across modes), and every way of stopping leaves no thread, process or shared-memory segment."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _components import require_cuda, require_module
from _loader_cases import keys, make, pipeline, state_after, stop, write_shards
from _procs import run_in_session, run_job

import shardstream as ss
from shardstream.errors import StateError

HERE = Path(__file__).resolve().parent
CASES = ("shuffled", "equal", "webdataset")


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("loader"))


def _ours() -> list[str]:
    """The loader's threads: its producer and its pool (other tests' threads, such as a cache
    heartbeat, may live on in this process)."""
    names = (t.name for t in threading.enumerate())
    return sorted(n for n in names if n.startswith(("shardstream-loader", "shardstream-map")))


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _epoch(loader: ss.Loader) -> list[list[str]]:
    return [keys(b) for b in loader]


@pytest.mark.parametrize("case", CASES)
def test_threads_give_exactly_the_one_thread_batches(urls: list[str], case: str) -> None:
    with make(case, urls) as one:
        reference = [_epoch(one), _epoch(one)]  # two epochs: the second is shuffled anew
    assert reference[0] != reference[1]
    for threads in (2, 4):
        with make(case, urls, num_threads=threads) as loader:
            assert [_epoch(loader), _epoch(loader)] == reference, f"{threads} threads"


def test_the_loader_makes_tensors_and_collates_like_a_dataloader(urls: list[str]) -> None:
    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    with ss.Loader(pipeline("shuffled", urls), batch_size=4, num_threads=2, drop_last=True) as loader:
        batches = list(loader)
    assert all(isinstance(b[1], torch.Tensor) and b[1].shape == (4,) for b in batches)
    assert all(isinstance(b[0], list) and len(b[0]) == 4 for b in batches)
    total = sum(len(b[0]) for b in batches)
    with ss.Loader(pipeline("shuffled", urls), batch_size=4) as loader:
        assert total == 4 * (sum(len(b[0]) for b in loader) // 4)


@pytest.mark.parametrize(("threads", "workers"), [(3, 0), (2, 2)])
def test_resume_continues_exactly_in_a_fresh_process(
    urls: list[str], tmp_path: Path, threads: int, workers: int
) -> None:
    runs, expected = [], []
    for case in CASES:
        with make(case, urls, threads, workers) as loader:
            full = _epoch(loader)
        for n in sorted({1, len(full) // 2, len(full) - 1}):
            state = state_after(make(case, urls, threads, workers), n)
            # Restored with another number of threads: threads never enter the state.
            runs.append(
                {"case": case, "num_threads": 1 if threads > 1 else 2, "num_workers": workers, "state": state}
            )
            expected.append((case, n, full))
    for (case, n, full), rest in zip(
        expected, run_job(HERE / "_loader_cases.py", {"urls": urls, "runs": runs}, tmp_path), strict=True
    ):
        assert full[:n] + rest == full, f"{case}: resumed after {n} of {len(full)} batches"


@pytest.mark.parametrize(("before", "after"), [((0, 2), (2, 1)), ((2, 2), (0, 3))])
def test_elastic_resume_between_threads_and_processes(
    urls: list[str], before: tuple[int, int], after: tuple[int, int]
) -> None:
    (w0, t0), (w1, t1) = before, after
    with make("equal", urls, t0, w0) as loader:
        full = Counter(k for b in _epoch(loader) for k in b)
    state = state_after(make("equal", urls, t0, w0), 3)
    with make("equal", urls, t0, w0) as loader:
        it = iter(loader)
        seen = Counter(k for _ in range(3) for k in keys(next(it)))
    with make("equal", urls, t1, w1) as resumed:
        resumed.load_state_dict(state)
        rest = Counter(k for b in resumed for k in keys(b))
    assert seen + rest == full  # the same samples, each once; the order is new


def test_a_state_from_another_pipeline_is_refused(urls: list[str]) -> None:
    state = state_after(make("shuffled", urls, 2), 2)
    with pytest.raises(StateError, match="different dataset"):
        make("equal", urls, 2).load_state_dict(state)


class _Boom(Exception):
    pass


def _explode_at(key: str) -> Any:
    def fn(sample: dict[str, Any]) -> dict[str, Any]:
        if sample["__key__"] == key:
            raise _Boom(key)
        return sample

    return fn


def test_an_error_in_a_stage_arrives_after_the_batches_before_it(urls: list[str]) -> None:
    ds = ss.ShardStream(urls, shuffle_shards=False).map(_explode_at("s2_005")).to_tuple("__key__")
    got: list[str] = []
    with ss.Loader(ds, batch_size=4, num_threads=3) as loader, pytest.raises(_Boom):
        for batch in loader:
            got.extend(batch[0])
    # 7 whole batches: shards 0 and 1 (9 + 14 samples) and s2_000..s2_004; the 8th held s2_005
    assert got == [f"s{s}_{i:03d}" for s, n in enumerate([9, 14, 5]) for i in range(n)]
    assert _ours() == []


def test_skipping_handlers_go_on_and_count_on_threads(urls: list[str]) -> None:
    stage = ss.pipeline.Map(_explode_at("s2_005"), handler=ss.ignore_and_continue)
    ds = ss.ShardStream(urls, shuffle_shards=False).compose(stage).to_tuple("__key__")
    with ss.Loader(ds, batch_size=None, num_threads=3) as loader:
        got = [b[0] for b in loader]
    assert len(got) == sum([9, 14, 11, 17, 12, 20]) - 1 and "s2_005" not in got
    assert stage.stats.skipped == 1


@pytest.mark.parametrize("how", ["break", "close", "exception", "garbage"])
def test_every_stop_leaves_no_thread_and_no_segment(urls: list[str], how: str) -> None:
    before_shm = _shm()
    loader = make("shuffled", urls, 3)
    it = iter(loader)
    next(it)
    assert _ours(), "the producer and the pool run while iterating"
    if not stop(how, loader, it):
        del it, loader
        gc.collect()
    assert _ours() == []
    assert _shm() - before_shm == set()


def test_process_mode_reaps_its_workers(urls: list[str]) -> None:
    import multiprocessing

    with make("shuffled", urls, num_threads=2, num_workers=2) as loader:
        it = iter(loader)
        next(it)
        assert len(multiprocessing.active_children()) >= 2
    assert multiprocessing.active_children() == []


def test_pin_memory_and_device_are_no_ops_without_cuda(
    urls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    if torch.cuda.is_available():  # (test_pin_memory_and_device_reach_the_gpu runs there instead)
        pytest.skip("not tested here: the CPU fallback of pin_memory= and device= (a CUDA device is present)")
    with ss.Loader(
        pipeline("shuffled", urls), batch_size=4, num_threads=2, pin_memory=True, device="cuda"
    ) as L:
        batches = list(L)
    assert batches and all(b[1].device.type == "cpu" for b in batches)
    assert "CUDA is not available" in caplog.text


def test_pin_memory_and_device_reach_the_gpu(urls: list[str]) -> None:
    """The CUDA path itself: pinned batches, and batches copied to the device on a side stream,
    with the same contents as on the CPU. Skipped without a CUDA device, on CI too (no GPU there)."""
    require_cuda("pin_memory=True and device='cuda' on a GPU")
    expected = [b[1] for b in ss.Loader(pipeline("shuffled", urls), batch_size=4, num_threads=2)]
    with ss.Loader(pipeline("shuffled", urls), batch_size=4, num_threads=2, pin_memory=True) as loader:
        pinned = [b[1] for b in loader]
    assert pinned and all(t.is_pinned() for t in pinned)
    with ss.Loader(pipeline("shuffled", urls), batch_size=4, num_threads=2, device="cuda") as loader:
        moved = [b[1] for b in loader]
    assert all(t.device.type == "cuda" for t in moved)
    assert [t.cpu().tolist() for t in moved] == [t.tolist() for t in expected]


def test_the_loader_refuses_what_it_cannot_run() -> None:
    with pytest.raises(TypeError, match="shardstream pipelines"):
        ss.Loader([1, 2, 3])
    with pytest.raises(ValueError, match="num_threads"):
        ss.Loader(ss.DataPipeline([1, 2, 3]), num_threads=0)


def test_numpy_batches_come_out_as_one_array(urls: list[str]) -> None:
    ds = ss.DataPipeline(tuple(np.full((2, 3), i, dtype=np.float32) for i in range(10)))
    with ss.Loader(ds, batch_size=4, num_threads=2, collate_fn=np.stack) as loader:
        shapes = [b.shape for b in loader]
    assert shapes == [(4, 2, 3), (4, 2, 3), (2, 2, 3)]


_TUNE_SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
sys.path.insert(0, {here!r})
import shardstream as ss
from _loader_cases import pipeline
with ss.Loader(pipeline("shuffled", {urls!r}), batch_size=4, num_threads=2, **{kwargs!r}) as loader:
    print(sum(len(b[0]) for b in loader))
"""


@pytest.mark.parametrize(
    ("setting", "kwargs", "tuned"),
    [(None, {}, False), ("0", {}, False), ("1", {}, True), (None, {"tune_malloc": True}, True),
     ("1", {"tune_malloc": False}, False)],
)  # fmt: skip
def test_thread_mode_tunes_the_allocator_only_when_asked(
    urls: list[str], setting: str | None, kwargs: dict[str, Any], tuned: bool
) -> None:
    # The user's process is theirs: mallopt there is opt-in (worker processes stay tuned).
    from shardstream.malloc import is_glibc

    if not is_glibc():
        pytest.skip("allocator tuning is glibc's")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDSTREAM_")}
    if setting is not None:
        env["SHARDSTREAM_TUNE_MALLOC"] = setting
    script = _TUNE_SCRIPT.format(here=str(HERE), urls=urls, kwargs=kwargs)
    code, output = run_in_session([sys.executable, "-c", script], cwd=HERE, env=env, timeout=120)
    assert code == 0, output[-2000:]
    assert int(output.split()[-1]) > 0  # the samples it read, printed last
    logged = "raised glibc's mmap and trim thresholds" in output
    assert logged is tuned, output[-2000:]


def _short_last_batch(urls: list[str], kind: str) -> Any:
    ds = pipeline("shuffled", urls)  # 66 samples: batches of 5 end with a short one
    if kind == "webloader, 0 workers":
        return ss.WebLoader(ds, batch_size=5, num_workers=0)
    return ss.Loader(ds, batch_size=5, num_threads=2, num_workers=2 if kind == "processes" else 0)


@pytest.mark.parametrize("kind", ["webloader, 0 workers", "threads", "processes"])
def test_a_state_taken_after_the_last_short_batch_resumes_with_nothing_left(
    urls: list[str], kind: str
) -> None:
    # Regression: the position after a short last batch names the next epoch; restoring it
    # re-ran that whole epoch in place of the (finished) one, with or without workers.
    loader = _short_last_batch(urls, kind)
    epochs = [_epoch(loader), _epoch(loader)]
    assert len(epochs[0][-1]) < 5
    loader.close()
    loader = _short_last_batch(urls, kind)
    it = iter(loader)
    for _ in range(len(epochs[0])):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    resumed = _short_last_batch(urls, kind)
    resumed.load_state_dict(state)
    assert _epoch(resumed) == []
    assert _epoch(resumed) == epochs[1]  # and the next epoch is the uninterrupted run's
    resumed.close()


def test_iterating_a_loader_nobody_holds_yields_the_whole_epoch(urls: list[str]) -> None:
    # Regression: the loader (which owns the thread pool) was collected while its epoch ran,
    # and the epoch ended early without an error.
    expected = [keys(b) for b in make("shuffled", urls)]
    assert [keys(b) for b in ss.Loader(pipeline("shuffled", urls), batch_size=4, num_threads=2)] == expected
    assert _ours() == []


def test_the_device_copy_keeps_the_batch_structure() -> None:
    # The copy a device= loader makes (run here to the CPU: no GPU on the test machine).
    from collections import namedtuple

    from shardstream.loader.device import move as _move

    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    pair = namedtuple("pair", "image label")
    batch = {"x": (torch.ones(2), [torch.zeros(1), "name"]), "p": pair(torch.ones(1), 3)}
    moved = _move(batch, torch.device("cpu"), torch)
    assert type(moved["x"]) is tuple and isinstance(moved["x"][1], list) and moved["x"][1][1] == "name"
    assert type(moved["p"]) is pair and moved["p"].label == 3 and torch.equal(moved["p"].image, torch.ones(1))


def test_stats_report_each_threaded_stage_and_a_verdict(urls: list[str]) -> None:
    with make("shuffled", urls, num_threads=2) as loader:
        assert "num_threads=N" in make("shuffled", urls).stats()["threads_verdict"]
        assert "iterate the loader first" in loader.stats()["threads_verdict"]
        for _ in loader:
            pass
        report = loader.stats()
    stages = {s["stage"].partition(":")[2].split()[0] for s in report["threads"]}
    assert {"decode", "map", "to_tuple"} <= stages, report["threads"]
    assert all(0.0 <= s["gil_wait"] <= 1.0 for s in report["threads"])
    assert report["num_threads"] == 2 and report["threads_verdict"]


def test_the_verdict_names_a_stage_that_holds_the_gil() -> None:
    from shardstream.telemetry.report import GIL_BOUND, threads_verdict

    free = {"stage": "5:decode", "gil_wait": 0.02}
    held = {"stage": "6:map slow_python", "gil_wait": GIL_BOUND + 0.2}
    verdict = threads_verdict([free, held], 4)
    assert "6:map slow_python" in verdict and "5:decode" not in verdict
    assert "num_workers" in verdict and "holds the GIL" in verdict
    assert "in parallel" in threads_verdict([free], 4)


def test_video_decoding_on_the_loader_s_threads_starts_no_ffmpeg_threads_of_its_own() -> None:
    require_module("av", "video and audio decoding with PyAV", package="PyAV")
    from shardstream.decoders._av import thread_count
    from shardstream.pipeline.parallel import Threads

    assert thread_count(None) == 0  # automatic in a plain thread: FFmpeg picks
    with Threads(2) as pool:
        # Each loader thread shares the cores with the others, as a DataLoader worker does.
        assert pool.submit(thread_count, None).result() == 1
        assert pool.submit(thread_count, 3).result() == 3


@pytest.mark.parametrize("workers", [0, 2])
def test_ss_loader_gives_what_webloader_gives(urls: list[str], workers: int) -> None:
    # What WebLoader(engine="threads" | "shm") checked before it was removed: ss.Loader with
    # threads gives exactly the one-process order of WebLoader without workers, and with
    # worker processes the DataLoader's interleaving of its workers.
    def web(workers: int) -> Any:
        return ss.WebLoader(pipeline("shuffled", urls), batch_size=4, num_workers=workers)

    with web(0) as one, web(2) as two:
        reference = {0: _epoch(one), 2: _epoch(two)}
    loader = ss.Loader(pipeline("shuffled", urls), batch_size=4, num_threads=2, num_workers=workers)
    with loader:
        assert _epoch(loader) == reference[workers]


def test_a_state_from_thread_mode_restores_in_webloader(urls: list[str]) -> None:
    with ss.WebLoader(pipeline("shuffled", urls), batch_size=4, num_workers=0) as full:
        reference = _epoch(full)
    with ss.Loader(pipeline("shuffled", urls), batch_size=4, num_threads=3) as first:
        it = iter(first)
        head = [keys(next(it)) for _ in range(3)]
        state = first.state_dict()
    with ss.WebLoader(pipeline("shuffled", urls), batch_size=4, num_workers=0) as second:
        second.load_state_dict(state)
        assert head + _epoch(second) == reference


@pytest.mark.parametrize("engine", ["threads", "shm", "torch"])
def test_the_engine_argument_is_refused_saying_what_to_write(urls: list[str], engine: str) -> None:
    with pytest.raises(TypeError, match=r"ss\.Loader\(dataset, batch_size=\.\.\., num_threads=N\)"):
        ss.WebLoader(pipeline("shuffled", urls), batch_size=4, num_workers=2, engine=engine)
