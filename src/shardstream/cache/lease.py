"""Reader leases: an entry with a live lease is in use and must not be evicted.

A lease is an empty file ``<lease dir>/<host>~<pid>~<start>~<token>`` that exists while a
process reads (or fills) the entry, kept fresh by the process heartbeat. Leases of dead holders
are judged exactly like locks (PID check on this host, heartbeat age elsewhere) and removed.
"""

from __future__ import annotations

import os

from . import _heartbeat
from .owner import Owner, fs_now, is_alive, remove_quietly

__all__ = ["Lease", "live_leases"]


class Lease:
    """A reader's claim on one entry; release it when the stream is closed.

    Args:
        directory: the entry's lease directory (created if missing).
        owner: this process.
        heartbeat: seconds between touches.
    """

    def __init__(self, directory: str, *, owner: Owner, heartbeat: float) -> None:
        me = Owner(owner.host, owner.pid, owner.start, os.urandom(6).hex())
        self.path = os.path.join(directory, me.tag())
        # The lease directory is created once and never removed by release(): removing it when
        # the last lease goes would race with another process creating its lease there (between
        # makedirs and open, or inside makedirs). An empty directory costs one inode per entry
        # and counts as "no live lease".
        os.makedirs(directory, exist_ok=True)
        with open(self.path, "wb"):
            pass
        self._beat: _heartbeat.Beat | None = _heartbeat.register(self.path, heartbeat)

    def release(self) -> None:
        """Drop the lease (idempotent)."""
        beat, self._beat = self._beat, None
        if beat is not None:
            _heartbeat.unregister(beat)
            remove_quietly(self.path)


def live_leases(directory: str, *, owner: Owner, stale_after: float, prune: bool = True) -> int:
    """Number of live leases in ``directory``; dead holders' leases are removed on the way
    (unless ``prune`` is False: ``shardstream cache ls`` only looks)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    live = 0
    now: float | None = None
    for name in names:
        path = os.path.join(directory, name)
        holder = Owner.from_tag(name)
        alive = is_alive(holder, owner.host) if holder is not None else None
        if alive is None:
            if now is None:
                now = fs_now(os.path.dirname(directory), owner)
            try:
                alive = now - os.stat(path).st_mtime <= stale_after
            except FileNotFoundError:
                continue
        if alive:
            live += 1
        elif prune:
            remove_quietly(path)
    return live
