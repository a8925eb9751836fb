"""Fork safety for shardstream's own threads and locks (DataLoader workers are forked).

``fork()`` copies only the calling thread. Whatever another thread held at that moment stays held
forever in the child: a lock of ours (the source registry, a connection pool, cache counters), a
half-updated structure, a lock of the C runtime (the dynamic loader's, taken by a thread that is
exiting) or of CPython itself (gh-112275: a thread creating its thread state at the fork leaves
the interpreter's list lock held, and the child deadlocks in its post-fork code before any Python
runs). The rule for every thread shardstream starts:

* **Started through the gate**: :meth:`ForkGate.start` (or a :class:`GatedExecutor` for pools).
  No thread of ours starts while a fork is in progress, and the gate knows each of our threads.
* **Works inside busy regions**: every stretch that takes a lock, changes shared state, imports
  or runs library code (an HTTP request, a file write, a fetch) is inside ``with gate.busy():``.
  Outside them a thread only waits (a queue, an event, a socket read), holding nothing.
* **Forks wait**: before a fork, the gate closes (busy regions and starts wait), waits until every
  busy region has ended and every thread of ours that finished has also left the kernel (a thread
  unwinding through ``pthread_exit`` holds the loader's lock), at most :data:`PAUSE_TIMEOUT`
  seconds in all; after the fork the parent reopens it and its threads carry on. The child has
  none of them and starts its own.
* **Locks** a child may take are :class:`ForkSafeLock`\\ s, which the child gets back new and
  unlocked; connection pools drop the parent's connections in the child (a socket shared by two
  processes would mix their responses) through :func:`at_fork_in_child`.

Threads that are not ours (the user's, a logging or metrics thread, torch.distributed's gloo or
NCCL threads) follow no such rule: :func:`foreign_threads` names them, and shardstream's loaders
then start their workers from a forkserver instead of forking this process
(``shardstream.loader``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "PAUSE_TIMEOUT",
    "ForkGate",
    "ForkSafeLock",
    "GatedExecutor",
    "at_fork_in_child",
    "foreign_threads",
    "gate",
    "process_alive",
]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

#: Seconds a fork waits for our threads to leave their busy regions before it goes ahead anyway.
PAUSE_TIMEOUT = 10.0


class ForkSafeLock:
    """A mutex that a forked child gets back unlocked, whichever parent thread held it at the fork.

    Used like ``threading.Lock`` (``with lock:``, ``acquire``/``release``).
    """

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _LOCKS.add(self)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def reinit_after_fork(self) -> None:
        self._lock = threading.Lock()


def _task_exists(native_id: int) -> bool:
    """The kernel still has the thread ``native_id`` of this process (Linux; elsewhere: no)."""
    return os.path.exists(f"/proc/self/task/{native_id}")


class ForkGate:
    """Keeps our threads out of their busy regions, and from starting, while a fork happens; knows
    which threads are ours."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0
        self._forking = False
        self._depth = threading.local()  # busy-region nesting of the calling thread
        self._threads: dict[int, threading.Thread] = {}  # ident -> our thread (alive or ending)

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A stretch of work (Python code, locks, I/O through libraries) that must not overlap a
        fork. Re-entrant: a region opened inside another one of the same thread never waits."""
        depth = getattr(self._depth, "n", 0)
        if depth:
            self._depth.n = depth + 1
            try:
                yield
            finally:
                self._depth.n = depth
            return
        with self._cond:
            while self._forking:
                self._cond.wait()
            self._busy += 1
        self._depth.n = 1
        try:
            yield
        finally:
            self._depth.n = 0
            with self._cond:
                self._busy -= 1
                if not self._busy:
                    self._cond.notify_all()

    def start(self, target: Callable[[], Any], name: str) -> threading.Thread:
        """Start a daemon thread running ``target``, never while a fork is in progress (a thread
        inside a busy region starts it at once: the fork is waiting for that region)."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._cond:
            if not getattr(self._depth, "n", 0):
                while self._forking:
                    self._cond.wait()
            thread.start()
            self._remember(thread)
        return thread

    def adopt(self) -> None:
        """Count the calling thread as ours (for threads started by a pool, see GatedExecutor)."""
        with self._cond:
            self._remember(threading.current_thread())

    def _remember(self, thread: threading.Thread) -> None:
        # Called with the condition's lock held. Finished threads are forgotten at the next fork,
        # or here once the kernel no longer has them, so the table stays small in a process that
        # never forks (a worker that reads ahead shard after shard).
        if len(self._threads) >= 32:
            for ident, old in list(self._threads.items()):
                if not old.is_alive() and (old.native_id is None or not _task_exists(old.native_id)):
                    del self._threads[ident]
        self._threads[thread.ident or 0] = thread

    def ours(self) -> set[int]:
        """Idents of our threads that are still running."""
        with self._cond:
            return {ident for ident, t in self._threads.items() if t.is_alive()}

    @property
    def busy_count(self) -> int:
        """Threads inside a busy region now (for tests)."""
        with self._cond:
            return self._busy

    def before_fork(self) -> None:
        self._cond.acquire()
        self._forking = True
        deadline = time.monotonic() + PAUSE_TIMEOUT
        while self._busy:
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning(
                    "fork: %d shardstream thread(s) still busy after %.0fs; forking anyway",
                    self._busy,
                    PAUSE_TIMEOUT,
                )
                break
            self._cond.wait(left)
        self._await_exits(deadline)
        # The condition's lock stays held through the fork: nothing of ours changes meanwhile.

    def _await_exits(self, deadline: float) -> None:
        """Wait until our threads that finished their Python code have left the kernel too."""
        for ident, thread in list(self._threads.items()):
            if thread.is_alive():
                continue
            native = thread.native_id
            while native is not None and _task_exists(native) and time.monotonic() < deadline:
                time.sleep(0.0005)
            del self._threads[ident]

    def after_fork_in_parent(self) -> None:
        self._forking = False
        self._cond.notify_all()
        self._cond.release()

    def after_fork_in_child(self) -> None:
        # The child has none of the parent's threads: nothing is busy, and the lock is new.
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0
        self._forking = False
        self._depth = threading.local()
        self._threads = {}


class GatedExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose threads are ours (known to the gate) and run every task
    inside a busy region, so that a fork waits for running tasks and never sees one half done."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "shardstream") -> None:
        super().__init__(max_workers, thread_name_prefix=thread_name_prefix, initializer=gate.adopt)

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        return super().submit(_in_busy_region, fn, *args, **kwargs)  # type: ignore[arg-type]


def _in_busy_region(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    with gate.busy():
        return fn(*args, **kwargs)


def foreign_threads() -> list[str]:
    """Threads of this process that follow no fork rule of ours, described (empty: forking is safe).

    Counted: Python threads other than the calling one and shardstream's own (the user's, a
    logging or metrics thread, a DataLoader's pin-memory or queue feeder thread, native threads
    that called into Python), and the threads of an initialized ``torch.distributed`` process group
    (gloo, NCCL), which Python does not list. Idle pools of numeric libraries (OpenBLAS, OpenMP)
    are not counted: they register their own fork handlers and hold nothing between calls.
    """
    current = threading.get_ident()
    ours = gate.ours()
    found = [
        f"{t.name} (Python thread{', native' if isinstance(t, threading._DummyThread) else ''})"
        for t in threading.enumerate()
        if t.ident != current and t.ident not in ours and t is not threading.main_thread()
    ]
    main = threading.main_thread()
    if main.ident != current and main.is_alive():
        found.append(f"{main.name} (the main thread; workers are started from another thread)")
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            initialized = bool(dist.is_available() and dist.is_initialized())
        except Exception:  # noqa: BLE001 - a half-imported torch.distributed: not initialized
            initialized = False
        if initialized:
            backend = dist.get_backend()
            found.append(f"torch.distributed process group ({backend} threads)")
    return found


_LOCKS: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()
_CHILD_HOOKS: list[Callable[[], None]] = []

#: The gate every shardstream thread goes through.
gate = ForkGate()


def at_fork_in_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in every forked child, after the locks are renewed (e.g. to reset a pool)."""
    _CHILD_HOOKS.append(hook)


def _after_fork_in_child() -> None:
    gate.after_fork_in_child()
    for lock in list(_LOCKS):
        lock.reinit_after_fork()
    for hook in _CHILD_HOOKS:
        hook()


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(
        before=gate.before_fork,
        after_in_parent=gate.after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 delivers nothing): a stale file's writer in the
    local store, a worker's loader (``loader/_orphans.py``). One that exists under another user
    (``EPERM``) counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
