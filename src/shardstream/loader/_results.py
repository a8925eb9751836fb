"""The loader's end of the workers' result queue: it takes whole messages only.

Every worker sends its batches through one pipe that all of them share (torch's result queue).
A worker killed while it writes (the OOM killer does not wait for a write to end, and a write
waits whenever the pipe is full) can leave the start of a message in the pipe. multiprocessing's
``Queue.get`` would read that message's header and then block in ``read()`` for the rest:
forever, past any timeout, and with it the training loop (or torch's pin-memory thread). A
:class:`WholeMessages` queue reads only what the pipe holds, never waiting in a read, keeps the
start of a message until its end has come, and returns whole messages only: a message that a
dead writer cut short stays incomplete, every ``get`` times out, and the loader finds the dead
worker (``_watchdog.py``).

A whole message can still block: torch sends a tensor's memory as a file descriptor that the
reader fetches, while it unpickles the batch, from a thread of the worker that sent it (torch's
``file_descriptor`` sharing). A worker stopped (SIGSTOP) or stuck in native code that holds the
GIL never answers, and the unpickling waits forever. So a message that holds such a tensor is
unpickled under a :class:`SenderGuard`: the message's task number (the first item of torch's
``(index, batch)``, read from the pickle's first bytes) names the worker that sent it, and a thread
that wakes a few times a second (and does nothing else) ends that worker when the unpickling has
waited longer than the loader's bound: the wait then fails, ``get`` times out, and the loader
finds the worker stuck (``_watchdog.py``). Batches that come through ``ss.Loader``'s shared
buffers hold no such tensor, and skip the guard.

The writers are unchanged (the pipe carries multiprocessing's own format: a 4-byte length, or -1
and an 8-byte length, then the pickle). Only the loader's process reads the queue, so the class
of its own queue object is changed after torch made it (:func:`take_whole_messages`); the workers
keep theirs. POSIX only (it polls the pipe); elsewhere the queue is left as it was.
"""

from __future__ import annotations

import os
import queue
import select
import struct
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.reduction import ForkingPickler
from typing import Any, cast

from ..forks import gate

__all__ = ["SenderGuard", "WholeMessages", "take_whole_messages"]

_SUPPORTED = hasattr(select, "poll") and hasattr(os, "readv")
#: In a pickle, the name of torch's function that fetches a tensor's memory from its sender.
_FETCHES = b"rebuild_storage_fd"


def take_whole_messages(q: Any, guard: SenderGuard | None = None) -> bool:
    """Make ``q``, a multiprocessing queue this process reads, read whole messages only, and
    unpickle those that fetch from their sender under ``guard``; whether it could."""
    if not _SUPPORTED or type(q) is not Queue:
        return False
    q.__class__ = WholeMessages
    cast(WholeMessages, q).guard = guard
    return True


class SenderGuard:
    """Ends the sender of a message whose unpickling waits longer than ``bound`` seconds (see the
    module docstring).

    Args:
        bound: seconds an unpickling may wait on its sender (0: forever, no thread is started).
        sender: the PID of the worker that was sent task ``index`` (``None``: unknown).
        stuck: called (from the guard's thread) with that PID when it is past ``bound``: it ends
            the worker and records why.

    Both are bound methods of the iterator that owns the guard, held weakly (no cycle keeps a
    dropped iterator, and its workers, alive).
    """

    def __init__(
        self, bound: float, sender: Callable[[int], int | None], stuck: Callable[[int], None]
    ) -> None:
        self.bound = bound
        self.sender = weakref.WeakMethod(sender)
        self.stuck = weakref.WeakMethod(stuck)
        self.armed: tuple[int, float] | None = None  # (sender's PID, since when)
        self.ended: set[int] = set()  # PIDs this guard ended
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()

    def arm(self, body: bytearray) -> None:
        """Before unpickling ``body``, which fetches from its sender: watch it."""
        index, sender = _first_int(body), self.sender()
        pid = sender(index) if index is not None and sender is not None else None
        if pid is None:
            return
        if self.thread is None and self.bound > 0:
            # Through the fork gate: the loader forks replacement workers while this thread lives.
            self.thread = gate.start(self._watch, name="shardstream-result-guard")
        self.armed = (pid, time.monotonic())

    def disarm(self) -> None:
        self.armed = None

    def _watch(self) -> None:
        tick = min(0.25, self.bound / 4)
        while not self.stopping.wait(tick):
            armed = self.armed
            if armed is None or armed[0] in self.ended or time.monotonic() - armed[1] <= self.bound:
                continue
            stuck = self.stuck()
            if stuck is None:  # its iterator is gone
                return
            self.ended.add(armed[0])
            with gate.busy():  # it signals the worker and records why: not across a fork
                stuck(armed[0])

    def close(self) -> None:
        self.stopping.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()


