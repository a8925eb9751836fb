"""Peak resident memory of a process tree, sampled from a separate process.

A sampler thread inside the measured process would share its GIL: walking the process table
with psutil every 20 ms held it for ~0.6 ms each time (3% of a core), which slowed the loaders
that run Python threads in that process (ss.Loader's thread mode, SPDL) and not those whose
work runs in worker processes. The sampler here is this file run as its own small Python
process (``python _rss.py <pid> <period>``) that reads ``/proc`` (``_common.children`` and
``statm``) every 20 ms; it leaves itself out of the tree.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path
from typing import IO

from _common import children

__all__ = ["TreeRss"]


def _tree(pid: int, leave_out: int) -> list[int]:
    found = [pid]
    for child in children(pid):
        if child != leave_out:
            found += _tree(child, leave_out)
    return found


def _rss(root: int, page: int) -> int:
    total = 0
    for pid in _tree(root, os.getpid()):
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * page
        except OSError:
            pass
    return total


def _sample(root: int, period: float) -> None:
    """The sampler's loop: ``start`` on stdin begins a peak, ``stop`` writes it, anything else ends."""
    page = os.sysconf("SC_PAGE_SIZE")
    peak, running = 0, False
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], period if running else None)
        if ready:
            line = sys.stdin.readline().strip()
            if line == "start":
                peak, running = _rss(root, page), True
            elif line == "stop":
                peak, running = max(peak, _rss(root, page)), False
                print(peak, flush=True)
            else:
                return
        elif running:
            peak = max(peak, _rss(root, page))


class TreeRss:
    """``with TreeRss() as rss: ...`` then ``rss.peak``: the largest sum of the resident memory
    of this process and its descendants seen every 20 ms (a sampler process, kept for the run)."""

    _proc: subprocess.Popen[str] | None = None

    def __init__(self) -> None:
        self.peak = 0

    @classmethod
    def _sampler(cls) -> tuple[IO[str], IO[str]]:
        if cls._proc is None or cls._proc.poll() is not None:
            cls._proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), str(os.getpid()), "0.02"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        assert cls._proc.stdin is not None and cls._proc.stdout is not None
        return cls._proc.stdin, cls._proc.stdout

    def __enter__(self) -> TreeRss:
        stdin, _ = self._sampler()
        stdin.write("start\n")
        stdin.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        stdin, stdout = self._sampler()
        stdin.write("stop\n")
        stdin.flush()
        self.peak = int(stdout.readline())

    @classmethod
    def close(cls) -> None:
        """Stop the sampler process (the run's end)."""
        if cls._proc is not None:
            proc, cls._proc = cls._proc, None
            try:
                assert proc.stdin is not None
                proc.stdin.write("quit\n")
                proc.stdin.close()
            except (OSError, ValueError):
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    _sample(int(sys.argv[1]), float(sys.argv[2]))
