"""One daemon thread per process that keeps lock and lease files fresh by touching their mtime.

Other hosts judge a holder by this heartbeat; a holder that stops touching (its node died, the
process was SIGKILLed) goes stale after the owner's ``stale_after`` seconds. A file that vanished
(taken over as stale after a long pause) is reported through its ``lost`` event.

Fork-aware (see :mod:`shardstream.forks`): the thread starts and touches files only
through the fork gate, so while a DataLoader forks its workers it is parked, holding nothing; it
carries on in the parent afterwards. A forked child has no heartbeat thread and forgets the
parent's files (it must not keep the parent's locks alive); it starts its own thread when it
registers a file.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ..forks import gate

__all__ = ["Beat", "register", "unregister"]

log = logging.getLogger("shardstream.cache")


class Beat:
    """A registered file: touched every ``interval`` seconds until unregistered."""

    def __init__(self, path: str, interval: float) -> None:
        self.path = path
        self.interval = interval
        self.next_due = time.monotonic() + interval
        self.lost = threading.Event()


_lock = threading.Lock()
_wake = threading.Condition(_lock)
_beats: dict[int, Beat] = {}
_thread: threading.Thread | None = None
_start_lock = threading.Lock()  # never taken by the heartbeat thread itself


def _run() -> None:
    while True:
        with gate.busy():
            with _lock:
                now = time.monotonic()
                due = [b for b in _beats.values() if b.next_due <= now]
                for b in due:
                    b.next_due = now + b.interval
                wait = min((b.next_due for b in _beats.values()), default=now + 60.0) - now
            for b in due:
                try:
                    os.utime(b.path)
                except FileNotFoundError:
                    if not b.lost.is_set():
                        log.warning("heartbeat: %s disappeared (taken over as stale?)", b.path)
                    b.lost.set()
                except OSError as exc:  # a transient NFS error must not kill the thread
                    log.debug("heartbeat: cannot touch %s: %s", b.path, exc)
        with _lock:
            _wake.wait(timeout=max(wait, 0.01))


def _ensure_thread() -> None:
    global _thread
    # Started outside _lock: the start waits while a fork is in progress, and the fork waits for
    # the heartbeat thread, which may need _lock, to leave its busy region.
    with _start_lock:
        if _thread is None or not _thread.is_alive():
            _thread = gate.start(_run, name="shardstream-cache-heartbeat")


def register(path: str, interval: float) -> Beat:
    """Start touching ``path`` every ``interval`` seconds; returns the handle for :func:`unregister`."""
    beat = Beat(path, interval)
    with _lock:
        _beats[id(beat)] = beat
        _wake.notify()
    _ensure_thread()
    return beat


def unregister(beat: Beat) -> None:
    """Stop touching the file of ``beat``."""
    with _lock:
        _beats.pop(id(beat), None)


def _after_fork() -> None:
    # The child has no heartbeat thread and must not touch its parent's files.
    global _thread, _lock, _wake, _start_lock
    _lock = threading.Lock()
    _wake = threading.Condition(_lock)
    _start_lock = threading.Lock()
    _beats.clear()
    _thread = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