def _first_int(body: bytearray) -> int | None:
    """The integer a pickle of ``(index, ...)`` starts with (PROTO, FRAME, then BININT*)."""
    i = 2 if body[:1] == b"\x80" else 0
    if body[i : i + 1] == b"\x95":
        i += 9
    op = body[i : i + 1]
    if op == b"K":
        return int(body[i + 1])
    if op == b"M":
        return int.from_bytes(body[i + 1 : i + 3], "little")
    if op == b"J":
        return int.from_bytes(body[i + 1 : i + 5], "little", signed=True)
    return None


class WholeMessages(Queue):  # type: ignore[type-arg]
    """A multiprocessing queue whose ``get`` never blocks in a read (see the module docstring)."""

    # The message being received: its header, then its body (with how much of each has come).
    _head: bytearray | None = None
    _body: bytearray | None = None
    _got = 0
    _poller: Any = None
    guard: SenderGuard | None = None

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self._closed:  # type: ignore[attr-defined]
            raise ValueError(f"Queue {self!r} is closed")
        if block and timeout is None:
            deadline = None
        else:
            deadline = time.monotonic() + (max(timeout or 0.0, 0.0) if block else 0.0)
        rlock: Any = self._rlock  # type: ignore[attr-defined]
        if not rlock.acquire(block, timeout if block else None):
            raise queue.Empty
        try:
            body = self._receive(deadline)
            if body is None:
                raise queue.Empty
            self._sem.release()  # type: ignore[attr-defined]
        finally:
            rlock.release()
        guard = self.guard
        if guard is None or _FETCHES not in body:  # nothing to fetch from the sender
            return ForkingPickler.loads(body)
        guard.arm(body)
        try:
            return ForkingPickler.loads(body)
        except Exception:
            if guard.armed is not None and guard.armed[0] in guard.ended:
                raise queue.Empty from None  # its sender was ended: the loader finds it stuck
            raise
        finally:
            guard.disarm()

    def _receive(self, deadline: float | None) -> bytearray | None:
        """The next whole message's pickle, or ``None`` when it has not all come by ``deadline``
        (what has come is kept for the next call)."""
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self._reader.fileno(), select.POLLIN)  # type: ignore[attr-defined]
        fd = self._reader.fileno()  # type: ignore[attr-defined]
        if self._head is None:
            self._head, self._got = bytearray(4), 0
        while True:
            if self._body is None:  # the header: 4 bytes, or -1 and 8 more
                head = self._head
                if self._got == len(head):
                    (size,) = struct.unpack("!i", head[:4])
                    if size == -1 and len(head) == 4:
                        head.extend(bytes(8))
                        continue
                    if size == -1:
                        (size,) = struct.unpack("!Q", head[4:])
                    self._body, self._got = bytearray(size), 0
                    continue
                target = memoryview(head)[self._got :]
            else:
                body = self._body
                if self._got == len(body):
                    self._head = self._body = None
                    return body
                target = memoryview(body)[self._got :]
            left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if not self._poller.poll(left):
                return None
            n = os.readv(fd, [target])
            if n == 0:
                raise EOFError("the workers' result pipe was closed")
            self._got += n
