"""Run a command in its own session and kill the whole session if it outlives its deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def run_in_session(
    cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
) -> tuple[int, str]:
    """Run ``cmd``; return ``(returncode, combined output)``.

    The command gets a new session, so launchers that start more processes (torchrun's ranks,
    Lightning's re-executed rank 1) are all killed by PID group if the deadline passes; the
    ``TimeoutExpired`` then propagates and fails the test instead of hanging it.
    """
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode, output


def run_job(script: Path, job: Any, workdir: Path, *, timeout: float = 240) -> Any:
    """Run ``python script job.json out.json`` (a fresh interpreter, in its own session: killed by
    group at the deadline, DataLoader workers included) and return what it wrote to out.json."""
    import json
    import sys

    job_file, out_file = workdir / "job.json", workdir / "out.json"
    job_file.write_text(json.dumps(job))
    code, output = run_in_session(
        [sys.executable, str(script), str(job_file), str(out_file)],
        cwd=script.parent,
        env=os.environ,
        timeout=timeout,
    )
    assert code == 0, output[-3000:]
    return json.loads(out_file.read_text())


def run_spawned(
    target: Callable[..., None], arglists: Sequence[tuple[Any, ...]], *, timeout: float
) -> list[int | None]:
    """Run ``target(*args)`` in one spawned process per entry of ``arglists`` (real ranks), join
    them within ``timeout`` seconds each, kill any survivor by PID; return their exit codes."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=args) for args in arglists]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
    finally:
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
                p.join(5)
    return [p.exitcode for p in procs]


def fork_child(child: Callable[[], None], timeout: float = 20.0) -> tuple[int, float]:
    """Run ``child`` in a forked process; returns (exit code, when fork returned in the parent).

    The child exits 0 if ``child`` returned, 1 if it raised; a child still running after
    ``timeout`` seconds (a deadlock) is killed by PID and reported as -9.
    """
    with warnings.catch_warnings():  # Python 3.12+ warns about fork() with threads running
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            child()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    forked_at = time.monotonic()
    deadline = forked_at + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), forked_at
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -9, forked_at
        time.sleep(0.01)


def children() -> set[int]:
    """PIDs of this process's descendants (workers of a forkserver included)."""
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def kill_left_behind(
    before: set[int], *, ignore: Callable[[], set[int | None]] = set, timeout: float = 10.0
) -> set[int]:
    """The descendants started since ``before`` (less ``ignore()``) still there after ``timeout``
    seconds; each is killed by PID (and reaped when it is a child) before they are returned."""
    deadline = time.monotonic() + timeout
    while (left := children() - before - ignore()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    return left
