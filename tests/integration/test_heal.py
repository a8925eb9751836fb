"""A loader that heals (issue 45): a worker process killed (SIGKILL, as the OOM killer does) or
stopped past ``worker_timeout`` (SIGSTOP: a stall) mid-epoch is replaced, and the training loop
receives exactly the batches of an uninterrupted run; a sample that kills every worker that makes
it ends with an error naming it; the budget and the accounting; nothing left behind.

Real worker processes, real signals, real gloo ranks. Every fault is deterministic: the worker
ends itself at a chosen sample on the first attempt only (a marker file), or the training loop
kills a worker it names by PID (``stats()["worker_pids"]``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import multiprocessing
import os
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import psutil
import pytest
from _heal_cases import CASES, LOADERS, Fault, PoisonKey, keys, make, write_shards
from _procs import children, kill_left_behind, run_job, run_spawned

import shardstream as ss
from shardstream.loader._start import server_pid
from shardstream.testing import free_port

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals, /proc and /dev/shm (Linux)")

HERE = Path(__file__).resolve().parent
BOUND = 2.0  # worker_timeout: seconds without a batch before a worker is stuck
AT = {
    "plain": 30,
    "shuffled": 30,
    "mix": 8,
    "resampled": 25,
    "equal": 10,
    "exact": 10,
}  # the sample a faulty worker dies at


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("heal"))


def _traces() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("shardstream-trace-")}


def _lasting() -> set[int | None]:
    """Helpers that outlive a test by design: shardstream's forkserver, multiprocessing's
    resource tracker (started by the spawned ranks)."""
    from multiprocessing import resource_tracker

    return {server_pid(), getattr(resource_tracker._resource_tracker, "_pid", None)}


@pytest.fixture
def clean() -> Iterator[None]:
    """No worker, diagnostic process or trace file of a test outlives it."""
    before, traces = children(), _traces()
    yield
    gc.collect()
    assert kill_left_behind(before, ignore=_lasting) == set()
    assert _traces() - traces == set()


def _segments(loader: Any) -> list[str]:
    """The shared-memory buffers still named under ``loader``'s token (ss.Loader's process mode)."""
    ring = getattr(loader, "_ring", None)
    if ring is None:
        return []
    stem = os.path.basename(ring.prefix)
    return [n for n in os.listdir("/dev/shm") if n.startswith(stem)]


def _epoch(loader: Any) -> list[list[str]]:
    try:
        return [keys(b) for b in loader]
    finally:
        loader.close()


# -- a lost worker is replaced: exactly the uninterrupted batches ------------------------------------
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("loader", LOADERS)
def test_heal_a_killed_or_stopped_worker_gives_exactly_the_uninterrupted_batches(
    urls: list[str], loader: str, case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, clean: None
) -> None:
    full = _epoch(make(case, urls, loader))
    for how in ("SIGKILL", "SIGSTOP"):
        markers = tmp_path / how
        markers.mkdir()
        faulty = make(case, urls, loader, Fault(how, str(markers), at=(AT[case],)), worker_timeout=BOUND)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="shardstream"):
            got = [keys(b) for b in faulty]
        restarts = faulty.stats()["restarts"]
        faulty.close()
        assert os.listdir(markers) == [str(AT[case])], "the fault fired once"
        assert got == full, f"{how}: the batches after the replacement differ"
        cause = "SIGKILL" if how == "SIGKILL" else "stuck"
        assert restarts["count"] == 1 and restarts["causes"] == {cause: 1}, restarts
        [event] = restarts["recent"]
        assert 0 < event["batch"] < len(full), "lost mid-epoch"
        [line] = [r.getMessage() for r in caplog.records if "replacing it" in r.getMessage()]
        assert f"pid {event['pid']}" in line and "restart 1 of 3 in epoch 0" in line
        assert ("killed by SIGKILL" if how == "SIGKILL" else "sent no batch in time") in line
        assert _segments(faulty) == []


def test_heal_a_worker_killed_during_the_training_step_is_replaced(
    urls: list[str], tmp_path: Path, clean: None
) -> None:
    """Killed from outside while the loop is busy: torch's SIGCHLD handler would raise in the
    training step itself (nothing could replace the worker then); the loader finds it instead."""
    for loader in LOADERS:
        full = _epoch(make("shuffled", urls, loader))
        running = make("shuffled", urls, loader)
        it = iter(running)
        got = [keys(next(it)) for _ in range(5)]
        pids = running.stats()["worker_pids"]
        assert len(pids) == 2
        os.kill(pids[1], signal.SIGKILL)
        time.sleep(0.5)  # the training step: the signal arrives here
        got += [keys(b) for b in it]
        stats = running.stats()
        running.close()
        assert got == full, loader
        assert stats["restarts"]["causes"] == {"SIGKILL": 1} and pids[1] not in stats["worker_pids"]


@pytest.mark.parametrize("loader", LOADERS)
def test_heal_restarts_are_counted_with_telemetry_on(
    urls: list[str],
    loader: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    clean: None,
) -> None:
    """``stats()`` with telemetry on keeps its per-worker report and adds the restarts; the
    periodic telemetry line counts them too (with telemetry off: the first test above)."""
    monkeypatch.setenv("SHARDSTREAM_TELEMETRY_INTERVAL", "0.001")  # a line at every batch
    full = _epoch(make("plain", urls, loader))
    timed = make("plain", urls, loader, Fault("SIGKILL", str(tmp_path)), telemetry=True)
    with caplog.at_level(logging.INFO, logger="shardstream"):
        got = [keys(b) for b in timed]
    stats = timed.stats()
    timed.close()
    assert got == full
    assert stats["telemetry"] is True and stats["workers"], "the telemetry report is kept"
    assert stats["restarts"]["count"] == 1 and stats["restarts"]["causes"] == {"SIGKILL": 1}
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("telemetry (loader)")]
    assert any(line.endswith("1 worker restart(s): {'SIGKILL': 1}") for line in lines), lines[-3:]


def test_heal_persistent_workers_lost_mid_epoch_or_between_epochs(
    urls: list[str], tmp_path: Path, clean: None
) -> None:
    """ss.Loader keeps its workers between epochs: the replacements run the next epochs as the
    workers they replace would have, and a worker lost between two epochs is replaced when the
    next one starts."""
    reference = make("shuffled", urls, "ss.Loader")
    epochs = [_keys(reference) for _ in range(3)]
    reference.close()
    assert epochs[0] != epochs[1]
    loader = make("shuffled", urls, "ss.Loader", Fault("SIGKILL", str(tmp_path), at=(AT["shuffled"],)))
    assert _keys(loader) == epochs[0]
    os.kill(loader.stats()["worker_pids"][0], signal.SIGKILL)  # idle, between two epochs
    assert _keys(loader) == epochs[1]
    assert _keys(loader) == epochs[2]
    restarts = loader.stats()["restarts"]
    loader.close()
    assert [e["epoch"] for e in restarts["recent"]] == [0, 1] and restarts["causes"] == {"SIGKILL": 2}


def _keys(loader: Any) -> list[list[str]]:
    return [keys(b) for b in loader]


def _big(sample: dict[str, Any]) -> dict[str, Any]:
    sample["big"] = bytes(300_000)  # a batch's pickle far larger than a pipe holds (64 KiB)
    return sample


def _writing(pid: int) -> bool:
    """Whether a thread of ``pid`` is blocked writing into a full pipe (its result queue's)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            wchan = Path(f"/proc/{pid}/task/{tid}/wchan").read_text().strip()
        except OSError:
            continue
        if wchan.endswith("pipe_write") or wchan == "pipe_wait":  # (the name differs by kernel)
            return True
    return False


@pytest.mark.timeout(120)
def test_heal_a_worker_killed_in_the_middle_of_a_write_does_not_block_the_loader(
    urls: list[str], clean: None
) -> None:
    """The killed worker leaves the start of a batch in the result pipe (and holds its write
    lock): the loader never waits in a read for the rest (``_results.py``)."""

    def loader() -> ss.WebLoader:
        ds = ss.ShardStream(urls, seed=3).map(_big).to_tuple("__key__", "big")
        return ss.WebLoader(ds, batch_size=4, num_workers=2)

    full = _epoch(loader())
    running = loader()
    it = iter(running)
    got = [keys(next(it)) for _ in range(3)]
    deadline = time.monotonic() + 30
    victim = None
    while victim is None and time.monotonic() < deadline:  # the loop does not read meanwhile
        victim = next((p for p in running.stats()["worker_pids"] if _writing(p)), None)
        time.sleep(0.01)
    assert victim is not None, "no worker blocked in a write to the full pipe"
    os.kill(victim, signal.SIGKILL)
    got += [keys(b) for b in it]
    restarts = running.stats()["restarts"]
    running.close()
    assert got == full
    assert restarts["causes"] == {"SIGKILL": 1}


def test_heal_the_result_queue_keeps_a_message_cut_short_and_never_blocks() -> None:
    """A writer that dies in the middle of a message, holding the queue's write lock: ``get``
    times out (torch's own would wait in ``read()`` forever); a message whose end comes later is
    returned whole."""
    from shardstream.loader._results import take_whole_messages

    ctx = multiprocessing.get_context("fork")
    q: Any = ctx.Queue()
    take_whole_messages(q)
    body = bytes(ForkingPickler.dumps(("batch", bytes(40_000))))  # a pipe holds it twice
    head = struct.pack("!i", len(body))
    writer = ctx.Process(target=_write_half_and_die, args=(q, head + body[:20_000]))
    writer.start()
    writer.join(10)
    assert writer.exitcode == -signal.SIGKILL
    start = time.monotonic()
    with pytest.raises(Exception) as caught:  # queue.Empty
        q.get(timeout=0.3)
    assert type(caught.value).__name__ == "Empty" and time.monotonic() - start < 5
    os.write(q._writer.fileno(), body[20_000:])  # the rest comes (from this process, for the test)
    assert q.get(timeout=5) == ("batch", bytes(40_000))
    q.close()


def _write_half_and_die(q: Any, data: bytes) -> None:
    q._sem.acquire()  # as put() does
    q._wlock.acquire()  # as a worker's feeder thread holds it while it writes
    os.write(q._writer.fileno(), data)
    os.kill(os.getpid(), signal.SIGKILL)


_ORPHAN = """
import os, signal, sys, threading, time
sys.path.insert(0, {here!r})
from _heal_cases import make
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # workers from the forkserver
loader = make("plain", {urls!r}, {kind!r})
it = iter(loader)
next(it)
print("workers:", *loader.stats()["worker_pids"], flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer takes a rank
"""


@pytest.mark.parametrize("kind", LOADERS)
def test_heal_workers_end_with_their_loader_s_process_when_it_is_killed(
    urls: list[str], kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers from shardstream's forkserver are the server's children, not the loader's: they
    would outlive a killed loader process (and keep the server alive) without ``_orphans.py``."""
    monkeypatch.delenv("SHARDSTREAM_WORKER_START")  # the real rule: a thread runs, so the forkserver
    script, out = tmp_path / "orphan.py", tmp_path / "out.txt"
    script.write_text(_ORPHAN.format(here=str(HERE), urls=urls, kind=kind))
    # The killed process cannot remove its loader's temporary files (the stacks directory): they
    # go under tmp_path, not the machine's /tmp.
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    with out.open("w") as sink:  # a file, not a pipe: a survivor holding it would block a pipe's reader
        code = subprocess.run(
            [sys.executable, str(script)], stdout=sink, stderr=subprocess.STDOUT, timeout=120, env=env
        )
    output = out.read_text()
    assert code.returncode == -signal.SIGKILL, output[-3000:]
    [line] = [ln for ln in output.splitlines() if ln.startswith("workers:")]
    workers = [int(p) for p in line.split()[1:]]
    assert len(workers) == 2, output[-3000:]
    deadline = time.monotonic() + 15
    try:
        while any(_running(p) for p in workers):
            assert time.monotonic() < deadline, f"workers {workers} outlived their loader's process"
            time.sleep(0.1)
    finally:
        for pid in workers:  # nothing left behind when the test fails (their server ends with them)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- poison samples, the budget, and no restarts -------------------------------------------------------
def _offset(url: str, key: str) -> int:
    with tarfile.open(url) as tar:
        return next(m.offset for m in tar.getmembers() if m.name.startswith(key + "."))


@pytest.mark.parametrize(
    ("loader", "case", "key", "shard"),
    [("ss.Loader", "shuffled", "s3_007", 3), ("WebLoader", "mix", "s1_007", 1)],
)
def test_heal_a_sample_that_kills_every_worker_is_named(
    urls: list[str], loader: str, case: str, key: str, shard: int, clean: None
) -> None:
    poisoned = make(case, urls, loader, PoisonKey(key), worker_timeout=BOUND)
    start = time.monotonic()
    with pytest.raises(ss.WorkerDiedError) as caught:
        for _ in poisoned:
            pass
    assert time.monotonic() - start < 60
    poisoned.close()
    error = caught.value
    assert error.sample == {
        "url": urls[shard],
        "offset": _offset(urls[shard], key),
        "key": key,
        "stage": "stage 'map PoisonKey'",
    }
    # One restart, or two: a batch the lost worker had made but not yet written into the pipe
    # (its queue's feeder thread dies or stops with it) is made again by the replacement, which
    # moves the position once before the sample takes its worker at the same position twice.
    assert error.signal == "SIGKILL" and len(error.restarts) in (1, 2), error.restarts
    text = str(error)
    assert "second worker lost at the same position" in text
    assert f"key {key!r} of shard {urls[shard]} at byte offset {error.sample['offset']}" in text
    assert "What to do: skip that sample" in text
    assert isinstance(error, RuntimeError) and isinstance(error, ss.WorkerLostError)
    assert _segments(poisoned) == []


def test_heal_a_sample_that_stalls_every_worker_is_named(urls: list[str], clean: None) -> None:
    poisoned = make("plain", urls, "ss.Loader", PoisonKey("s5_003", how="SIGSTOP"), worker_timeout=BOUND)
    with pytest.raises(ss.WorkerStuckError) as caught:
        for _ in poisoned:
            pass
    poisoned.close()
    error = caught.value
    assert error.sample is not None and error.sample["key"] == "s5_003"
    assert error.sample["offset"] == _offset(urls[5], "s5_003")
    assert "stalled too" in str(error) and "state T" in str(error)
    assert len(error.restarts) in (1, 2), error.restarts  # (see the test above)


def test_heal_past_the_budget_the_error_lists_every_restart(
    urls: list[str], tmp_path: Path, clean: None
) -> None:
    """Two losses at different positions with worker_restarts=1: the second raises; a diagnostic
    run of that worker's share does not die, so no sample is blamed."""
    loader = make("plain", urls, "WebLoader", Fault("SIGKILL", str(tmp_path), at=(10, 16)), worker_restarts=1)
    with pytest.raises(ss.WorkerDiedError) as caught:
        for _ in loader:
            pass
    loader.close()
    error = caught.value
    assert sorted(os.listdir(tmp_path)) == ["10", "16"]
    assert [e["cause"] for e in error.restarts] == ["SIGKILL"] and error.sample is None
    text = str(error)
    assert "worker_restarts=1 were used up in epoch 0" in text
    assert f"worker {error.restarts[0]['worker']} (pid {error.restarts[0]['pid']}) SIGKILL" in text
    assert "without dying: the losses are not tied to one sample" in text
    assert loader.stats()["restarts"]["count"] == 1


@pytest.mark.parametrize("loader", LOADERS)
def test_heal_worker_restarts_0_raises_at_the_first_loss_naming_it(
    urls: list[str], loader: str, tmp_path: Path, clean: None
) -> None:
    strict = make("plain", urls, loader, Fault("SIGKILL", str(tmp_path)), worker_restarts=0)
    start = time.monotonic()
    with pytest.raises(ss.WorkerDiedError) as caught:
        for _ in strict:
            pass
    strict.close()
    error = caught.value
    assert time.monotonic() - start < 10, "the death is noticed at once"
    assert error.signal == "SIGKILL" and error.exitcode == -signal.SIGKILL and error.worker == 1
    text = str(error)
    assert f"DataLoader worker 1 (pid {error.pid}) was killed by SIGKILL" in text
    assert "worker_restarts=0" in text and "What to do:" in text and "OOM killer" in text
    assert error.sample is None and error.restarts == []
    assert _segments(strict) == []


class _KillsWorker1(torch.utils.data.IterableDataset):  # type: ignore[misc]
    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        for i in range(20):
            if info is not None and info.id == 1 and i == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            yield i


def test_heal_needs_a_dataset_that_says_where_its_workers_are(clean: None) -> None:
    loader = ss.WebLoader(_KillsWorker1(), batch_size=2, num_workers=2)
    with pytest.raises(ss.WorkerDiedError, match="not a shardstream pipeline"):
        for _ in loader:
            pass
    loader.close()


# -- thread mode: a thread cannot be replaced -----------------------------------------------------------
_RELEASE = threading.Event()  # lets a blocked stage of the thread-mode test go on


def _raises_on(sample: dict[str, Any]) -> dict[str, Any]:
    if sample["__key__"] in ("s0_003", "s4_010"):
        raise ValueError(f"bad sample {sample['__key__']}")
    return sample


def _blocks_on(sample: dict[str, Any]) -> dict[str, Any]:
    if sample["__key__"] == "s2_005":
        _RELEASE.wait(60)
    return sample


def test_heal_thread_mode_handles_a_raising_stage_and_names_a_blocked_pool_thread(urls: list[str]) -> None:
    """Thread mode (item 4 of the issue): a stage that raises on a pool thread goes to its handler
    as in one thread; one that blocks past ``worker_timeout`` raises with every thread's stack
    (the producer's and the pool's) and says that a thread cannot be killed, so nothing is
    replaced there."""
    plain = ss.ShardStream(urls, shuffle_shards=False)
    every = {
        k for b in _epoch(ss.Loader(plain.to_tuple("__key__", "cls"), batch_size=4, num_threads=1)) for k in b
    }
    skipping = plain.map(_raises_on, handler=ss.ignore_and_continue).to_tuple("__key__", "cls")
    got = [k for b in _epoch(ss.Loader(skipping, batch_size=4, num_threads=2)) for k in b]
    assert len(every) == 83
    assert sorted(got) == sorted(every - {"s0_003", "s4_010"})
    _RELEASE.clear()
    blocked = ss.Loader(
        plain.map(_blocks_on).to_tuple("__key__", "cls"), batch_size=4, num_threads=2, worker_timeout=1.5
    )
    try:
        with pytest.raises(ss.WorkerStuckError) as caught:
            for _ in blocked:
                pass
    finally:
        _RELEASE.set()
        blocked.close()
    error = caught.value
    text = str(error)
    assert "thread mode" in text and "A thread cannot be killed" in text
    assert error.pid == os.getpid() and error.restarts == [] and error.sample is None
    assert text.count("Thread '") == 3, "the producer's stack and both pool threads'"
    assert "_blocks_on" in error.stack and "_RELEASE.wait" in error.stack
    assert "restarts" not in blocked.stats(), "thread mode replaces nothing"


# -- the state after a restart ------------------------------------------------------------------------
def test_heal_the_state_after_a_restart_restores_exactly_and_elastically_in_a_fresh_process(
    urls: list[str], tmp_path: Path, clean: None
) -> None:
    full = _epoch(make("shuffled", urls, "ss.Loader"))
    runs, cuts = [], []
    for n in (4, 12):
        markers = tmp_path / f"m{n}"
        markers.mkdir()
        loader = make("shuffled", urls, "ss.Loader", Fault("SIGKILL", str(markers), at=(25,)))
        it = iter(loader)
        got = [keys(next(it)) for _ in range(n)]
        assert loader.stats()["restarts"]["count"] == 1, "the worker was replaced before the cut"
        state = json.loads(json.dumps(loader.state_dict()))
        loader.close()
        assert got == full[:n]
        for workers in (2, 3, 1):  # exact, then elastic
            runs.append({"case": "shuffled", "loader": "ss.Loader", "num_workers": workers, "state": state})
            cuts.append((n, workers))
    restored = run_job(HERE / "_heal_cases.py", {"urls": urls, "runs": runs}, tmp_path)
    for (n, workers), rest in zip(cuts, restored, strict=True):
        if workers == 2:
            assert full[:n] + rest == full, f"exact restore after {n} batches"
        else:
            seen = Counter(k for b in full[:n] for k in b)
            assert seen + Counter(k for b in rest for k in b) == Counter(k for b in full for k in b)


def test_heal_a_state_taken_before_the_first_batch_of_a_restored_epoch_keeps_its_round_robin(
    urls: list[str],
) -> None:
    """A restore that starts the round robin at worker 1, saved again before any batch: the new
    state starts there too (it said worker 0, and the batches came in another order)."""
    full = _epoch(make("plain", urls, "WebLoader"))
    first = make("plain", urls, "WebLoader")
    it = iter(first)
    next(it)
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    assert state["next_worker"] == 1
    second = make("plain", urls, "WebLoader")
    second.load_state_dict(state)
    iter(second)
    again = json.loads(json.dumps(second.state_dict()))
    second.close()
    assert again["next_worker"] == 1
    third = make("plain", urls, "WebLoader")
    third.load_state_dict(again)
    assert full[:1] + _epoch(third) == full


# -- split="equal" under real gloo ranks -----------------------------------------------------------------
def _rank_main(rank: int, world: int, port: int, urls: list[str], markers: str, out: str) -> None:
    """One rank: for each loader, the uninterrupted epoch, then one with a worker killed and one
    with a worker stopped; an all_reduce after every batch (a rank with another number of batches
    would wait alone and fail the collective)."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    report: dict[str, Any] = {}
    try:

        def epoch(loader: Any) -> list[list[str]]:
            got = []
            for batch in loader:
                got.append(keys(batch))
                dist.all_reduce(torch.ones(1))
            loader.close()
            return got

        for kind in LOADERS:
            report[kind] = {"full": epoch(make("equal", urls, kind))}
            for how in ("SIGKILL", "SIGSTOP"):
                here = Path(markers) / f"{kind}-{how}-{rank}"
                here.mkdir(parents=True)
                fault = Fault(how, str(here), at=(AT["equal"],))
                loader = make("equal", urls, kind, fault, worker_timeout=3 * BOUND)
                report[kind][how] = epoch(loader)
                report[kind][how + " restarts"] = loader.stats()["restarts"]["count"]
        Path(out).write_text(json.dumps(report))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_heal_split_equal_under_two_gloo_ranks(
    urls: list[str], tmp_path: Path, clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As under torchrun (the process group's threads run): workers from shardstream's forkserver,
    # which the uninterrupted epoch starts (spawned ranks would otherwise spawn their workers).
    monkeypatch.setenv("SHARDSTREAM_WORKER_START", "forkserver")
    port = free_port()
    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    args = [(r, 2, port, urls, str(tmp_path / "markers"), outs[r]) for r in range(2)]
    assert run_spawned(_rank_main, args, timeout=240) == [0, 0]
    reports = [json.loads(Path(o).read_text()) for o in outs]
    for kind in LOADERS:
        fulls = [r[kind]["full"] for r in reports]
        assert len(fulls[0]) == len(fulls[1]) > 5, "equal batches on both ranks"
        assert max(Counter(k for f in fulls for b in f for k in b).values()) == 1, "no sample on both"
        for rank, report in enumerate(reports):
            for how in ("SIGKILL", "SIGSTOP"):
                assert report[kind][how] == report[kind]["full"], f"{kind} {how} rank {rank}"
                assert report[kind][how + " restarts"] == 1, f"{kind} {how} rank {rank}: replaced once"
