"""Peak memory of a process tree, PSS and RSS, sampled from a separate process.

RSS summed over a tree counts every page that forked workers share with their parent (torch,
numpy, the interpreter, copy-on-write heap) once per process, so a loader with 2 workers looked
up to 3x its size. PSS (proportional set size, the ``Pss`` field of ``/proc/PID/smaps_rollup``)
charges a page shared by N processes 1/N to each, so the tree's sum counts it once; RSS is
reported beside it.

A sampler thread inside the measured process would share its GIL: walking the process table
with psutil every 20 ms held it for ~0.6 ms each time (3% of a core), which slowed the loaders
that run Python threads in that process (ss.Loader's thread mode, SPDL) and not those whose
work runs in worker processes. The sampler here is this file run as its own small Python
process (``python _rss.py <pid> <period>``) that reads ``/proc`` and leaves itself out of the
tree. Two rates, because the two files cost very different amounts:

* ``statm`` (RSS only) costs microseconds: read every ``period`` (20 ms);
* ``smaps_rollup`` (PSS and RSS) makes the kernel walk every page table of the process, about
  1 ms of CPU per 100 MB resident: a tree of 1.5 GB read every 20 ms would take most of a core
  from the loaders measured. It is read as often as keeps the sampler's share of one core under
  ``PSS_SHARE`` (the wait after each reading is its CPU cost over that share), and whenever the
  benchmark asks (:meth:`TreeMemory.sample`, e.g. between timed passes, where it costs nothing).

The peaks are the largest sums over the tree seen in any one reading (``peak = max over samples
of the tree's sum``), for each measure on its own.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from _common import children, not_client

__all__ = ["PSS_SHARE", "TreeMemory", "rollup"]

#: The largest share of one core the sampler spends reading ``smaps_rollup`` between requests.
PSS_SHARE = 0.02


def _tree(pid: int, leave_out: int) -> list[int]:
    found = [pid]
    for child in children(pid):
        if child != leave_out:
            found += _tree(child, leave_out)
    return found


def _statm_rss(pids: list[int], page: int) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * page
        except OSError:  # exited meanwhile
            pass
    return total


def rollup(pid: int | str = "self") -> tuple[int, int]:
    """``(PSS, RSS)`` of one process in bytes, from ``/proc/PID/smaps_rollup``; ``(0, 0)`` if
    it has exited."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss


def _rollups(pids: list[int]) -> tuple[int, int]:
    pss = rss = 0
    for pid in pids:
        p, r = rollup(pid)
        pss, rss = pss + p, rss + r
    return pss, rss


def _sample(root: int, period: float) -> None:
    """The sampler's loop. Commands on stdin: ``start`` begins new peaks, ``sample`` reads the
    tree now and writes the peaks so far, ``stop`` does the same and pauses; anything else ends."""
    page = os.sysconf("SC_PAGE_SIZE")
    me = os.getpid()
    pss = rss = 0
    running = False
    next_rollup = 0.0

    def full() -> None:
        nonlocal pss, rss, next_rollup
        c0 = time.thread_time()
        p, r = _rollups(_tree(root, me))
        pss, rss = max(pss, p), max(rss, r)
        # Wait long enough that these readings stay under PSS_SHARE of one core.
        next_rollup = time.monotonic() + max(period, (time.thread_time() - c0) / PSS_SHARE)

    while True:
        ready, _, _ = select.select([sys.stdin], [], [], period if running else None)
        if ready:
            line = sys.stdin.readline().strip()
            if line == "start":
                pss = rss = 0
                full()
                running = True
            elif line in ("sample", "stop"):
                full()
                running = line == "sample"
                print(pss, rss, flush=True)
            else:
                return
        elif running:
            if time.monotonic() >= next_rollup:
                full()
            else:
                rss = max(rss, _statm_rss(_tree(root, me), page))


class TreeMemory:
    """``with TreeMemory() as memory: ...`` then ``memory.pss`` and ``memory.rss``: the largest
    sums of the PSS and of the RSS of this process and its descendants, in bytes (a sampler
    process, kept for the run; see the module docstring for its rates)."""

    _proc: subprocess.Popen[str] | None = None

    def __init__(self) -> None:
        self.pss = self.rss = 0

    @classmethod
    def _sampler(cls) -> tuple[IO[str], IO[str]]:
        if cls._proc is None or cls._proc.poll() is not None:
            cls._proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), str(os.getpid()), "0.02"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            not_client(cls._proc.pid)  # its CPU is not the loaders'
        assert cls._proc.stdin is not None and cls._proc.stdout is not None
        return cls._proc.stdin, cls._proc.stdout

    def _ask(self, command: str) -> None:
        stdin, stdout = self._sampler()
        stdin.write(command + "\n")
        stdin.flush()
        if command != "start":
            self.pss, self.rss = (int(v) for v in stdout.readline().split())

    def __enter__(self) -> TreeMemory:
        self._ask("start")
        return self

    def sample(self) -> None:
        """Read the whole tree now (PSS included) and update the peaks so far; the caller waits
        for it (tens of ms for a large tree), so call it outside timed code."""
        self._ask("sample")

    def __exit__(self, *exc: object) -> None:
        self._ask("stop")

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
