"""curl as a warm client: one process fetches several passes over kept-alive connections.

A curl process per pass pays its start-up (exec, libcurl's set-up, reading its config) and opens
its connections again every pass, while a library client measured beside it keeps its process
and its connection pool from pass to pass: a 64 MB transfer on loopback takes tens of
milliseconds, the same order as the start-up. Here one curl process fetches the URLs of
``1 + K`` passes. It writes a line as each transfer finishes (``-w``: the new connections that
transfer opened; on stderr, which C leaves unbuffered, where stdout into a pipe would hold the
lines back until its buffer fills), and this process notes the time of each line as it arrives.
The first pass (start-up, connection set-up) is the warm-up; the measurement runs from the end
of its transfers to the end of the last, with curl's own CPU (``/proc/PID/stat``) read at the
same two moments. So start-up is left out rather than estimated and subtracted, and the
connections curl opens in the measured passes are counted (none, where it keeps them alive).

With ``--parallel``, the first transfers of a pass start while the last of the pass before are
still running: curl keeps its window full across pass boundaries, where a client that finishes
each pass before the next (as bench_stores' does) drains its window at the end of every pass.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from pathlib import Path

from _common import Measurement

__all__ = ["WarmCurl"]


def _cpu(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class WarmCurl:
    """A self-timed pass runner for ``_common.measure``: each call is one curl process over
    ``1 + passes`` passes of ``urls`` (see the module docstring), and returns the measured passes.

    Args:
        curl: the curl binary.
        urls: one pass's URLs, each fetched to ``/dev/null``.
        config: a scratch file for curl's ``-K`` list of URLs (rewritten when ``passes`` changes).
        flags: more curl options (``-L`` for redirects, ``--parallel --parallel-max N``).
        samples: what one pass counts as samples (objects, or bytes for a streamed object).
        nbytes: bytes one pass moves.
        min_time: the first call measures one pass and sets ``passes`` so that a call's measured
            passes last at least this long (the warm-up pass of ``run_alternating``).
    """

    def __init__(
        self,
        curl: str,
        urls: list[str],
        config: Path,
        *,
        flags: tuple[str, ...] = (),
        samples: int,
        nbytes: int,
        min_time: float,
    ) -> None:
        self.curl, self.urls, self.config, self.flags = curl, urls, config, flags
        self.samples, self.nbytes, self.min_time = samples, nbytes, min_time
        self.passes = 0  # measured passes per call, set by the first call
        self._written = -1
        #: New connections curl opened in each call's measured passes, per pass.
        self.connects: list[float] = []

    def _write(self, passes: int) -> None:
        if self._written != passes:
            entry = "".join(f'url = "{u}"\noutput = "/dev/null"\n' for u in self.urls)
            self.config.write_text(entry * (1 + passes))
            self._written = passes

    def __call__(self) -> Measurement:
        passes = self.passes or 1
        self._write(passes)
        write_out = "%{stderr}%{num_connects}\\n"
        # --no-progress-meter: --parallel draws one on stderr even with -s.
        command = [self.curl, "-sS", "--no-progress-meter", "--fail", *self.flags, "-w", write_out]
        command += ["-K", str(self.config)]
        per_pass = len(self.urls)
        errors: list[str] = []
        with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
            assert proc.stderr is not None
            done = connects = 0
            t0 = c0 = 0.0
            for line in proc.stderr:
                if not line.strip().isdigit():  # curl's own messages (-S)
                    errors.append(line.strip())
                    continue
                done += 1
                if done > per_pass:
                    connects += int(line)
                if done == per_pass:  # the warm-up pass has finished
                    t0, c0 = time.perf_counter(), _cpu(proc.pid)
                elif done == per_pass * (1 + passes):
                    t1, c1 = time.perf_counter(), _cpu(proc.pid)
            proc.wait()
        if proc.returncode or done != per_pass * (1 + passes):
            raise RuntimeError(
                f"curl exited with status {proc.returncode} after {done} of {per_pass * (1 + passes)} "
                f"transfers ({' '.join(command[:-2])} -K {self.config}): {' '.join(errors)[:500]}"
            )
        if not self.passes:  # calibrate: enough passes per call to last min_time
            self.passes = max(1, math.ceil(self.min_time / max(t1 - t0, 1e-6)))
        self.connects.append(connects / passes)
        return Measurement(self.samples * passes, t1 - t0, c1 - c0, self.nbytes * passes, passes)
