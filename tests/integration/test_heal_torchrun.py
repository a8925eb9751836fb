"""A rank dies under torchrun's elastic agent (issue 45, part 5): ``--max-restarts=1`` restarts
every rank, each loads the last checkpoint, and the loader continues exactly; then the same
checkpoint, saved by 2 ranks, restores elastically into 1 rank with the same global batch.

Real ranks under ``python -m torch.distributed.run`` (gloo, a standalone rendezvous), workers
started the way torchrun's ranks start them (shardstream's forkserver: the process group's threads
run). Rank 1 kills itself with SIGKILL mid-epoch on the first attempt (``_heal_torchrun.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
from _heal_cases import keys, make, write_shards
from _heal_torchrun import EVERY, KILL_AT
from _procs import run_in_session

import shardstream as ss

HERE = Path(__file__).resolve().parent


def _still_here(cwd: Path, wait: float = 15.0) -> list[int]:
    """PIDs of processes that run in ``cwd`` (the ranks', their forkservers' and workers'), after
    ``wait`` seconds for the last ones to end."""
    deadline = time.monotonic() + wait
    while True:
        here = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.cwd() == str(cwd):
                    here.append(proc.pid)
        if not here or time.monotonic() > deadline:
            return here
        time.sleep(0.2)


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(300)
@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_heal_a_rank_killed_under_torchrun_continues_from_the_last_checkpoint(tmp_path: Path) -> None:
    urls = write_shards(tmp_path / "shards")
    (tmp_path / "urls.json").write_text(json.dumps(urls))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSTREAM_", "WDS_", "SLURM_"))}
    # The killed rank cannot remove its temporary files (its loader's stacks directory, torchrun's
    # own): they go under tmp_path, not the machine's /tmp.
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "--monitor-interval=0.5",
        str(HERE / "_heal_torchrun.py"),
        str(tmp_path),
    ]
    code, output = run_in_session(cmd, cwd=tmp_path, env=env, timeout=240)
    assert code == 0, output[-4000:]
    # The killed rank's workers (from shardstream's forkserver, not its children) ended with it.
    assert _still_here(tmp_path) == [], "processes of the killed rank outlived it"
    checkpoint = int((tmp_path / "ckpt" / "latest").read_text())
    assert checkpoint > KILL_AT - EVERY, "the run went on after the restart, and saved again"
    saved = KILL_AT - KILL_AT % EVERY  # the last checkpoint before the kill
    for rank in (0, 1):
        world = ss.World(rank=rank, world_size=2)
        full = [keys(b) for b in make("equal", urls, "ss.Loader", world=world)]
        first = _log(tmp_path / f"keys-rank{rank}-attempt0.jsonl")
        second = _log(tmp_path / f"keys-rank{rank}-attempt1.jsonl")
        assert first and second, f"rank {rank} ran twice"
        if rank == 1:
            assert first[-1]["step"] == KILL_AT, "rank 1 died mid-epoch, after its step 7"
        assert second[0]["step"] == saved + 1
        trained = [r["keys"] for r in first if r["step"] <= saved] + [r["keys"] for r in second]
        assert trained == full, f"rank {rank}: the batches before the checkpoint and after the restart"
    # The same checkpoint (both ranks' states) in 1 rank with the same global batch (2 x 4 = 1 x 8):
    # exactly the samples neither rank had trained on.
    states = [json.loads((tmp_path / "ckpt" / f"{saved}-rank{r}.json").read_text()) for r in (0, 1)]
    alone = make("equal", urls, "ss.Loader", world=ss.World(rank=0, world_size=1), batch=8)
    alone.load_state_dict(states)
    rest = [k for b in alone for k in keys(b)]
    alone.close()
    seen = [
        k
        for rank in (0, 1)
        for r in _log(tmp_path / f"keys-rank{rank}-attempt0.jsonl")
        if r["step"] <= saved
        for k in r["keys"]
    ]
    epoch = [
        k
        for rank in (0, 1)
        for b in make("equal", urls, "ss.Loader", world=ss.World(rank=rank, world_size=2))
        for k in keys(b)
    ]
    assert Counter(seen) + Counter(rest) == Counter(epoch) and max(Counter(epoch).values()) == 1
