"""Fork safety for shardstream's own threads and locks (DataLoader workers are forked).

``fork()`` copies only the calling thread. Whatever another thread held at that moment stays held
forever in the child: a lock of ours (the source registry, a connection pool, cache counters), or
a half-updated structure. CPython itself has had such bugs around threads that start or exit
during a fork (gh-112275, a deadlock inside the child's post-fork code). So every thread
shardstream runs and every lock a child may take is fork-aware:

* **Threads** (cache fills, the cache heartbeat, ``pipe:`` stderr readers) are started through
  :data:`gate` and do their work inside ``with gate.busy():`` regions. Before a fork the gate
  closes: no thread of ours starts, and the fork waits until every busy region has ended (at most
  :data:`PAUSE_TIMEOUT` seconds); threads then sit blocked in a network read or parked at the gate,
  holding no lock. After the fork the parent reopens the gate and the threads carry on; the child
  has none of them and starts its own.
* **Locks** a child may take are :class:`ForkSafeLock`\\ s, which the child gets back new and
  unlocked; connection pools drop the parent's connections in the child (a socket shared by two
  processes would mix their responses).

Your own threads: make them idle or stop them before creating a DataLoader with workers, or
avoid ``fork`` altogether with ``DataLoader(..., multiprocessing_context="forkserver")`` (or
``"spawn"``); workers then start from a fresh interpreter and receive the dataset pickled, which
every shardstream dataset and source supports.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["PAUSE_TIMEOUT", "ForkGate", "ForkSafeLock", "at_fork_in_child", "gate"]

log = logging.getLogger("shardstream.sources")

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

    def _reinit(self) -> None:
        self._lock = threading.Lock()


class ForkGate:
    """Keeps our threads out of their busy regions, and from starting, while a fork happens."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0
        self._forking = False

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A stretch of work (Python code, locks, file writes) that must not overlap a fork."""
        with self._cond:
            while self._forking:
                self._cond.wait()
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                if not self._busy:
                    self._cond.notify_all()

    def start(self, target: Callable[[], Any], name: str) -> threading.Thread:
        """Start a daemon thread running ``target``, never while a fork is in progress."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._cond:
            while self._forking:
                self._cond.wait()
            thread.start()
        return thread

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
        # The condition's lock stays held through the fork: nothing of ours changes meanwhile.

    def after_fork_in_parent(self) -> None:
        self._forking = False
        self._cond.notify_all()
        self._cond.release()

    def after_fork_in_child(self) -> None:
        # The child has none of the parent's threads: nothing is busy, and the lock is new.
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0
        self._forking = False


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
        lock._reinit()
    for hook in _CHILD_HOOKS:
        hook()


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(
        before=gate.before_fork,
        after_in_parent=gate.after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
