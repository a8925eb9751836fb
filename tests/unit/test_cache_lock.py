"""Lock files: exclusion, owner records, stale takeover (dead PID, silent heartbeat), backoff."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shardstream.cache.lock import LockTiming, ShardLock, read_lock
from shardstream.cache.owner import Owner
from shardstream.errors import CacheLockTimeout

FAST = LockTiming(timeout=5.0, stale_after=1.0, heartbeat=0.2, poll_min=0.005, poll_max=0.05)


def _lock(path: Path, host: str | None = None, timing: LockTiming = FAST) -> ShardLock:
    return ShardLock(str(path), owner=Owner.current(host), timing=timing)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_exclusive_and_owner_recorded(tmp_path: Path) -> None:
    a, b = _lock(tmp_path / "x.lock"), _lock(tmp_path / "x.lock")
    assert a.try_acquire()
    assert not b.try_acquire()
    info = read_lock(str(tmp_path / "x.lock"))
    assert info is not None and info.owner is not None and info.owner.pid == os.getpid()
    a.release()
    assert b.try_acquire()
    b.release()
    assert not (tmp_path / "x.lock").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no .new or .break debris


def test_threads_get_exclusive_access(tmp_path: Path) -> None:
    inside, overlaps = [0], [0]

    def work() -> None:
        for _ in range(20):
            lock = _lock(tmp_path / "x.lock")
            lock.acquire()
            inside[0] += 1
            if inside[0] > 1:
                overlaps[0] += 1
            time.sleep(0.001)
            inside[0] -= 1
            lock.release()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps[0] == 0


def test_dead_owner_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    me = Owner.current()
    path = tmp_path / "x.lock"
    path.write_text(json.dumps({"host": me.host, "pid": _dead_pid(), "start": None, "token": "dead"}))
    lock = _lock(path)
    t0 = time.monotonic()
    assert lock.acquire(timeout=5)
    assert time.monotonic() - t0 < 3.0 and lock.takeovers == 1  # not the 5 s timeout; generous for load
    lock.release()


def test_other_host_taken_over_only_after_heartbeat_goes_silent(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    other = _lock(path, host="node-b")
    assert other.try_acquire()  # its heartbeat runs (this process touches it)
    waiter = _lock(path)
    with pytest.raises(CacheLockTimeout, match=r"x\.lock.*node-b"):
        waiter.acquire(timeout=1.5)  # stale_after=1.0 but the heartbeat keeps it fresh
    # Simulate node loss: the heartbeat stops.
    from shardstream.cache import _heartbeat

    assert other._beat is not None
    _heartbeat.unregister(other._beat)
    t0 = time.monotonic()
    assert waiter.acquire(timeout=5)
    assert 0.3 < time.monotonic() - t0 < 3.0 and waiter.takeovers == 1
    waiter.release()


def test_live_same_host_owner_is_never_taken_over(tmp_path: Path) -> None:
    holder = _lock(tmp_path / "x.lock")
    assert holder.try_acquire()
    os.utime(tmp_path / "x.lock", (0, 0))  # ancient mtime does not matter: the PID is alive
    with pytest.raises(CacheLockTimeout, match="still alive"):
        _lock(tmp_path / "x.lock").acquire(timeout=0.3)
    holder.release()


def test_waiters_back_off(tmp_path: Path) -> None:
    holder = _lock(tmp_path / "x.lock")
    assert holder.try_acquire()
    timing = LockTiming(timeout=1.0, stale_after=60, heartbeat=5)  # default backoff 10 ms .. 0.5 s
    waiter = _lock(tmp_path / "x.lock", timing=timing)
    attempts = [0]
    original = waiter.try_acquire

    def counting() -> bool:
        attempts[0] += 1
        return original()

    waiter.try_acquire = counting  # type: ignore[method-assign]
    with pytest.raises(CacheLockTimeout):
        waiter.acquire()
    assert attempts[0] < 30 and waiter.waited
    holder.release()


def test_until_stops_waiting(tmp_path: Path) -> None:
    holder = _lock(tmp_path / "x.lock")
    assert holder.try_acquire()
    flag = tmp_path / "ready"
    threading.Timer(0.1, flag.touch).start()
    assert _lock(tmp_path / "x.lock").acquire(until=flag.exists) is False
    holder.release()


def test_lost_lock_is_not_released_by_old_owner(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    old = _lock(path)
    assert old.try_acquire()
    path.unlink()  # judged dead and broken by someone else ...
    new = _lock(path)
    assert new.try_acquire()  # ... who now holds it
    old.release()  # must not remove the new owner's lock
    assert path.exists()
    new.release()


def test_leases_survive_concurrent_release_of_the_directory(tmp_path) -> None:
    """Threads creating and releasing leases on one entry race on its directory: none may fail."""
    import threading

    from shardstream.cache.lease import Lease
    from shardstream.cache.owner import Owner

    owner = Owner.current()
    directory = str(tmp_path / "lease" / "entry")
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            for _ in range(300):
                Lease(directory, owner=owner, heartbeat=60.0).release()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
