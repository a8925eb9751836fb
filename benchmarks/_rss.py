"""Peak resident memory of a process tree, sampled from a separate process.

A sampler thread inside the measured process would share its GIL: walking the process table
with psutil every 20 ms held it for ~0.6 ms each time (3% of a core), which slowed the loaders
that run Python threads in that process (ss.Loader's thread mode, SPDL) and not those whose
work runs in worker processes. The sampler here is its own small Python process that reads
``/proc`` (``task/*/children`` and ``statm``) every 20 ms; it leaves itself out of the tree.
"""

from __future__ import annotations

import subprocess
import sys
from typing import IO

__all__ = ["TreeRss"]

_SAMPLER = r"""
import os, select, sys

root, period = int(sys.argv[1]), float(sys.argv[2])
page = os.sysconf("SC_PAGE_SIZE")
me = os.getpid()


def tree(pid):
    out = [pid]
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = f.read().split()
        except OSError:
            continue
        for kid in kids:
            if int(kid) != me:
                out += tree(int(kid))
    return out


def rss():
    total = 0
    for pid in tree(root):
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * page
        except OSError:
            pass
    return total


peak, running = 0, False
while True:
    ready, _, _ = select.select([sys.stdin], [], [], period if running else None)
    if ready:
        line = sys.stdin.readline().strip()
        if line == "start":
            peak, running = rss(), True
        elif line == "stop":
            peak, running = max(peak, rss()), False
            print(peak, flush=True)
        else:
            break
    elif running:
        peak = max(peak, rss())
"""


class TreeRss:
    """``with TreeRss() as rss: ...`` then ``rss.peak``: the largest sum of the resident memory
    of this process and its descendants seen every 20 ms (a sampler process, kept for the run)."""

    _proc: subprocess.Popen[str] | None = None

    def __init__(self) -> None:
        self.peak = 0

    @classmethod
    def _sampler(cls) -> tuple[IO[str], IO[str]]:
        import os

        if cls._proc is None or cls._proc.poll() is not None:
            cls._proc = subprocess.Popen(
                [sys.executable, "-c", _SAMPLER, str(os.getpid()), "0.02"],
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
