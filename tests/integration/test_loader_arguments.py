"""Every argument of torch's DataLoader on ``ss.Loader``, in thread mode and in process mode: honoured
(each case observes its effect) or refused when the loader is built, with a message that says why.

The list of arguments is read from ``inspect.signature(torch.utils.data.DataLoader)``: an argument
a new torch adds fails :func:`test_the_table_covers_every_dataloader_argument` until it is handled.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _loader_cases import write_shards

import shardstream as ss
from shardstream.errors import WorkerStuckError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(180)

MODES = ("threads", "processes")
TOTAL = sum([9, 14, 11, 17, 12, 20])  # the samples of _loader_cases' shards


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("arguments"))


def _keys(urls: list[str], *stages: Any) -> Any:
    """The shards in order, ``(key, cls)`` samples (no shuffle: batches are easy to predict)."""
    ds = ss.ShardStream(urls, shuffle_shards=False).decode()
    for stage in stages:
        ds = ds.map(stage)
    return ds.to_tuple("__key__", "cls")


def _loader(urls: list[str], mode: str, *stages: Any, **kw: Any) -> ss.Loader:
    kw.setdefault("batch_size", 4)
    workers = kw.pop("num_workers", 2 if mode == "processes" else 0)
    kw.setdefault("num_threads", 2)
    return ss.Loader(_keys(urls, *stages), num_workers=workers, **kw)


def _refused(urls: list[str], mode: str, pattern: str, **kw: Any) -> None:
    with pytest.raises(ValueError, match=pattern) as info:
        _loader(urls, mode, **kw)
    assert len(str(info.value)) > 80, "the message says why and what to write instead"


# -- the samples' own record of where they were made (module level: workers unpickle them) -------
def _with_pid(sample: dict[str, Any]) -> dict[str, Any]:
    sample["cls"] = os.getpid()
    return sample


def _with_thread(sample: dict[str, Any]) -> dict[str, Any]:
    sample["cls"] = threading.get_native_id()  # the kernel's: not reused soon after a thread ends
    return sample


def _with_torch_seed(sample: dict[str, Any]) -> dict[str, Any]:
    sample["cls"] = torch.initial_seed()
    return sample


_STALL = threading.Event()  # set by a test to let a stalled stage (thread mode) go on


def _stall_late(sample: dict[str, Any]) -> dict[str, Any]:
    if sample["__key__"] == "s4_000":  # batch 14 (4 samples a batch): 13 come before
        if torch.utils.data.get_worker_info() is not None:
            time.sleep(120)  # a worker process: the loader kills it
        else:
            _STALL.wait(60)
    return sample


_MARK = ["unset"]  # set to "parent" at run time: a forked worker sees it, a spawned one does not


def _with_mark(sample: dict[str, Any]) -> dict[str, Any]:
    sample["__key__"] = _MARK[0]
    return sample


class _RecordInit:
    """A worker_init_fn that leaves a file per worker: its index, its PID, and what it found
    already set up (shardstream's own setup runs first)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, worker_id: int) -> None:
        info = torch.utils.data.get_worker_info()
        Path(self.directory, f"w{worker_id}").write_text(f"{os.getpid()} {info.num_workers}")


class _Counted:
    """A stage that leaves a file per sample it made (in the worker or thread that made it)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        Path(self.directory, sample["__key__"]).touch()
        return sample


def _settled(directory: Path) -> int:
    """Files in ``directory`` once no new one came for 0.5 s (at most 10 s)."""
    deadline, last, since = time.monotonic() + 10, -1, time.monotonic()
    while time.monotonic() < deadline:
        n = len(os.listdir(directory))
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > 0.5:
            break
        time.sleep(0.05)
    return last


def _epoch_values(loader: Any) -> list[set[int]]:
    """The ``cls`` values of two epochs (each a set)."""
    with loader:
        return [{int(v) for b in loader for v in b[1]} for _ in range(2)]


# -- one check per argument and mode -------------------------------------------------------------
def dataset(urls: list[str], mode: str, tmp: Path) -> None:
    ds = _keys(urls)
    with ss.Loader(ds, batch_size=4, num_workers=2 if mode == "processes" else 0) as loader:
        assert loader.dataset is ds and sum(len(b[0]) for b in loader) == TOTAL


def batch_size(urls: list[str], mode: str, tmp: Path) -> None:
    with _loader(urls, mode, batch_size=5) as loader:
        sizes = [len(b[0]) for b in loader]
    assert max(sizes) == 5 and sum(sizes) == TOTAL


def shuffle(urls: list[str], mode: str, tmp: Path) -> None:
    _refused(urls, mode, r"shuffle=True.*\.shuffle\(n\)", shuffle=True)
    with _loader(urls, mode, shuffle=False) as same, _loader(urls, mode) as default:
        assert [b[0] for b in same] == [b[0] for b in default]


def sampler(urls: list[str], mode: str, tmp: Path) -> None:
    _refused(
        urls, mode, r"sampler=.*no indices.*split=", sampler=torch.utils.data.SequentialSampler(range(3))
    )


def batch_sampler(urls: list[str], mode: str, tmp: Path) -> None:
    _refused(urls, mode, r"batch_sampler=.*batch_size=", batch_sampler=[[0, 1]])


def num_workers(urls: list[str], mode: str, tmp: Path) -> None:
    with _loader(urls, mode, _with_pid) as loader:
        pids = {int(p) for b in loader for p in b[1]}
    assert pids == ({os.getpid()} if mode == "threads" else pids - {os.getpid()})
    assert len(pids) == (1 if mode == "threads" else 2)


def collate_fn(urls: list[str], mode: str, tmp: Path) -> None:
    with _loader(urls, mode, collate_fn=lambda samples: ("mine", len(samples))) as loader:
        batches = list(loader)
    assert {b[0] for b in batches} == {"mine"} and sum(b[1] for b in batches) == TOTAL


def pin_memory(urls: list[str], mode: str, tmp: Path) -> None:
    with _loader(urls, mode, pin_memory=True) as loader:
        batches = list(loader)
    if torch.cuda.is_available():
        assert all(b[1].is_pinned() for b in batches)
    else:  # nothing to pin for: the batches are the same, in ordinary memory
        assert sum(len(b[0]) for b in batches) == TOTAL and not batches[0][1].is_pinned()


def drop_last(urls: list[str], mode: str, tmp: Path) -> None:
    with _loader(urls, mode, batch_size=5, drop_last=True) as loader:
        sizes = [len(b[0]) for b in loader]
    with _loader(urls, mode, batch_size=5) as loader:
        kept = [len(b[0]) for b in loader]
    assert set(sizes) == {5} and min(kept) < 5 and sum(sizes) == sum(k for k in kept if k == 5)


def timeout(urls: list[str], mode: str, tmp: Path) -> None:
    for kw in ({"timeout": 1.5}, {"worker_timeout": 1.5}, {"timeout": 1.5, "worker_timeout": 600}):
        _STALL.clear()
        loader = _loader(urls, mode, _stall_late, **kw)
        start = time.monotonic()
        try:
            with pytest.raises(WorkerStuckError, match="timed out") as info:
                for _ in loader:  # batches before the stalled sample (some), then the error
                    pass
        finally:
            _STALL.set()
            loader.close()
        assert time.monotonic() - start < 15
        assert "_stall_late" in info.value.stack, info.value.stack
        if mode == "threads":
            assert "cannot be killed" in str(info.value) and "shardstream-loader" in info.value.stack
    _refused(urls, mode, r"timeout=-1", timeout=-1)


def worker_init_fn(urls: list[str], mode: str, tmp: Path) -> None:
    if mode == "threads":
        _refused(
            urls,
            mode,
            r"worker_init_fn=.*num_workers=0.*ShardStream\(seed=\)",
            worker_init_fn=_RecordInit("x"),
        )
        return
    with _loader(urls, mode, _with_pid, worker_init_fn=_RecordInit(str(tmp))) as loader:
        pids = {int(p) for b in loader for p in b[1]}
    found = {p.name: p.read_text().split() for p in tmp.iterdir()}
    assert sorted(found) == ["w0", "w1"]
    assert {int(v[0]) for v in found.values()} == pids and {v[1] for v in found.values()} == {"2"}


def multiprocessing_context(urls: list[str], mode: str, tmp: Path) -> None:
    if mode == "threads":
        _refused(urls, mode, r"multiprocessing_context=.*num_workers > 0", multiprocessing_context="spawn")
        return
    _MARK[0] = "parent"
    try:
        marks = {}
        for how in ("fork", "spawn"):
            context = multiprocessing.get_context(how)
            with _loader(urls, mode, _with_mark, num_workers=1, multiprocessing_context=context) as loader:
                marks[how] = {k for b in loader for k in b[0]}
    finally:
        _MARK[0] = "unset"
    assert marks == {"fork": {"parent"}, "spawn": {"unset"}}


def generator(urls: list[str], mode: str, tmp: Path) -> None:
    if mode == "threads":
        _refused(urls, mode, r"generator=.*seed=", generator=torch.Generator())
        return

    def seeds(seed: int) -> set[int]:
        gen = torch.Generator().manual_seed(seed)
        with _loader(urls, mode, _with_torch_seed, generator=gen, persistent_workers=False) as loader:
            return {int(s) for b in loader for s in b[1]}

    first, again, other = seeds(1234), seeds(1234), seeds(99)
    assert first == again and len(first) == 2 and not first & other


def prefetch_factor(urls: list[str], mode: str, tmp: Path) -> None:
    made = {}
    for factor in (1, 4):
        directory = tmp / str(factor)
        directory.mkdir()
        # One thread: a pool would read a window of samples ahead for its own per-sample work.
        counted = _Counted(str(directory))
        with _loader(urls, mode, counted, batch_size=2, prefetch_factor=factor, num_threads=1) as loader:
            it = iter(loader)
            next(it)
            made[factor] = _settled(directory)
    workers = 2 if mode == "processes" else 1
    # Batch 1 yielded, then per worker: the factor's batches made ahead, one waiting to be put, and
    # one being read (2 samples each); batch rows of a pool thread may run one batch further.
    assert made[1] <= 2 * (1 + workers * 3 + 1), made
    assert made[4] >= made[1] + 2 * workers * 2, made
    _refused(urls, mode, r"prefetch_factor=0", prefetch_factor=0)


def persistent_workers(urls: list[str], mode: str, tmp: Path) -> None:
    stage = _with_pid if mode == "processes" else _with_thread
    kept = _epoch_values(_loader(urls, mode, stage, persistent_workers=True))
    renewed = _epoch_values(_loader(urls, mode, stage, persistent_workers=False))
    assert os.getpid() not in kept[0] | renewed[0]
    # Two workers (or pool threads) in all, kept; or new ones every epoch. (A pool's work may go
    # to one of its threads only.)
    assert len(kept[0] | kept[1]) <= 2 and (mode == "threads" or kept[0] == kept[1])
    assert not renewed[0] & renewed[1]


def pin_memory_device(urls: list[str], mode: str, tmp: Path) -> None:
    _refused(urls, mode, r"pin_memory_device='cuda'.*device='cuda'", pin_memory_device="cuda")
    with _loader(urls, mode, pin_memory_device="") as loader:
        assert sum(len(b[0]) for b in loader) == TOTAL


def in_order(urls: list[str], mode: str, tmp: Path) -> None:
    _refused(urls, mode, r"in_order=False.*in the order", in_order=False)
    with _loader(urls, mode, in_order=True) as loader:
        assert sum(len(b[0]) for b in loader) == TOTAL


TABLE: dict[str, Callable[[list[str], str, Path], None]] = {
    f.__name__: f
    for f in (
        dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory,
        drop_last, timeout, worker_init_fn, multiprocessing_context, generator, prefetch_factor,
        persistent_workers, pin_memory_device, in_order,
    )
}  # fmt: skip


def test_the_table_covers_every_dataloader_argument() -> None:
    names = list(inspect.signature(torch.utils.data.DataLoader).parameters)
    missing = [n for n in names if n not in TABLE]
    assert not missing, f"DataLoader arguments ss.Loader does not handle yet: {missing}"
    loader_takes = set(inspect.signature(ss.Loader).parameters)
    assert set(names) <= loader_takes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(TABLE))
def test_every_dataloader_argument_is_honoured_or_refused(
    urls: list[str], tmp_path: Path, name: str, mode: str
) -> None:
    TABLE[name](urls, mode, tmp_path)
