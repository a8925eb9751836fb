"""How WebLoader starts its workers (``loader/_start.py``) and says where one is stuck
(``loader/_watchdog.py``): fork when no other thread runs, shardstream's forkserver otherwise,
the user's choice always; a bounded wait that names the stuck worker, its PID and its stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch.utils.data as tud
from _procs import children, kill_left_behind

import shardstream as ss
from shardstream.errors import ConfigurationError, WorkerStuckError
from shardstream.forks import foreign_threads
from shardstream.loader import _start

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX start methods")


@pytest.fixture(autouse=True)
def real_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite pins fork (tests/conftest.py); here WebLoader's own rule decides."""
    monkeypatch.delenv("SHARDSTREAM_WORKER_START", raising=False)


@pytest.fixture(scope="module", autouse=True)
def stop_the_forkserver() -> Iterator[None]:
    yield
    _start.stop_server()


def _helpers() -> set[int | None]:
    """multiprocessing's resource tracker and shardstream's forkserver: one each per process,
    kept for its life (the server is stopped when this module ends)."""
    return {resource_tracker._resource_tracker._pid, _start.server_pid()}  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """Every worker of the test is reaped, also when the test fails."""
    before = children()
    yield
    left = kill_left_behind(before, ignore=_helpers)  # killed by PID (then the test fails)
    assert not left, f"processes left behind: {sorted(left)}"


