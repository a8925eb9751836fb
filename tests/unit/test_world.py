"""World detection: explicit override, torch.distributed, torchrun and SLURM variables, single process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shardstream.config import LauncherEnv, launcher_env
from shardstream.shards.world import World, derive_seed

# Runs in a fresh interpreter: for each environment in argv[1], replace the launcher variables
# with it and print what World.current() detects.
PROBE = """
import json, os, sys
from shardstream.shards.world import World
out = []
for env in json.loads(sys.argv[1]):
    for name in %r:
        os.environ.pop(name, None)
    os.environ.update(env)
    w = World.current()
    out.append([w.rank, w.world_size, w.local_rank, w.local_world_size, w.node, w.num_nodes])
print(json.dumps(out))
"""

LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
)


def detect_in_subprocess(envs: list[dict[str, str]]) -> list[list[int]]:
    """World.current() in a fresh interpreter, once per launcher environment in ``envs``."""
    base = {
        k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("SHARDSTREAM_")
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE % (LAUNCHER_VARS,), json.dumps(envs)],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: list[list[int]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.timeout(120)
def test_detection_in_a_subprocess_torchrun_slurm_and_none() -> None:
    torchrun = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    slurm = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2"}
    got = detect_in_subprocess([torchrun, slurm, {**slurm, **torchrun}, {}])
    assert got[0] == [5, 8, 1, 4, 1, 2]
    assert got[1] == [3, 4, 1, 2, 1, 2]
    assert got[2][:2] == [5, 8]  # torchrun's variables win over SLURM's (torchrun inside sbatch)
    assert got[3] == [0, 1, 0, 1, 0, 1]


def test_from_launcher_is_pure_arithmetic() -> None:
    assert World.from_launcher(LauncherEnv()) == World()
    w = World.from_launcher(launcher_env({"RANK": "3", "WORLD_SIZE": "4"}))
    assert (w.rank, w.world_size, w.local_rank, w.local_world_size, w.node) == (3, 4, 3, 4, 0)
    w = World.from_launcher(
        launcher_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_NTASKS_PER_NODE": "3"})
    )
    assert (w.local_rank, w.node, w.num_nodes) == (2, 1, 2)
    # SLURM's compressed "2(x3)" form: 2 tasks on each of 3 nodes.
    w = World.from_launcher(
        launcher_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "6", "SLURM_NTASKS_PER_NODE": "2(x3)"})
    )
    assert (w.local_world_size, w.node, w.num_nodes) == (2, 1, 3)
    # A non-uniform layout has no single answer: one node is assumed rather than guessing.
    w = World.from_launcher(
        launcher_env({"SLURM_PROCID": "1", "SLURM_NTASKS": "6", "SLURM_NTASKS_PER_NODE": "4(x1),2"})
    )
    assert w.local_world_size == 6


def test_environment_is_read_through_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    w = World.current()
    assert (w.rank, w.world_size, w.worker, w.num_workers) == (1, 2, 0, 1)


def test_explicit_override_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    w = World.current(override=World(rank=2, world_size=3, worker=1, num_workers=4))
    # Rank fields from the override; worker fields are always detected (main process here).
    assert (w.rank, w.world_size, w.worker, w.num_workers) == (2, 3, 0, 1)


def test_bad_values_name_the_numbers() -> None:
    with pytest.raises(ValueError, match=r"rank=2 must be in \[0, world_size=2\)"):
        World(rank=2, world_size=2)
    with pytest.raises(ValueError, match="worker=3"):
        World(worker=3, num_workers=2)
    with pytest.raises(ValueError, match="RANK='x' is not an integer"):
        launcher_env({"RANK": "x", "WORLD_SIZE": "2"})


def test_global_worker_indexing() -> None:
    w = World(rank=1, world_size=3, worker=1, num_workers=2)
    assert (w.global_worker, w.total_workers) == (3, 6)


def test_derive_seed_is_stable_and_sensitive() -> None:
    assert derive_seed(1, "a", 2) == derive_seed(1, "a", 2) != derive_seed(1, "a", 3)


@pytest.mark.parametrize(("value", "expected"), [("4", 4), ("2(x3)", 2), ("4(x2),2", None), ("", None)])
def test_slurm_tasks_per_node_formats(value: str, expected: int | None) -> None:
    from shardstream.config import launcher_env

    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": value}
    assert launcher_env(env).local_world_size == expected
