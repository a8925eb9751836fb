"""ss.Loader's automatic mode (loader/_auto.py): a pipeline whose Python holds the GIL runs in
worker processes, one that releases it stays on threads; given counts are never second-guessed;
a switch mid-epoch or at an epoch's start loses and repeats no sample; the cores it uses follow a
real affinity mask and a real cgroup quota; the choice is logged once."""

from __future__ import annotations

import json
import logging
import os
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _procs import run_in_session
from _resume_cases import write_shards

import shardstream as ss
from shardstream.loader import _auto
from shardstream.loader._choice import GIL_BOUND
from shardstream.loader._cores import detect_cores

COUNTS = [250] * 8  # 2,000 samples
TOTAL = sum(COUNTS)
BATCH = 16
SAMPLER = "shardstream-gil-sampler"

needs_two_cores = pytest.mark.skipif(
    detect_cores().usable < 2, reason="the automatic mode measures only with 2 cores or more to use"
)


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("auto"), COUNTS)


@pytest.fixture(autouse=True)
def _short_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measure for 0.25 s instead of 0.5 s: the epochs here are short."""
    monkeypatch.setattr(_auto, "PROBE_SECONDS", 0.25)


def _spin(sample: dict[str, Any]) -> dict[str, Any]:
    """About 200 us of Python: holds the GIL throughout."""
    end = time.perf_counter() + 200e-6
    while time.perf_counter() < end:
        pass
    return sample


def _nap(sample: dict[str, Any]) -> dict[str, Any]:
    """Half a millisecond asleep: the GIL is free meanwhile (as in a decode in C, or I/O)."""
    time.sleep(0.0005)
    return sample


def _passing(samples: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A plain-function stage: it saves no position, so a state cannot be re-split over workers."""
    yield from samples


def _pipeline(urls: list[str], fn: Any, *, shuffled: bool = False) -> Any:
    ds = ss.ShardStream(urls, shuffle_shards=shuffled, seed=11)
    if shuffled:
        ds = ds.shuffle(64)
    return ds.map(fn).to_tuple("__key__", "cls")


def _epoch(loader: Any) -> list[str]:
    return [key for batch in loader for key in batch[0]]


def _until_chosen(loader: ss.Loader, epochs: int = 6) -> list[list[str]]:
    """Whole epochs until the loader has chosen (and one more, to run the choice)."""
    seen = []
    for _ in range(epochs):
        seen.append(_epoch(loader))
        if loader.stats()["auto"]["state"] == "chosen":
            seen.append(_epoch(loader))
            return seen
    raise AssertionError(f"no choice after {epochs} epochs: {loader.stats()['auto']}")


def _whole(keys: list[str]) -> None:
    assert len(keys) == TOTAL and len(set(keys)) == TOTAL, (len(keys), len(set(keys)))


def _samplers() -> int:
    return sum(t.name == SAMPLER for t in threading.enumerate())


