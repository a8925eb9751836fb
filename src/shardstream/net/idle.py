"""Idle keep-alive connections per (scheme, host, port): the part both HTTP clients share.

Thread-safe and fork-aware: in a forked child the parent's idle connections are dropped (closing
the child's copies of their descriptors only: no TLS close_notify is sent, and the parent's
descriptors keep the connections open), so no socket is shared by two processes, whose responses
would mix.
"""

from __future__ import annotations

import weakref
from typing import Any, Generic, Protocol, TypeVar

from ..forks import ForkSafeLock, at_fork_in_child

__all__ = ["IdleConnections", "Key"]

#: (scheme, host, port)
Key = tuple[str, str, int]


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class IdleConnections(Generic[C]):
    """Idle connections, at most ``max_idle`` per key."""

    def __init__(self, max_idle: int) -> None:
        self.max_idle = max_idle
        self._idle: dict[Key, list[C]] = {}
        self._lock = ForkSafeLock()
        _ALL.add(self)

    def take(self, key: Key) -> C | None:
        """An idle connection to ``key`` (the most recent one), or ``None``."""
        with self._lock:
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def give(self, key: Key, conn: C) -> None:
        """Keep ``conn`` for reuse, or close it when ``max_idle`` are already kept."""
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self.max_idle:
                idle.append(conn)
                return
        conn.close()

    def count(self) -> int:
        """Idle connections kept, all keys together."""
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()

    def forget_after_fork(self) -> None:
        idle, self._idle = self._idle, {}
        for conn in (c for conns in idle.values() for c in conns):
            conn.close()


_ALL: weakref.WeakSet[IdleConnections[Any]] = weakref.WeakSet()


def _forget_after_fork() -> None:
    for pool in list(_ALL):
        pool.forget_after_fork()


at_fork_in_child(_forget_after_fork)
