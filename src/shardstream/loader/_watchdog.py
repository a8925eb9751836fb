"""Say where a worker is stuck: a bound on the wait for a batch, and the worker's own stack.

Each worker registers :mod:`faulthandler` on :data:`DUMP_SIGNAL` when it starts, writing into a
file of the loader's (``stack-<pid>.txt``); that costs nothing until the signal comes. The main
process waits for a batch at most the loader's bound (``worker_timeout=``, or torch's
``timeout=``, or ``SHARDSTREAM_WORKER_TIMEOUT``, 600 s by default). When the bound passes, it
asks the worker that owes the batch for its stack, reads its state from ``/proc``, shuts the
workers down and raises :class:`~shardstream.errors.WorkerStuckError` naming the worker, its PID,
how it was started and where it is. A worker that never reached its init function (stuck after
the fork, before any Python code ran: a lock inherited from another thread) says so instead.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import time
from pathlib import Path
from typing import IO, Any

from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL, signal_handling
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from ..errors import WorkerStuckError
from ._start import StartChoice

__all__ = ["DUMP_SIGNAL", "WatchedIter", "arm"]

#: The signal on which a worker writes its Python stack (all threads) into its stack file (POSIX;
#: on Windows there is none, and the error says only where the worker is not).
DUMP_SIGNAL: signal.Signals | None = getattr(signal, "SIGUSR2", None)
#: Seconds the main process waits for a worker to write its stack.
DUMP_WAIT = 3.0

_SIGNALS: Any = signal_handling  # torch's worker-PID table (not in its stubs)
_armed: list[IO[str]] = []  # the worker's stack file, kept open for faulthandler


def stack_file(directory: str, pid: int) -> Path:
    return Path(directory) / f"stack-{pid}.txt"


def arm(directory: str | None) -> None:
    """In a worker: write the stack of every thread into the loader's stack file on DUMP_SIGNAL."""
    if directory is None or DUMP_SIGNAL is None or not hasattr(faulthandler, "register"):
        return
    try:
        f = stack_file(directory, os.getpid()).open("w")
    except OSError:  # the loader is gone or its directory was removed: nothing to report to
        return
    faulthandler.register(DUMP_SIGNAL, file=f, all_threads=True, chain=False)
    _armed.append(f)


def _proc_state(pid: int) -> str:
    """The worker's state and each thread's kernel wait, from /proc (Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "its state cannot be read (not Linux, or it has exited)"
    state = next((ln.split(":", 1)[1].strip() for ln in status if ln.startswith("State:")), "?")
    waits = []
    with contextlib.suppress(OSError):
        for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
            with contextlib.suppress(OSError):
                waits.append(Path(f"/proc/{pid}/task/{tid}/wchan").read_text().strip() or "running")
    threads = f"{len(waits)} thread{'s' if len(waits) != 1 else ''}"
    return f"state {state}, {threads} (kernel waits: {', '.join(waits) or 'none'})"


def _dump(directory: str, pid: int) -> str | None:
    """Ask ``pid`` for its stack; ``None`` when it never armed (it never ran its init)."""
    path = stack_file(directory, pid)
    if not path.exists():
        return None
    if DUMP_SIGNAL is None:
        return ""
    before = path.stat().st_size
    try:
        os.kill(pid, DUMP_SIGNAL)
    except OSError:
        return ""
    deadline = time.monotonic() + DUMP_WAIT
    size = before
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = path.stat().st_size
        if now > before and now == size:  # written, and no longer growing
            break
        size = now
    with path.open() as f:
        f.seek(before)
        return f.read()


class WatchedIter(_MultiProcessingDataLoaderIter):
    """torch's multi-process iterator with a bound on each wait and a report when it passes."""

    def __init__(self, loader: Any, *, bound: float, stacks: str | None, choice: StartChoice) -> None:
        self._bound = bound
        self._stacks = stacks
        self._choice = choice
        super().__init__(loader)

    def _get_data(self) -> Any:
        bound = self._timeout if self._timeout > 0 else self._bound
        base: Any = super()
        if bound <= 0:
            return base._get_data()
        deadline = time.monotonic() + bound
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._stuck(bound)
            success, data = base._try_get_data(min(left, MP_STATUS_CHECK_INTERVAL))
            if success:
                return data
            if self._pin_memory and not self._pin_memory_thread.is_alive():
                raise RuntimeError("Pin memory thread exited unexpectedly")

    def _stuck(self, bound: float) -> WorkerStuckError:
        info = self._task_info.get(self._rcvd_idx)
        worker = int(info[0]) if info else 0
        pid = self._workers[worker].pid if worker < len(self._workers) else None
        stack = _dump(self._stacks, pid) if (self._stacks is not None and pid is not None) else ""
        state = _proc_state(pid) if pid is not None else "no process"
        if stack is None:
            where = (
                "It has not reached its worker_init_fn: either it is still starting (importing "
                "modules, unpickling the dataset: it is running, state R) or it is stuck after the "
                "fork, before any Python code of the worker ran (sleeping on a futex, state S), most "
                "likely on a lock that another thread of this process held when it was forked."
            )
            stack = ""
        elif stack:
            where = "Its Python stack (most recent call first):\n" + stack.rstrip()
        else:
            where = f"It wrote no stack within {DUMP_WAIT:.0f} s (stopped, or blocked in native code)."
        started = f"started by {self._choice.method} ({self._choice.reason})"
        message = (
            f"DataLoader worker {worker} (pid {pid}) sent no batch for {bound:.0f} s (timed out); it was "
            f"{started}; {state}.\n{where}\n"
            "What to do: if the stack is in your code or a slow store, fix it or raise the bound "
            "(worker_timeout= or timeout= on the loader, or SHARDSTREAM_WORKER_TIMEOUT); if the worker "
            "never ran Python code or waits on a lock, start workers from a forkserver "
            "(SHARDSTREAM_WORKER_START=forkserver, or multiprocessing_context=shardstream.worker_context() "
            "for a plain DataLoader) and report this message."
        )
        if pid is not None:  # it would not answer the shutdown: end it now, then the others
            if self._worker_pids_set:  # its death is ours, not torch's "killed by signal" error
                _SIGNALS._remove_worker_pids(id(self))
                self._worker_pids_set = False
            with contextlib.suppress(OSError, AttributeError):  # Windows has no SIGKILL
                os.kill(pid, signal.SIGKILL)
        self._shutdown_workers()
        return WorkerStuckError(message, worker=worker, pid=pid, stack=stack)

    def _shutdown_workers(self) -> None:
        if not hasattr(self, "_shutdown"):  # __init__ failed early: nothing was started
            return
        pids = [w.pid for w in getattr(self, "_workers", []) if w.pid is not None]
        super()._shutdown_workers()
        if self._stacks is not None and getattr(self, "_shutdown", False):  # the workers are gone
            for pid in pids:
                with contextlib.suppress(OSError):
                    stack_file(self._stacks, pid).unlink()
