"""A cross-process, cross-host lock file that works where ``flock`` does not (NFS, some FUSE).

The lock is a file holding its owner (host, PID, process start time, random token) as JSON. It
is created atomically and complete: the content is written to a uniquely named file that is
then hard-linked to the lock name (``link`` fails if the name exists, and is atomic on NFS,
unlike ``O_EXCL`` on old NFS versions); where hard links are unsupported it falls back to
``O_CREAT | O_EXCL``. While held, the process heartbeat thread touches the file's mtime.

A waiter polls with exponential backoff (10 ms growing to 0.5 s, with jitter) and takes the lock
over when its owner is dead: on the same host the PID (and start time) no longer run; on another
host the heartbeat is older than ``stale_after`` seconds by the file server's clock. Two waiters
cannot both break the same stale lock: breaking happens under a short-lived ``.break`` file
and only if the lock still holds the very owner that was judged stale.

Rejected options: ``fcntl``/``flock`` (silently a no-op on some NFS mounts, and a lock dies with
the file descriptor, which loses the owner information needed for stale detection), and
filelock's ``SoftFileLock`` (no owner liveness: a crashed holder blocks everyone until the
timeout and must be removed by hand).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import CacheLockTimeout
from . import _heartbeat
from .owner import Owner, fs_now, is_alive, remove_quietly

__all__ = ["LockInfo", "LockTiming", "ShardLock", "read_lock"]

log = logging.getLogger("shardstream.cache")

_NO_LINK = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV, errno.EMLINK}


@dataclass(frozen=True)
class LockTiming:
    """How long to wait for locks and when a holder counts as dead.

    Args:
        timeout: seconds to wait for another process's download before raising
            :class:`~shardstream.errors.CacheLockTimeout` (default 600, ``SHARDSTREAM_LOCK_TIMEOUT``).
        stale_after: seconds without a heartbeat after which a holder on *another host* counts as
            dead (default 60). Keep it well above ``heartbeat`` plus the NFS attribute cache time.
        heartbeat: seconds between touches of held lock and lease files (default 5).
        poll_min / poll_max: backoff bounds of a waiter, in seconds (defaults 0.01 and 0.5).
    """

    timeout: float = 600.0
    stale_after: float = 60.0
    heartbeat: float = 5.0
    poll_min: float = 0.01
    poll_max: float = 0.5


@dataclass(frozen=True)
class LockInfo:
    """What a lock file says: its owner (``None`` if unreadable yet), raw content and mtime."""

    owner: Owner | None
    raw: bytes
    mtime: float


def read_lock(path: str) -> LockInfo | None:
    """The lock at ``path``, or ``None`` when there is none."""
    try:
        with open(path, "rb") as f:
            raw = f.read(4096)
            mtime = os.fstat(f.fileno()).st_mtime
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        start = data.get("start")
        owner: Owner | None = Owner(
            str(data["host"]), int(data["pid"]), int(start) if start is not None else None, str(data["token"])
        )
    except (ValueError, KeyError, TypeError):
        owner = None  # being written (O_EXCL fallback) or foreign: judged by age only
    return LockInfo(owner, raw, mtime)


class ShardLock:
    """An exclusive lock on one cache entry, held by one process (and one thread in it).

    Args:
        path: the lock file; its directory must exist.
        owner: this process (:meth:`Owner.current`); a fresh token is drawn per acquisition.
        timing: timeouts, staleness and backoff (:class:`LockTiming`).

    Attributes:
        waited: True if :meth:`acquire` had to wait for another holder.
        takeovers: stale locks this object broke.
    """

    def __init__(self, path: str, *, owner: Owner, timing: LockTiming) -> None:
        self.path = path
        self.owner = owner
        self.timing = timing
        self.waited = False
        self.takeovers = 0
        self._token: str | None = None
        self._beat: _heartbeat.Beat | None = None

    def __repr__(self) -> str:
        return f"ShardLock({self.path!r}, held={self.held})"

    @property
    def held(self) -> bool:
        return self._token is not None

    @property
    def lost(self) -> bool:
        """True if the held lock file vanished (another process judged this one dead)."""
        return self._beat is not None and self._beat.lost.is_set()

    # -- acquiring --------------------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take the lock if it is free; never waits."""
        me = Owner(self.owner.host, self.owner.pid, self.owner.start, os.urandom(6).hex())
        content = json.dumps(
            {"host": me.host, "pid": me.pid, "start": me.start, "token": me.token, "created": time.time()}
        ).encode()
        if not self._create(content, me):
            return False
        self._token = me.token
        self._beat = _heartbeat.register(self.path, self.timing.heartbeat)
        return True

    def _create(self, content: bytes, me: Owner) -> bool:
        unique = f"{self.path}.{me.tag()}.new"
        try:
            fd = os.open(unique, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd = os.open(unique, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        try:
            os.link(unique, self.path)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            # NFS may report an error for a link that did succeed (lost reply): the link count says.
            with contextlib.suppress(OSError):
                if os.stat(unique).st_nlink == 2:
                    return True
            if exc.errno not in _NO_LINK:
                raise
        finally:
            remove_quietly(unique)
        try:  # no hard links here: O_EXCL (content written right after; readers judge by age)
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        return True

    def acquire(self, *, timeout: float | None = None, until: Callable[[], bool] | None = None) -> bool:
        """Wait for the lock. Returns True when held, False as soon as ``until()`` is true.

        Raises:
            CacheLockTimeout: still held by a live owner after ``timeout`` seconds (default
                ``timing.timeout``); the message names the lock and its owner.
        """
        limit = self.timing.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        delay = self.timing.poll_min
        while True:
            if self.try_acquire():
                return True
            if until is not None and until():
                return False
            info = read_lock(self.path)
            if info is None:
                continue  # released between our attempt and the read: try again at once
            if self.is_stale(info):
                if self._break(info):
                    self.takeovers += 1
                    who = f"{info.owner.host} pid {info.owner.pid}" if info.owner else "unknown owner"
                    log.warning("took over stale cache lock %s (held by %s, dead)", self.path, who)
                continue
            now = time.monotonic()
            if now >= deadline:
                who = f"host {info.owner.host} pid {info.owner.pid}" if info.owner else "an unknown process"
                raise CacheLockTimeout(
                    f"waited {limit:.0f}s for the cache lock {self.path}, held by {who} that is still "
                    f"alive (heartbeat {time.time() - info.mtime:.0f}s ago). Another process is still "
                    "downloading this shard (slow network or a very large shard), or it hangs. Raise "
                    "lock_timeout= (SHARDSTREAM_LOCK_TIMEOUT), or remove the lock file if that process "
                    "is gone."
                )
            self.waited = True
            time.sleep(min(delay, deadline - now) * random.uniform(0.5, 1.0))
            delay = min(delay * 1.6, self.timing.poll_max)

    # -- staleness --------------------------------------------------------------------------------

    def is_stale(self, info: LockInfo) -> bool:
        """True if the holder in ``info`` is dead (see the module docstring)."""
        if info.owner is not None:
            alive = is_alive(info.owner, self.owner.host)
            if alive is not None:
                return not alive
        age = fs_now(os.path.dirname(self.path), self.owner) - info.mtime
        return age > self.timing.stale_after

    def _break(self, seen: LockInfo) -> bool:
        breaker = self.path + ".break"
        try:
            fd = os.open(breaker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
        except FileExistsError:
            # Breaking takes milliseconds: a .break file older than stale_after is debris.
            with contextlib.suppress(OSError):
                now = fs_now(os.path.dirname(self.path), self.owner)
                if now - os.stat(breaker).st_mtime > self.timing.stale_after:
                    remove_quietly(breaker)
            return False
        try:
            current = read_lock(self.path)
            if current is None or current.raw != seen.raw:
                return False  # released or re-taken since we looked: not stale any more
            return remove_quietly(self.path)
        finally:
            remove_quietly(breaker)

    # -- releasing --------------------------------------------------------------------------------

    def release(self) -> None:
        """Release the lock (only if this process still holds it)."""
        token, self._token = self._token, None
        if self._beat is not None:
            _heartbeat.unregister(self._beat)
            self._beat = None
        if token is None:
            return
        info = read_lock(self.path)
        if info is not None and info.owner is not None and info.owner.token == token:
            remove_quietly(self.path)
        else:
            log.warning("cache lock %s was taken over while held (this process was judged dead)", self.path)

    def __enter__(self) -> ShardLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
