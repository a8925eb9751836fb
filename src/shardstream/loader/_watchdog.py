"""Say where a worker is stuck or how it died: a bound on the wait for a batch, the worker's own
stack, and the workers' processes checked while the loader waits.

Each worker registers :mod:`faulthandler` on :data:`DUMP_SIGNAL` when it starts, writing into a
file of the loader's (``stack-<pid>.txt``); that costs nothing until the signal comes. The main
process waits for a batch at most the loader's bound (``worker_timeout=``, or torch's
``timeout=``, or ``SHARDSTREAM_WORKER_TIMEOUT``, 600 s by default). When the bound passes, it
asks the worker that owes the batch for its stack, reads its state from ``/proc``, ends it
(SIGKILL) and raises :class:`WorkerLost` naming the worker, its PID, how it was started and where
it is. A worker that never reached its init function (stuck after the fork, before any Python code
ran: a lock inherited from another thread) says so instead; a stopped one (SIGSTOP, state T) is
not asked for a stack it cannot write.

Dead workers are found here too, never by torch's SIGCHLD handler: that handler raises in the
main thread wherever it is (in the middle of a training step), so nothing could replace the
worker; this iterator takes its workers out of torch's table once they have started. While the
loop waits and no batch comes, every :data:`POLL` seconds, the workers' processes are checked; a
dead one (a signal, a failing exit) raises :class:`WorkerLost` at once. The result queue reads
whole messages only (``_results.py``), so a worker killed in the middle of a write cannot block
the wait. What the loader does with a :class:`WorkerLost` (replace the workers, or raise the
user's error) is ``_heal.py``'s.
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import re
import signal
import time
from pathlib import Path
from typing import IO, Any

from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL, signal_handling
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from ._results import SenderGuard, take_whole_messages
from ._start import StartChoice

__all__ = ["DUMP_SIGNAL", "POLL", "WatchedIter", "WorkerLost", "arm", "signal_name"]

#: The signal on which a worker writes its Python stack (all threads) into its stack file (POSIX;
#: on Windows there is none, and the error says only where the worker is not).
DUMP_SIGNAL: signal.Signals | None = getattr(signal, "SIGUSR2", None)
#: Seconds the main process waits for a worker to write its stack.
DUMP_WAIT = 3.0
#: Seconds between checks of the workers' processes while the loop waits and no batch comes (a
#: batch that is ready is taken at once: the check costs nothing while batches flow).
POLL = 0.2
#: Seconds to wait for a worker that a failed fetch of its batch's tensors says is ending.
ENDING = 2.0

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


def signal_name(number: int) -> str:
    """``"SIGKILL"`` for 9; ``"signal 99"`` for a number without a name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class WorkerLost(RuntimeError):
    """A worker process of a :class:`WatchedIter` died or stalled; the loader replaces the workers
    or raises its own error (``_heal.py``), so this never reaches the training loop.

    Attributes:
        source: the iterator that lost it (to be stopped). worker: the worker's index. pid: its PID.
        cause: ``"SIGKILL"``, ``"exit code 3"`` or ``"stuck"``. exitcode: its exit status
            (``None`` when stuck). stack: a stuck worker's Python stack. report: a stuck
            worker's full report (as :class:`~shardstream.errors.WorkerStuckError` gives it).
        ahead: batches the loop was to receive before the next one this worker owed (``None``
            when it owed none).
    """

    def __init__(
        self,
        source: Any,
        *,
        worker: int,
        pid: int | None,
        cause: str,
        exitcode: int | None = None,
        stack: str = "",
        report: str = "",
        ahead: int | None = None,
    ) -> None:
        super().__init__(f"DataLoader worker {worker} (pid {pid}) was lost: {cause}")
        self.source, self.worker, self.pid, self.cause = source, worker, pid, cause
        self.exitcode, self.stack, self.report, self.ahead = exitcode, stack, report, ahead

    @property
    def stuck(self) -> bool:
        return self.cause == "stuck"


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
    """torch's multi-process iterator with a bound on each wait, dead workers found while it
    waits, and a :class:`WorkerLost` report for either (see the module docstring)."""

    def __init__(self, loader: Any, *, bound: float, stacks: str | None, choice: StartChoice) -> None:
        self._bound = bound
        self._stacks = stacks
        self._choice = choice
        try:
            super().__init__(loader)
            if self._worker_pids_set:  # deaths are this iterator's to find (see the module docstring)
                _SIGNALS._remove_worker_pids(id(self))
                self._worker_pids_set = False
        except RuntimeError as exc:  # torch's SIGCHLD handler: a worker died while they started
            lost = self._dead(exc) if hasattr(self, "_workers") else None
            if lost is None:
                raise
            raise lost from exc
        bound = self._timeout if self._timeout > 0 else bound
        #: Workers the result queue's guard ended (their batch's unpickling waited past the bound).
        self._ended: dict[int, WorkerLost] = {}
        self._guard: SenderGuard | None = SenderGuard(max(bound, 0.0), self._sender, self._end_stuck)
        take_whole_messages(self._worker_result_queue, self._guard)

    def _get_data(self) -> Any:
        bound = self._timeout if self._timeout > 0 else self._bound
        deadline = time.monotonic() + bound if bound > 0 else math.inf
        base: Any = super()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._stuck(bound)
            try:
                success, data = base._try_get_data(min(left, POLL))
            except Exception as exc:  # torch's "exited unexpectedly", or its SIGCHLD handler's error
                lost = self._dead(exc)
                if lost is None:
                    raise
                raise lost from exc
            if success:
                return data
            if self._ended:
                raise self._ended.pop(next(iter(self._ended)))
            if self._pin_memory and not self._pin_memory_thread.is_alive():
                raise RuntimeError("Pin memory thread exited unexpectedly")

    def _dead(self, error: BaseException) -> WorkerLost | None:
        """The first dead worker as a :class:`WorkerLost`, or ``None`` when ``error`` is not a
        worker's death: one killed by a signal or with a failing exit status, else one that
        exited while it owed batches (torch names its PID in ``error``)."""
        for pid in list(getattr(self, "_ended", {})):  # ended by the guard: stuck, not dead
            return self._ended.pop(pid)
        ended = [(k, w) for k, w in enumerate(self._workers) if not w.is_alive()]
        if not ended and isinstance(error, (OSError, EOFError)):
            # A batch's tensors could not be fetched from the worker that sent it (torch's
            # file-descriptor sharing): that worker is ending, and may not be reaped yet.
            deadline = time.monotonic() + ENDING
            while not ended and time.monotonic() < deadline:
                time.sleep(0.02)
                ended = [(k, w) for k, w in enumerate(self._workers) if not w.is_alive()]
        failed = [(k, w) for k, w in ended if w.exitcode != 0]
        if not failed:
            named = {int(n) for n in re.findall(r"\d+", str(error))}
            failed = [(k, w) for k, w in ended if w.pid in named]
        if not failed:
            return None
        k, w = failed[0]
        code = w.exitcode
        cause = signal_name(-code) if code is not None and code < 0 else f"exit code {code}"
        return WorkerLost(self, worker=k, pid=w.pid, cause=cause, exitcode=code, ahead=self._ahead(k))

    def _ahead(self, worker: int) -> int | None:
        """Batches the loop was to receive before the next one ``worker`` owed."""
        owed = [
            i for i, info in getattr(self, "_task_info", {}).items() if len(info) == 1 and info[0] == worker
        ]
        return min(owed) - self._rcvd_idx if owed else None

    def _stuck(self, bound: float) -> WorkerLost:
        """The worker that owes the next batch, which sent none for ``bound`` seconds: ended."""
        info = self._task_info.get(self._rcvd_idx)
        return self._lose_stuck(int(info[0]) if info else 0, bound, "sent no batch")

    def _sender(self, index: int) -> int | None:
        """The PID of the worker that was sent task ``index`` (the result queue's guard asks)."""
        info = self._task_info.get(index)
        return self._workers[info[0]].pid if info else None

    def _end_stuck(self, pid: int) -> None:
        """From the result queue's guard: the batch ``pid`` sent cannot be unpickled, because the
        worker does not answer for its tensors' memory; end it, and keep the report."""
        for k, w in enumerate(self._workers):
            if w.pid == pid:
                self._ended[pid] = self._lose_stuck(
                    k, self._guard.bound if self._guard else 0.0, "did not answer"
                )
                return

    def _lose_stuck(self, worker: int, bound: float, what: str) -> WorkerLost:
        pid = self._workers[worker].pid if worker < len(self._workers) else None
        state = _proc_state(pid) if pid is not None else "no process"
        stopped = state.startswith("state T")
        dump = self._stacks is not None and pid is not None and not stopped
        stack = _dump(self._stacks, pid) if dump and self._stacks is not None and pid is not None else ""
        if stopped:
            where = "It is stopped (SIGSTOP, or a debugger holds it), so it cannot write its stack."
            if self._stacks is not None and pid is not None and not stack_file(self._stacks, pid).exists():
                where = "It has not reached its worker_init_fn, and " + where[3:]
            stack = ""
        elif stack is None:
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
        doing = "sent no batch" if what == "sent no batch" else "did not answer for its batch's tensors"
        report = (
            f"DataLoader worker {worker} (pid {pid}) {doing} for {bound:.0f} s (timed out); it was "
            f"{started}; {state}.\n{where}"
        )
        if pid is not None:  # it would not answer a shutdown: end it now
            with contextlib.suppress(OSError, AttributeError):  # Windows has no SIGKILL
                os.kill(pid, signal.SIGKILL)
        return WorkerLost(self, worker=worker, pid=pid, cause="stuck", stack=stack, report=report, ahead=0)

    def stop_now(self) -> list[int]:
        """End every worker at once (SIGKILL: whatever they were making is made again by their
        replacements) and release torch's side without waiting on anything a dead worker may
        hold (the result queue's write lock); returns the workers' PIDs."""
        workers = list(getattr(self, "_workers", []))
        pids = [w.pid for w in workers if w.pid is not None]
        if not hasattr(self, "_shutdown") or self._shutdown:
            return pids
        self._shutdown = True
        guard = getattr(self, "_guard", None)
        if guard is not None:
            guard.close()
        for w in workers:
            if w.pid is not None and w.exitcode is None:
                with contextlib.suppress(OSError, AttributeError):
                    os.kill(w.pid, signal.SIGKILL)
        for w in workers:
            w.join(MP_STATUS_CHECK_INTERVAL)
        if self._worker_pids_set:
            _SIGNALS._remove_worker_pids(id(self))
            self._worker_pids_set = False
        if hasattr(self, "_pin_memory_thread"):  # it sees the event at its next poll of the queue
            self._pin_memory_thread_done_event.set()
            self._pin_memory_thread.join(MP_STATUS_CHECK_INTERVAL + 1)
        self._workers_done_event.set()
        for q in [*self._index_queues, self._worker_result_queue]:
            q.cancel_join_thread()
            q.close()
        self._forget_stacks(pids)
        return pids

    def _shutdown_workers(self) -> None:
        if not hasattr(self, "_shutdown"):  # __init__ failed early: nothing was started
            return
        pids = [w.pid for w in getattr(self, "_workers", []) if w.pid is not None]
        guard = getattr(self, "_guard", None)
        if guard is not None:
            guard.close()
        super()._shutdown_workers()
        if getattr(self, "_shutdown", False):  # the workers are gone
            self._forget_stacks(pids)

    def _forget_stacks(self, pids: list[int]) -> None:
        if self._stacks is not None:
            for pid in pids:
                with contextlib.suppress(OSError):
                    stack_file(self._stacks, pid).unlink()
