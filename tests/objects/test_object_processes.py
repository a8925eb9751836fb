"""ObjectStream across processes: 2 gloo ranks with split="equal", and resume in a new process."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _prefix import Prefix
from _procs import run_in_session, run_spawned

import shardstream as ss
from shardstream.testing import free_port

pytestmark = pytest.mark.s3

BATCH = 4


def rank_main(rank: int, port: int, url: str, opts: dict[str, Any], out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=20)
    )
    try:
        ds = ss.ObjectStream(url, split="equal", batch_size=BATCH, seed=3, storage_options=opts)
        pipeline = ds.to_tuple("__key__").batched(BATCH)
        loader = torch.utils.data.DataLoader(pipeline, batch_size=None, num_workers=2)
        keys: list[str] = []
        batches = 0
        for (batch,) in loader:
            batches += 1
            keys += list(batch)
            step = torch.ones(1)
            dist.all_reduce(step)  # a rank with an extra batch would wait here alone -> timeout
        Path(out).write_text(json.dumps({"keys": keys, "batches": batches, "len": len(pipeline)}))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(180)
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
def test_two_ranks_equal_split(samples40: Prefix, tmp_path: Path) -> None:
    port = free_port()
    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    opts = samples40.s3.storage_options
    codes = run_spawned(rank_main, [(r, port, samples40.url, opts, outs[r]) for r in range(2)], timeout=150)
    assert codes == [0, 0]
    reports = [json.loads(Path(o).read_text()) for o in outs]
    assert [r["batches"] for r in reports] == [5, 5] and [r["len"] for r in reports] == [5, 5]
    keys = reports[0]["keys"] + reports[1]["keys"]
    assert sorted(keys) == [f"{i:05d}" for i in range(40)]  # disjoint and complete


_RESUME = """
import json, sys
import shardstream as ss
url, opts, mode, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
ds = ss.ObjectStream(url, seed=9, storage_options=opts, window=4).to_tuple("__key__")
if mode == "first":
    ds.set_epoch(1)
    it = iter(ds)
    keys = [next(it)[0] for _ in range(13)]
    json.dump({"keys": keys, "state": ds.state_dict()}, open(path, "w"))
    it.close()
else:
    saved = json.load(open(path))
    ds.load_state_dict(saved["state"])
    print(json.dumps([k for (k,) in ds]))
"""


@pytest.mark.timeout(120)
def test_resume_in_a_new_process_continues_exactly(samples40: Prefix, tmp_path: Path) -> None:
    ds = ss.ObjectStream(samples40.url, seed=9, storage_options=samples40.s3.storage_options)
    ds.set_epoch(1)
    whole = [s["__key__"] for s in ds]
    env = {**os.environ, "PYTHONPATH": str(Path(ss.__file__).parents[1])}
    state = tmp_path / "state.json"
    args = [samples40.url, json.dumps(samples40.s3.storage_options)]
    code, out = run_in_session(
        [sys.executable, "-c", _RESUME, *args, "first", str(state)], cwd=tmp_path, env=env, timeout=90
    )
    assert code == 0, out
    first = json.loads(state.read_text())["keys"]
    code, out = run_in_session(
        [sys.executable, "-c", _RESUME, *args, "rest", str(state)], cwd=tmp_path, env=env, timeout=90
    )
    assert code == 0, out
    rest = json.loads(out.strip().splitlines()[-1])
    assert first + rest == whole and len(rest) == 27
