"""examples/torchrun_ddp.py under a real ``torchrun --nproc_per_node=2`` (gloo, 2 workers per rank)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _procs import run_in_session  # noqa: E402
from _servers import free_port  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torchrun_ddp.py"


@pytest.mark.timeout(150)
@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_torchrun_two_ranks_equal_steps_every_epoch(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSTREAM_", "WDS_", "SLURM_"))}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        str(EXAMPLE),
        "--demo-data",
        str(tmp_path / "shards"),
        "--epochs",
        "2",
    ]
    returncode, output = run_in_session(cmd, cwd=tmp_path, env=env, timeout=120)
    assert returncode == 0, output[-3000:]
    steps = sorted(re.findall(r"rank (\d) epoch (\d): (\d+) steps \(len\(loader\)=(\d+)\)", output))
    assert steps == [
        ("0", "0", "17", "17"),
        ("0", "1", "17", "17"),
        ("1", "0", "17", "17"),
        ("1", "1", "17", "17"),
    ], output[-3000:]
