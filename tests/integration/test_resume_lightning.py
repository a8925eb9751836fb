"""Lightning checkpoints a shardstream loader mid-epoch (it has state_dict/load_state_dict) and
resumes it: ``WebLoader``, and ``ss.Loader`` in thread mode and in process mode.

Lightning saves the loader's state while its data fetcher holds one prefetched batch; shardstream's
callback (``loader/lightning.py``, added to the Trainer by the loader's first ``iter()`` under it)
counts the batches trained on, and the loader rolls its state back by the others, so nothing is
skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _components import require_module

import shardstream as ss

SCRIPT = Path(__file__).resolve().parent / "_resume_lightning.py"
KINDS = ["web", "threads", "processes"]  # WebLoader; ss.Loader with threads, with processes


def _run(root: Path, mode: str, out: Path, kind: str, devices: int = 1) -> list[list[str]]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SHARDSTREAM_", "WDS_", "RANK", "WORLD_SIZE"))
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(root), mode, str(out), str(devices), kind],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if devices > 1:
        return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(devices)]
    result: list[list[str]] = json.loads(out.read_text())
    return result


@pytest.mark.timeout(400)
# WebLoader and ss.Loader's thread mode in the default suite (nothing registers shardstream's
# callback with Lightning any more: the loader's first iter() under the Trainer adds it); process
# mode (about 11 s) with the slow tests, which CI runs: the default suite stays short on 2 cores.
@pytest.mark.parametrize("kind", ["web", "threads", pytest.param("processes", marks=pytest.mark.slow)])
def test_lightning_resumes_mid_epoch_with_exactly_the_remaining_batches(tmp_path: Path, kind: str) -> None:
    require_module("lightning", "the Lightning integration")
    for s in range(5):
        with ss.ShardWriter(str(tmp_path / f"p{s}-%02d.tar"), maxcount=1000) as sink:
            for i in range(10 + 3 * s):
                sink.write({"__key__": f"s{s}_{i:03d}", "cls": i})
    full = _run(tmp_path, "full", tmp_path / "full.json", kind)
    written = sorted(f"s{s}_{i:03d}" for s in range(5) for i in range(10 + 3 * s))
    assert sorted(sum(full, [])) == written, "the uninterrupted fit trains on every sample once"
    stopped = _run(tmp_path, "stop", tmp_path / "stop.json", kind)
    resumed = _run(tmp_path, "resume", tmp_path / "resume.json", kind)
    assert len(stopped) == 5
    assert stopped + resumed == full


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", KINDS)
def test_lightning_ddp_two_processes_resume_with_exactly_the_remaining_batches(
    tmp_path: Path, kind: str
) -> None:
    """Lightning writes rank 0's checkpoint only: the loader gathers every rank's state into it
    when Lightning takes it, and each rank restores its own."""
    require_module("lightning", "the Lightning integration")
    for s in range(6):
        with ss.ShardWriter(str(tmp_path / f"p{s}-%02d.tar"), maxcount=1000) as sink:
            for i in range(10 + 3 * s):
                sink.write({"__key__": f"s{s}_{i:03d}", "cls": i})
    full = _run(tmp_path, "full", tmp_path / "full.json", kind, devices=2)
    stopped = _run(tmp_path, "stop", tmp_path / "stop.json", kind, devices=2)
    resumed = _run(tmp_path, "resume", tmp_path / "resume.json", kind, devices=2)
    state = torch_load(tmp_path / "mid.ckpt")
    assert len(state["ranks"]) == 2, "the checkpoint holds both ranks' loader states"
    for rank in range(2):
        assert len(stopped[rank]) == 3
        assert stopped[rank] + resumed[rank] == full[rank], f"rank {rank}"
    assert not set(sum(full[0], [])) & set(sum(full[1], [])), "ranks read disjoint samples"


def torch_load(path: Path) -> dict[str, Any]:
    """The loader state inside a Lightning checkpoint."""
    import torch

    ckpt = torch.load(path, weights_only=False)
    loops = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    state: dict[str, Any] = loops[0]
    return state
