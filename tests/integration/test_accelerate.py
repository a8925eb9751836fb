"""Hugging Face Accelerate with ``ss.Loader``: ``prepare`` passes the loader through unchanged, and
``register_for_checkpointing(loader)`` (the documented one-line adapter) makes ``save_state`` in the
middle of an epoch and ``load_state`` in a fresh process continue with exactly the remaining
batches, in thread mode and in process mode."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _procs import run_in_session

import shardstream as ss

SCRIPT = Path(__file__).resolve().parent / "_accelerate_run.py"


def _run(root: Path, modes: str, kind: str) -> list[list[list[str]]]:
    out = root / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSTREAM_", "WDS_", "ACCELERATE_"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)
    code, output = run_in_session(
        [sys.executable, str(SCRIPT), str(root), modes, str(out), kind], cwd=root, env=env, timeout=150
    )
    assert code == 0, output[-3000:]
    return [json.loads(Path(f"{out}.{mode}.json").read_text()) for mode in modes.split(",")]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_accelerate_save_state_mid_epoch_resumes_with_exactly_the_remaining_batches(
    tmp_path: Path, kind: str
) -> None:
    pytest.importorskip("accelerate")
    for s in range(4):
        with ss.ShardWriter(str(tmp_path / f"p{s}-%02d.tar"), maxcount=1000) as sink:
            for i in range(9 + 4 * s):
                sink.write({"__key__": f"s{s}_{i:03d}", "cls": i})
    full, stopped = _run(tmp_path, "full,stop", kind)
    assert sorted(sum(full, [])) == sorted(f"s{s}_{i:03d}" for s in range(4) for i in range(9 + 4 * s))
    (resumed,) = _run(tmp_path, "resume", kind)  # a fresh process builds everything again
    assert len(stopped) == 4
    assert stopped + resumed == full
