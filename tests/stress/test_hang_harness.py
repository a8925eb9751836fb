"""A short run of the DDP hang harness (``hang_harness.py``): 2 and 3 gloo ranks, every
distributed configuration one after another, local and HTTP shards, Lightning DDP, a CPU hog.
No start may hang or fail, and no process the harness started may outlive it. The full run (50
launches, S3 included) is a command of its own; see the harness's docstring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from _components import require_module
from hang_harness import identity

HARNESS = Path(__file__).resolve().parent / "hang_harness.py"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_launches_of_the_ddp_harness_never_hang_and_leave_no_process(tmp_path: Path) -> None:
    require_module("lightning", "the Lightning integration")
    out = tmp_path / "hang"
    cmd = [sys.executable, str(HARNESS), "--launches", "2", "--worlds", "2,3", "--hog"]
    cmd += ["--stores", "local,http", "--timeout", "60", "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "SHARDSTREAM_WORKER_START"}  # the real rule
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540, env=env)
    summary = json.loads((out / "summary.json").read_text())
    assert proc.returncode == 0, (summary, proc.stdout[-3000:], proc.stderr[-3000:])
    assert summary["hangs"] == 0 and summary["errors"] == 0 and summary["walls"] == 0
    # 2 ranks x (8 configurations x 2 passes + Lightning) + 3 ranks x the same
    assert summary["starts"] == 5 * (8 * 2 + 1)
    # Every process the run saw (ranks, workers, forkservers, servers, the hog), by PID and start
    # time, so that a PID reused since by another program is not taken for one of them.
    seen = (out / "pids.txt").read_text().split()
    assert len(seen) >= 5 * 3  # at least each rank, its forkserver and a worker
    left = [name for name in seen if (now := identity(int(name.split(":")[0]))) == name and _running(now)]
    assert not left, f"processes of the harness still running: {left}"


def _running(name: str) -> bool:
    pid = int(name.split(":")[0])
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
