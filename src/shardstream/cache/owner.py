"""Who holds a lock or lease, and whether that holder is still alive.

A holder is ``(host, pid, start)``: ``start`` is the process start time in clock ticks since boot
(from ``/proc``), which tells a live holder from a new process that reused its PID. On the same
host liveness is checked directly (zombies count as dead). For a holder on another host only
its heartbeat can tell: the file's mtime, compared with the *file server's* clock (read by
touching a probe file), so clock skew between hosts does not matter.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
from dataclasses import dataclass

__all__ = ["Owner", "fs_now", "is_alive", "process_start"]

_SAFE_HOST = re.compile(r"[^A-Za-z0-9_.-]")


def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3 onwards of ``/proc/<pid>/stat`` (after the command name, which may hold spaces and
    parentheses), or ``None`` when the process is gone or there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), or ``None`` when unknown."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None  # field 22 of stat(5)
    except (IndexError, ValueError):
        return None


def _state(pid: int) -> bytes | None:
    fields = _stat_fields(pid)
    return fields[0][:1] if fields else None  # field 3 of stat(5): R, S, Z, ...


@dataclass(frozen=True)
class Owner:
    """A process that holds a lock or lease.

    Attributes:
        host: host name (sanitised for file names).
        pid: process id on that host.
        start: process start time (ticks since boot) or ``None`` where ``/proc`` is unavailable.
        token: random hex, unique per lock or lease instance.
    """

    host: str
    pid: int
    start: int | None
    token: str

    @classmethod
    def current(cls, host: str | None = None) -> Owner:
        """This process, with a fresh token. ``host`` overrides the host name (tests, containers)."""
        pid = os.getpid()
        name = _SAFE_HOST.sub("_", host or socket.gethostname()) or "localhost"
        return cls(name, pid, process_start(pid), secrets.token_hex(6))

    def tag(self) -> str:
        """``host~pid~start~token``: used in lease and temp file names."""
        return f"{self.host}~{self.pid}~{self.start if self.start is not None else '-'}~{self.token}"

    @classmethod
    def from_tag(cls, tag: str) -> Owner | None:
        """Parse :meth:`tag` output (possibly followed by a suffix); ``None`` if malformed."""
        parts = tag.split("~")
        if len(parts) < 4:
            return None
        try:
            start = None if parts[2] == "-" else int(parts[2])
            return cls(parts[0], int(parts[1]), start, parts[3].split(".")[0])
        except ValueError:
            return None


def is_alive(owner: Owner, host: str) -> bool | None:
    """``True``/``False`` for an owner on ``host`` (this host); ``None`` for another host."""
    if owner.host != host:
        return None
    if owner.pid == os.getpid():
        return owner.start is None or owner.start == process_start(owner.pid)
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    state = _state(owner.pid)
    if state in (b"Z", b"X"):
        return False  # killed but not yet reaped by its parent
    if owner.start is not None:
        current = process_start(owner.pid)
        if current is not None and current != owner.start:
            return False  # the PID was reused by another process
    return True


def fs_now(directory: str, owner: Owner) -> float:
    """The file server's current time: the mtime of a probe file touched just now."""
    probe = os.path.join(directory, f".clock~{owner.host}~{owner.pid}")
    try:
        with open(probe, "a"):
            pass
        os.utime(probe)
        return os.stat(probe).st_mtime
    except OSError:
        import time

        return time.time()


def remove_quietly(path: str) -> bool:
    """Unlink ``path``; ``False`` if it was already gone."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        return True
    return False
