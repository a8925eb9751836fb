"""Lightning Trainer(strategy="ddp", accelerator="cpu", devices=2), 2 epochs, via examples/lightning_ddp.py.

Lightning's DDP launcher re-runs ``sys.argv`` for the other ranks, so the trainer cannot run inside
pytest's own process: the test runs the example script in a new session and kills that whole
session (by its process group id) if it overruns.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _components import require_module

sys.path.insert(0, str(Path(__file__).parent))
from _procs import run_in_session  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning_ddp.py"
DEADLINE = 150.0


@pytest.mark.timeout(200)
@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_lightning_ddp_two_cpu_processes_two_epochs(tmp_path: Path) -> None:
    require_module("lightning", "the Lightning integration")
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSTREAM_", "WDS_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(name, None)
    cmd = [
        sys.executable,
        str(EXAMPLE),
        "--demo-data",
        str(tmp_path / "shards"),
        "--devices",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--num-workers",
        "2",
        "--report",
        str(report),
    ]
    returncode, output = run_in_session(cmd, cwd=tmp_path, env=env, timeout=DEADLINE)
    assert returncode == 0, output[-3000:]
    result = json.loads(report.read_text())
    expected = sum((3, 40, 12, 25, 7, 33, 18)) // (2 * 4)  # 17 batches per rank per epoch
    assert result["world_size"] == 2
    assert result["num_training_batches"] == expected
    assert result["batches_per_epoch"] == [expected, expected]
    assert result["global_step"] == 2 * expected
    assert result["val_samples"] == 138  # exact mode: every sample once, padding dropped