@needs_two_cores
def test_a_gil_bound_pipeline_goes_to_processes_and_says_so_once(
    urls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("torch")
    usable = detect_cores().usable
    with caplog.at_level(logging.INFO, logger="shardstream.loader._auto"):
        with ss.Loader(_pipeline(urls, _spin), batch_size=BATCH) as loader:
            assert (loader.num_workers, loader.num_threads) == (0, usable)  # measuring on threads
            epochs = _until_chosen(loader)
            epochs.append(_epoch(loader))
            auto = loader.stats()["auto"]
            assert loader.num_workers == auto["num_workers"] > 0
    for keys in epochs:
        _whole(keys)
    assert auto["num_workers"] * auto["num_threads"] <= usable
    measured = auto["measured"]
    assert usable * measured["gil_share_of_work"] >= GIL_BOUND and measured["gil_share"] > 0.5, auto
    assert auto["cores"]["usable"] == usable and auto["switched"] is not None
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ss.Loader chose")]
    assert len(lines) == 1, lines
    assert "worker process" in lines[0] and "the GIL was held" in lines[0] and "cores:" in lines[0]
    assert _samplers() == 0


@needs_two_cores
def test_a_pipeline_that_releases_the_gil_stays_on_threads(urls: list[str]) -> None:
    usable = detect_cores().usable
    with ss.Loader(_pipeline(urls, _nap), batch_size=BATCH) as loader:
        for keys in _until_chosen(loader):
            _whole(keys)
        auto = loader.stats()
    assert (auto["auto"]["num_workers"], auto["auto"]["num_threads"]) == (0, usable), auto["auto"]
    assert auto["auto"]["measured"]["gil_share"] < 0.5
    assert auto["auto"]["switched"] is None and auto["num_threads"] == usable
    assert auto["gil_enabled"] is True
    assert _samplers() == 0


def test_given_counts_are_never_second_guessed(urls: list[str]) -> None:
    spin = _pipeline(urls, _spin)
    with ss.Loader(spin, batch_size=BATCH, num_threads=2) as loader:
        for _ in range(2):
            for _ in loader:
                assert _samplers() == 0
        stats = loader.stats()
    assert stats["auto"] is None and stats["num_threads"] == 2 and loader.num_workers == 0
    with ss.Loader(spin, batch_size=BATCH, num_threads=1) as loader:
        assert (loader.num_workers, loader.num_threads) == (0, 1)
    pytest.importorskip("torch")
    with ss.Loader(spin, batch_size=BATCH, num_workers=2) as loader:
        _whole(_epoch(loader))
        stats = loader.stats()
    assert (loader.num_workers, loader.num_threads) == (2, 1)
    assert stats["auto"] is None and stats["gil_enabled"] is True


def test_arguments_of_worker_processes_need_a_count(urls: list[str]) -> None:
    with pytest.raises(
        ValueError, match=r"worker_init_fn=.*without num_workers= or num_threads=.*num_workers=M"
    ):
        ss.Loader(_pipeline(urls, _nap), batch_size=BATCH, worker_init_fn=print)
    with pytest.raises(ValueError, match="generator="):
        ss.Loader(_pipeline(urls, _nap), batch_size=BATCH, generator=object())


@needs_two_cores
@pytest.mark.parametrize("shuffled", [False, True], ids=["plain", "shuffled"])
def test_a_switch_mid_epoch_gives_exactly_the_samples_of_a_fixed_run(urls: list[str], shuffled: bool) -> None:
    pytest.importorskip("torch")
    with ss.Loader(_pipeline(urls, _spin, shuffled=shuffled), batch_size=BATCH, num_threads=1) as fixed:
        reference = [_epoch(fixed), _epoch(fixed)]
    with ss.Loader(_pipeline(urls, _spin, shuffled=shuffled), batch_size=BATCH) as loader:
        epochs = [_epoch(loader), _epoch(loader)]
        auto = loader.stats()["auto"]
    switched = auto["switched"]
    assert switched is not None and switched["epoch"] == 0, auto
    head = switched["after_batches"] * BATCH
    assert 0 < head < TOTAL  # mid-epoch
    assert epochs[0][:head] == reference[0][:head]  # thread mode: the one-thread order
    for mine, theirs in zip(epochs, reference, strict=True):
        _whole(mine)
        assert sorted(mine) == sorted(theirs)


@needs_two_cores
def test_a_state_taken_after_a_switch_resumes_exactly(urls: list[str]) -> None:
    pytest.importorskip("torch")
    pipeline = _pipeline(urls, _spin, shuffled=True)
    with ss.Loader(pipeline, batch_size=BATCH) as loader:
        it = iter(loader)
        taken: list[str] = []
        while loader.num_workers == 0:  # the batch that comes with the switch included
            taken += list(next(it)[0])
        for _ in range(3):
            taken += list(next(it)[0])
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["num_workers"] == loader.num_workers > 0
    with ss.Loader(pipeline, batch_size=BATCH, num_threads=1) as resumed:
        resumed.load_state_dict(state)
        rest = _epoch(resumed)
    _whole(taken + rest)


@needs_two_cores
def test_a_state_under_a_trainer_reaches_back_across_the_switch(urls: list[str]) -> None:
    """As Lightning does: a batch is fetched before the step on the one before starts (the
    callback's ``batch_trained``), so the state is the position after the last batch trained on,
    which may be thread mode's while the first batch from the worker processes waits."""
    pytest.importorskip("torch")
    pipeline = _pipeline(urls, _spin)
    with ss.Loader(pipeline, batch_size=BATCH) as loader:
        loader.trainer_attached = True
        it = iter(loader)
        trained: list[str] = []
        ahead = list(next(it)[0])
        while True:
            fetched = list(next(it)[0])  # Lightning's fetcher takes the next batch first ...
            if loader.num_workers > 0:  # ... which came from the worker processes: checkpoint now
                break
            loader.batch_trained()  # ... then the step on the one before starts
            trained += ahead
            ahead = fetched
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["num_workers"] == 0  # thread mode's position: the untrained batch is from threads
    with ss.Loader(pipeline, batch_size=BATCH, num_threads=1) as resumed:
        resumed.load_state_dict(state)
        rest = _epoch(resumed)
    _whole(trained + rest)
    assert rest[: len(ahead)] == ahead  # the batch fetched but not trained on comes again


@needs_two_cores
@pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning")
@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
@pytest.mark.filterwarnings("ignore:Your `IterableDataset` has `__len__` defined:UserWarning")
def test_under_a_lightning_trainer_an_epoch_keeps_the_length_it_counted(
    urls: list[str], tmp_path: Path
) -> None:
    """Lightning ends an epoch after ``len(loader)`` batches, counted in thread mode: worker
    processes, each with a short last batch of its own, would make more, and the last would be
    skipped. So under a Trainer the loader keeps threads when the counts differ."""
    lightning = pytest.importorskip("lightning.pytorch")
    torch = pytest.importorskip("torch")

    class Keys(lightning.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.trained: list[list[str]] = []

        def on_train_epoch_start(self) -> None:
            self.trained.append([])

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.trained[-1].extend(batch[0])
            return self.layer(torch.zeros(len(batch[0]), 1)).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.0)

    loader = ss.Loader(_pipeline(urls, _spin).with_length(TOTAL), batch_size=BATCH)
    module = Keys()
    trainer = lightning.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    with loader:
        trainer.fit(module, train_dataloaders=loader)
        auto = loader.stats()["auto"]
    assert auto["state"] == "chosen" and auto["num_workers"] == 0, auto
    assert "Lightning Trainer counted 125 batches" in auto["why"]
    assert len(module.trained) == 2
    for keys in module.trained:
        _whole(keys)


@needs_two_cores
def test_a_pipeline_that_cannot_resplit_switches_when_the_next_epoch_starts(urls: list[str]) -> None:
    pytest.importorskip("torch")

    def pipeline() -> Any:
        return ss.DataPipeline(
            ss.SimpleShardList(urls),
            ss.split_by_worker,
            ss.tarfile_to_samples(),
            _passing,
            ss.map(_spin),
            ss.to_tuple("__key__", "cls"),
        )

    with ss.Loader(pipeline(), batch_size=BATCH, num_threads=1) as fixed:
        reference = _epoch(fixed)
    with ss.Loader(pipeline(), batch_size=BATCH) as loader:
        epochs = _until_chosen(loader)
        auto = loader.stats()["auto"]
    assert auto["num_workers"] > 0
    switched = auto["switched"]
    assert switched == {"epoch": len(epochs) - 1, "after_batches": 0}, auto
    assert epochs[0] == reference  # epoch 0 ran whole on threads
    for keys in epochs:
        _whole(keys)


def test_a_pipeline_every_worker_would_read_whole_stays_on_threads(urls: list[str]) -> None:
    samples = [{"__key__": f"k{i:04d}", "cls": i} for i in range(TOTAL)]
    pipeline = ss.DataPipeline(lambda: iter(samples), ss.map(_spin), ss.to_tuple("__key__", "cls"))
    with ss.Loader(pipeline, batch_size=BATCH) as loader:
        auto = loader.stats()["auto"]
        _whole(_epoch(loader))
        _whole(_epoch(loader))
    assert auto["state"] == "chosen" and auto["num_workers"] == 0 and auto["measured"] is None
    assert "every worker process would read whole" in auto["why"] or auto["cores"]["usable"] == 1
    assert _samplers() == 0


# -- the cores, for real -------------------------------------------------------------------------
_CHILD = textwrap.dedent(
    """
    import json, os, sys
    import shardstream as ss
    cgroup = sys.argv[2]
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    if sys.argv[3]:
        os.sched_setaffinity(0, {int(sys.argv[3])})
    dataset = ss.ShardStream(json.loads(sys.argv[1]), shuffle_shards=False).to_tuple("__key__")
    with ss.Loader(dataset, batch_size=8) as loader:
        n = sum(len(b[0]) for b in loader)
        print(json.dumps({"n": n, "auto": loader.stats()["auto"], "threads": loader.num_threads}))
    """
)


def _child(urls: list[str], cgroup: str = "", cpu: str = "") -> dict[str, Any]:
    code, out = run_in_session(
        [sys.executable, "-c", _CHILD, json.dumps(urls), cgroup, cpu],
        cwd=Path.cwd(),
        env=os.environ,
        timeout=120,
    )
    assert code == 0, out[-3000:]
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert found["n"] == TOTAL
    return found


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity masks here")
def test_an_affinity_mask_of_one_cpu_gives_one_thread(urls: list[str]) -> None:
    cpu = min(os.sched_getaffinity(0))
    found = _child(urls, cpu=str(cpu))
    auto = found["auto"]
    assert auto["cores"]["affinity"] == 1 and auto["cores"]["usable"] == 1, auto
    assert (auto["num_workers"], auto["num_threads"], found["threads"]) == (0, 1, 1)
    assert "affinity mask" in auto["cores"]["limit"]


def _make_cgroup(name: str) -> Path | None:
    """A child cgroup of this process's cpu cgroup with a quota of one CPU (v1 or v2), or
    ``None`` where cgroups cannot be written here (not root, read-only, no cpu controller)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            base, files = Path("/sys/fs/cgroup/cpu") / path.lstrip("/"), {"cpu.cfs_quota_us": "100000"}
        elif controllers == "" and (Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.max").exists():
            base, files = Path("/sys/fs/cgroup") / path.lstrip("/"), {"cpu.max": "100000 100000"}
        else:
            continue
        group = base / name
        try:
            group.mkdir()
        except OSError:
            continue
        try:
            for file, value in files.items():
                (group / file).write_text(value)
                if file == "cpu.cfs_quota_us":
                    (group / "cpu.cfs_period_us").write_text("100000")
        except OSError:
            group.rmdir()
            continue
        return group
    return None


@pytest.fixture
def one_cpu_cgroup() -> Iterator[Path]:
    group = _make_cgroup(f"shardstream-test-{os.getpid()}")
    if group is None:
        pytest.skip("no writable cgroup with a cpu controller here (needs root)")
    try:
        yield group
    finally:
        for _ in range(50):  # the child has exited: the group empties as the kernel reaps it
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cgroups are Linux's")
def test_a_cgroup_quota_of_one_cpu_gives_one_thread(urls: list[str], one_cpu_cgroup: Path) -> None:
    found = _child(urls, cgroup=str(one_cpu_cgroup))
    cores = found["auto"]["cores"]
    assert cores["quota"] == 1.0 and cores["usable"] == 1, cores
    assert cores["quota_file"].startswith(str(one_cpu_cgroup)) and "cgroup CPU quota" in cores["limit"]
    assert found["threads"] == 1 and found["auto"]["num_workers"] == 0


@needs_two_cores
def test_with_several_ranks_processes_keep_thread_modes_batch_count(urls: list[str]) -> None:
    """Each rank measures and chooses on its own: a rank whose worker processes made another
    number of batches than thread mode (each worker's short last batch) would leave the other
    ranks waiting at a collective, so with several ranks the loader keeps threads then."""
    pytest.importorskip("torch")
    world = ss.World(rank=0, world_size=2)
    ds = ss.ShardStream(urls, shuffle_shards=False, world=world).map(_spin).to_tuple("__key__", "cls")
    with ss.Loader(ds, batch_size=BATCH) as loader:
        counted = len(loader)
        epochs = _until_chosen(loader)
        auto = loader.stats()["auto"]
    assert auto["state"] == "chosen" and auto["num_workers"] == 0, auto
    assert f"each of the 2 ranks must make {counted} batches per epoch" in auto["why"], auto["why"]
    for keys in epochs:
        assert len(keys) == TOTAL // 2 and len(set(keys)) == TOTAL // 2