@pytest.fixture
def user_thread() -> Iterator[threading.Thread]:
    """A thread of the user's, alive while the loader starts its workers (as gloo's would be)."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="user-exporter", daemon=True)
    thread.start()
    yield thread
    stop.set()
    thread.join(5)


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("start")
    with ss.ShardWriter(str(root / "s-%06d.tar"), maxcount=30) as sink:
        for i in range(120):
            sink.write({"__key__": f"k{i:04d}", "cls": i})
    return str(root / "s-{000000..000003}.tar")


class ParentPid(tud.IterableDataset[int]):
    """Yields the parent PID of the worker process that runs it."""

    def __iter__(self) -> Iterator[int]:
        yield os.getppid()


def _worker_parents(**kw: Any) -> set[int]:
    with ss.WebLoader(ParentPid(), batch_size=None, num_workers=2, **kw) as loader:
        return set(loader)


def test_workers_are_forked_when_no_other_thread_runs() -> None:
    if foreign_threads():
        pytest.skip(f"this test process runs other threads: {foreign_threads()}")
    assert _start.choose().method == "fork"
    assert _worker_parents() == {os.getpid()}


def test_workers_come_from_the_forkserver_while_another_thread_runs(user_thread: threading.Thread) -> None:
    choice = _start.choose()
    assert choice.method == "forkserver" and choice.reason.startswith("other threads run in this process")
    assert any("user-exporter" in thread for thread in foreign_threads())  # (the reason names six)
    parents = _worker_parents()
    assert parents == {_start.server_pid()} and os.getpid() not in parents


def test_an_explicit_multiprocessing_context_is_honoured(user_thread: threading.Thread) -> None:
    assert _worker_parents(multiprocessing_context="fork") == {os.getpid()}


def test_the_environment_chooses_for_the_whole_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSTREAM_WORKER_START", "forkserver")
    assert _worker_parents() == {_start.server_pid()}
    monkeypatch.setenv("SHARDSTREAM_WORKER_START", "spawn")
    assert _start.choose().method == "spawn"
    monkeypatch.setenv("SHARDSTREAM_WORKER_START", "threads")
    with pytest.raises(ConfigurationError, match="SHARDSTREAM_WORKER_START='threads'"):
        _start.choose()


def test_forkserver_workers_give_the_same_batches_and_take_lambdas_and_closures(
    spec: str, user_thread: threading.Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    offset = 1000  # a closure over a local: cannot be pickled by reference

    def build() -> Any:
        return (
            ss.ShardStream(spec, seed=3)
            .shuffle(20)
            .decode()
            .map(lambda s: {**s, "y": s["cls"] + offset})
            .to_tuple("__key__", "y")
            .batched(8)
        )

    def epoch(**kw: Any) -> list[tuple[list[str], list[int]]]:
        with ss.WebLoader(build(), batch_size=None, num_workers=2, **kw) as loader:
            return [(list(k), [int(v) for v in y]) for k, y in loader]

    by_server = epoch()
    by_fork = epoch(multiprocessing_context="fork")
    assert by_server == by_fork and len(by_server) == 16  # 2 workers x 60 samples, batches of 8
    assert all(y == int(k[1:]) + offset for keys, ys in by_server for k, y in zip(keys, ys, strict=True))


def test_resume_under_the_forkserver_continues_exactly(spec: str, user_thread: threading.Thread) -> None:
    def loader() -> ss.WebLoader:
        dataset = ss.ShardStream(spec, seed=5).shuffle(16).decode().to_tuple("__key__").batched(4)
        return ss.WebLoader(dataset, batch_size=None, num_workers=2)

    full = [list(b[0]) for b in loader()]
    first = loader()
    it = iter(first)
    head = [list(next(it)[0]) for _ in range(7)]
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = [list(b[0]) for b in resumed]
    assert head + rest == full


def test_worker_context_for_a_plain_dataloader(spec: str, user_thread: threading.Thread) -> None:
    context = ss.worker_context()
    assert context is not None and context.get_start_method() == "forkserver"
    dataset = ss.ShardStream(spec).decode().to_tuple("cls").batched(10)
    loader = tud.DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=context)
    assert sorted(int(c) for (b,) in loader for c in b) == list(range(120))


def test_a_script_without_a_main_guard_is_not_run_again_by_forkserver_workers(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys, threading
            import shardstream as ss

            with open(sys.argv[1], "a") as f:  # top-level work, no __main__ guard
                f.write(f"{os.getpid()}\\n")
            with ss.ShardWriter(sys.argv[2] + "/p-%06d.tar", maxcount=10) as sink:
                for i in range(40):
                    sink.write({"__key__": f"k{i:03d}", "cls": i})
            threading.Thread(target=threading.Event().wait, daemon=True, name="trainer-ui").start()
            scale = 3
            spec = sys.argv[2] + "/p-{000000..000003}.tar"
            ds = ss.ShardStream(spec).decode().map(lambda s: s["cls"] * scale)
            loader = ss.WebLoader(ds.batched(5), batch_size=None, num_workers=2)
            print(sorted(int(v) for b in loader for v in b) == [3 * i for i in range(40)])
            """
        )
    )
    runs = tmp_path / "runs.txt"
    (tmp_path / "data").mkdir()
    proc = subprocess.run(
        [sys.executable, str(script), str(runs), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "True"
    assert len(runs.read_text().split()) == 1  # the workers never ran the script's top level


def test_a_process_group_sends_workers_to_the_forkserver(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import torch.distributed as dist
        from shardstream.loader import _start
        assert _start.choose().method == "fork", _start.choose()
        dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1)
        choice = _start.choose()
        print(choice.method, choice.reason)
        dist.destroy_process_group()
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("forkserver") and "gloo" in proc.stdout


# -------------------------------------------------------------------------------- stuck workers
def wait_forever_in_worker() -> None:
    time.sleep(3600)


class StuckOnWorker0(tud.IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        info = tud.get_worker_info()
        if info is not None and info.id == 0:
            wait_forever_in_worker()
        yield from range(3)


@pytest.mark.parametrize("how", ["fork", "shardstream's forkserver"])
def test_a_stuck_worker_is_named_with_its_pid_and_python_stack(
    how: str, user_thread: threading.Thread
) -> None:
    given = "fork" if how == "fork" else None  # the user's thread sends the others to the forkserver
    loader = ss.WebLoader(
        StuckOnWorker0(), batch_size=None, num_workers=2, worker_timeout=4, multiprocessing_context=given
    )
    stacks = None
    start = time.monotonic()
    with pytest.raises(WorkerStuckError) as caught:
        it = iter(loader)
        stacks = loader._stacks
        pids = loader.stats()["worker_pids"]
        next(it)
    error = caught.value
    assert time.monotonic() - start < 30
    assert error.worker == 0 and error.pid == pids[0]
    text = str(error)
    assert f"worker 0 (pid {pids[0]})" in text and "sent no batch for 4 s" in text
    assert ("started by fork" if how == "fork" else "started by forkserver (other threads run") in text
    assert "wait_forever_in_worker" in error.stack and "wait_forever_in_worker" in text
    assert isinstance(error, RuntimeError)  # as torch's own timeout error
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == "zombie" for p in pids)
    assert stacks is not None and not list(Path(stacks).glob("stack-*"))  # dump files removed
    loader.close()


def test_a_worker_that_never_ran_python_is_reported_as_such() -> None:
    loader = ss.WebLoader(StuckOnWorker0(), batch_size=None, num_workers=1, timeout=2)  # torch's bound
    it = iter(loader)
    [pid] = loader.stats()["worker_pids"]
    os.kill(pid, signal.SIGSTOP)  # stopped before its init: as a child stuck in its after-fork code
    with pytest.raises(WorkerStuckError) as caught:
        next(it)
    text = str(caught.value)
    assert f"pid {pid}" in text and "state T" in text
    assert "has not reached its worker_init_fn" in text or "wrote no stack" in text
    loader.close()


def test_a_slow_but_live_worker_is_not_stuck(spec: str) -> None:
    def slow(sample: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.05)
        return sample

    dataset = ss.ShardStream(spec).decode().map(slow).to_tuple("cls").batched(30)  # ~1.5 s per batch
    with ss.WebLoader(dataset, batch_size=None, num_workers=1, worker_timeout=5) as loader:
        assert sum(len(b) for (b,) in loader) == 120


def test_functions_from_exec_d_code_reach_forkserver_workers(
    spec: str, user_thread: threading.Thread
) -> None:
    namespace: dict[str, Any] = {}  # no __name__: as the README's blocks or a notebook cell run
    exec("def double(sample):\n    return sample['cls'] * 2\n", namespace)  # noqa: S102
    dataset = ss.ShardStream(spec).decode().map(namespace["double"]).batched(40)
    with ss.WebLoader(dataset, batch_size=None, num_workers=2) as loader:
        assert sorted(int(v) for b in loader for v in b) == [2 * i for i in range(120)]
