"""examples/torchrun_ddp.py under a real ``torchrun --nproc_per_node=2`` (gloo, 2 workers per rank)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torchrun_ddp.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both ranks share this session
            proc.wait(10)
    assert proc.returncode == 0, output[-3000:]
    steps = sorted(re.findall(r"rank (\d) epoch (\d): (\d+) steps \(len\(loader\)=(\d+)\)", output))
    assert steps == [
        ("0", "0", "17", "17"),
        ("0", "1", "17", "17"),
        ("1", "0", "17", "17"),
        ("1", "1", "17", "17"),
    ], output[-3000:]
