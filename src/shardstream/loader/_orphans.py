"""A worker process ends when the process of its loader ends, however that one ended.

torch's workers watch their parent (``os.getppid()``) and stop when it changes. A worker started
from a forkserver (shardstream's, when other threads run: under torchrun, every rank) has the
server for its parent, and the server lives as long as any process it started: when the rank is
killed (the OOM killer, torchrun's agent ending a failed group), its workers and the server would
live on, holding memory and the rank's output pipes, with nobody to read their batches.
:func:`follow` makes such a worker wait, on a thread that does nothing else, for the loader's
process to end (``pidfd_open``: woken by the kernel; elsewhere a check every second), then
interrupt itself as Ctrl-C would: torch's worker loop returns, and the process exits its normal
way (shared-memory names removed); one that does not within :data:`GRACE` seconds is ended.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

from ..forks import gate, process_alive

__all__ = ["GRACE", "follow"]

#: Seconds a worker whose loader's process ended has to exit its normal way.
GRACE = 10.0


def follow(pid: int) -> None:
    """In a worker: end this process when process ``pid`` (its loader's) ends. Nothing to do
    when ``pid`` is the parent (torch's own watchdog sees that)."""
    if pid == os.getppid():
        return
    gate.start(lambda: _wait(pid), name="shardstream-follow-loader")


def _wait(pid: int) -> None:
    fd = None
    with contextlib.suppress(AttributeError, OSError):  # pidfd_open: Linux 5.3+, Python 3.9+
        fd = os.pidfd_open(pid)
    if fd is not None:
        select.select([fd], [], [])
    else:
        while process_alive(pid):
            time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGINT)  # torch's worker loop ends on KeyboardInterrupt
    time.sleep(GRACE)
    os._exit(1)
