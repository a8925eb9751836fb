"""The stage contract: every built-in stage saves its state and continues exactly after a restore.

For each case of ``_stage_cases.CASES`` the uninterrupted output of two iterations is recorded;
then the state is saved after several prefixes of each iteration, and every state is restored
in one fresh Python process, whose continuation must equal the rest of the uninterrupted output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _stage_cases import CASES, REPLAY_CASES, WINDOWED, run_epochs, save_after, write_shards

import shardstream as ss
from shardstream.errors import StateError

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def shard_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stage-contract")
    write_shards(root)
    return root


def _points(n: int) -> list[int]:
    return sorted({0, 1, n // 3, n // 2, n - 1, n} & set(range(n + 1)))


def test_every_stage_continues_exactly_in_a_fresh_process(shard_root: Path, tmp_path: Path) -> None:
    jobs: list[dict[str, Any]] = []
    expected: list[tuple[str, int, int, list[Any]]] = []
    for case in CASES:
        epochs = run_epochs(case, shard_root)
        assert epochs[0], f"{case}: the uninterrupted run yielded nothing"
        for epoch, items in enumerate(epochs):
            for k in _points(len(items)):
                state = save_after(case, shard_root, epoch, k)
                if case in REPLAY_CASES:
                    assert "replay" in state or "nodes" not in state, case
                elif k not in (0, len(items)) or (case in WINDOWED and (epoch, k) != (0, 0)):
                    assert "nodes" in state, f"{case}: built-in stages must save node states, got {state}"
                jobs.append({"case": case, "state": state})
                expected.append((case, epoch, k, items[k:]))
    job_file, out_file = tmp_path / "jobs.json", tmp_path / "out.json"
    job_file.write_text(json.dumps({"root": str(shard_root), "jobs": jobs}))
    proc = subprocess.run(
        [sys.executable, str(HERE / "_stage_cases.py"), str(job_file), str(out_file)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=HERE,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out_file.read_text())
    failures = [
        f"{case} epoch {epoch} after {k}: expected {want[:4]}... ({len(want)}), got {got[:4]}... ({len(got)})"
        for (case, epoch, k, want), got in zip(expected, results, strict=True)
        if got != want
    ]
    assert not failures, "\n".join(failures)


def test_state_is_small_plain_data(shard_root: Path) -> None:
    """Without a shuffle buffer the state stays far below 4 KiB; with one it grows by its tokens."""
    state = save_after("webdataset", shard_root, 0, 10)
    assert json.loads(json.dumps(state)) == state
    plain = save_after("decode", shard_root, 1, 10)
    assert len(json.dumps(plain)) < 1024, plain
    buffered = save_after("shuffle", shard_root, 0, 5)
    shuffle_state = buffered["nodes"][-1]
    assert 0 < len(shuffle_state["buffer"]) <= 10  # at most bufsize tokens, each [shard, byte offset]
    assert all(len(token) == 2 for token in shuffle_state["buffer"])


def test_mismatched_state_is_refused(shard_root: Path) -> None:
    state = save_after("batched", shard_root, 0, 2)
    other = ss.DataPipeline(ss.SimpleShardList([str(next(shard_root.iterdir()))]), ss.ReadShards())
    with pytest.raises(StateError, match="stages"):
        other.load_state_dict(state)  # the fingerprint names what differs
    unchecked = {k: v for k, v in state.items() if k != "fingerprint"}
    with pytest.raises(StateError, match="no 'fingerprint'"):
        other.load_state_dict(unchecked)  # nothing to check it against: refused, not trusted
    other.restore_position(unchecked)  # a loader's position (checked by the loader)
    with pytest.raises(StateError, match="stages"):
        list(other)  # the shape check still refuses it
    with pytest.raises(StateError, match="epoch"):
        other.load_state_dict({"nodes": [], "fingerprint": state["fingerprint"]})
    seeded = ss.ShardStream(str(shard_root / "part0-00.tar"), seed=1)
    with pytest.raises(StateError, match="seed: saved 1, now 2"):
        ss.ShardStream(str(shard_root / "part0-00.tar"), seed=2).load_state_dict(seeded.state_dict())


def test_every_builtin_stage_class_is_covered() -> None:
    """A new built-in stage must join the cases above (the contract is enforced, not hoped for)."""
    covered = {
        "ReadShards", "ShardShuffle", "SimpleShardList", "Splitter", "ResampledShards",
        "PlannedSamples", "Shuffle", "detshuffle", "Decode", "Map", "MapDict", "MapTuple",
        "ToTuple", "Select", "Rename", "_RenameKeys", "_ExtractKeys", "_XDecode", "_Associate",
        "_Info", "_RandomSample", "_Slice", "_NonEmpty", "CheckEmpty", "Batched", "_Unbatched",
        "_Unlisted", "Cached", "_Resampled", "FunctionStage", "MapStage", "Expand",
        "ObjectSamples", "MixSource",
    }  # fmt: skip
    found = set()
    todo = [ss.Stage]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("shardstream."):
                found.add(sub.__name__)
                todo.append(sub)
    assert found - covered == set(), f"stages without a contract case: {sorted(found - covered)}"
