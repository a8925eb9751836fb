"""Lightning checkpoints a WebLoader mid-epoch (it has state_dict/load_state_dict) and resumes it.

Lightning saves the loader's state while its data fetcher holds one prefetched batch; the loader
finds that fetcher and rolls its state back by the batches it holds, so nothing is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import shardstream as ss

SCRIPT = Path(__file__).resolve().parent / "_resume_lightning.py"


def _run(root: Path, mode: str, out: Path) -> list[list[str]]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SHARDSTREAM_", "WDS_", "RANK", "WORLD_SIZE"))
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(root), mode, str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: list[list[str]] = json.loads(out.read_text())
    return result


@pytest.mark.timeout(400)
def test_lightning_resumes_mid_epoch_with_exactly_the_remaining_batches(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    for s in range(5):
        with ss.ShardWriter(str(tmp_path / f"p{s}-%02d.tar"), maxcount=1000) as sink:
            for i in range(10 + 3 * s):
                sink.write({"__key__": f"s{s}_{i:03d}", "cls": i})
    full = _run(tmp_path, "full", tmp_path / "full.json")
    stopped = _run(tmp_path, "stop", tmp_path / "stop.json")
    resumed = _run(tmp_path, "resume", tmp_path / "resume.json")
    assert len(stopped) == 5
    assert stopped + resumed == full
