"""One rank of the torchrun test (``test_heal_torchrun.py``): train on a ``split="equal"`` epoch
with checkpoints, die on the first attempt, continue from the last checkpoint on the second.

``python _heal_torchrun.py DIR`` under ``torchrun --nproc-per-node=2 --max-restarts=1``: DIR holds
``urls.json``; each rank logs the keys of every batch it trains on to
``DIR/keys-rank{r}-attempt{a}.jsonl`` (with the step), saves its loader's state every
:data:`EVERY` steps to ``DIR/ckpt/{step}-rank{r}.json`` (``DIR/ckpt/latest`` names the last step
every rank saved), and rank 1 kills itself (SIGKILL) after step :data:`KILL_AT` of the first
attempt (``TORCHELASTIC_RESTART_COUNT`` is 0), mid-epoch. torchrun then restarts both ranks.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _heal_cases import keys, make  # noqa: E402

EVERY = 3  # steps between checkpoints
KILL_AT = 7  # rank 1's last step on the first attempt


def _store(attempt: int, rank: int) -> dist.Store:
    """The rendezvous store, with this attempt's own keys: torch 2.13's ``env://`` init reads the
    agent's store, which keeps the first attempt's gloo addresses, and the restarted ranks would
    connect to the dead ones."""
    on_agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        2,
        is_master=not on_agent and rank == 0,
        timeout=timedelta(seconds=60),
    )
    return dist.PrefixStore(f"attempt-{attempt}", store)


def main(out: Path) -> None:
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", store=_store(attempt, rank), rank=rank, world_size=2)
    urls = json.loads((out / "urls.json").read_text())
    ckpt = out / "ckpt"
    ckpt.mkdir(exist_ok=True)
    loader = make("equal", urls, "ss.Loader")
    step = 0
    latest = ckpt / "latest"
    if latest.exists():  # a restart: the last checkpoint every rank saved
        step = int(latest.read_text())
        loader.load_state_dict(json.loads((ckpt / f"{step}-rank{rank}.json").read_text()))
    with open(out / f"keys-rank{rank}-attempt{attempt}.jsonl", "a") as log:
        for batch in loader:
            step += 1
            log.write(json.dumps({"step": step, "keys": keys(batch)}) + "\n")
            log.flush()
            dist.all_reduce(torch.ones(1))  # the training step's collective
            if step % EVERY == 0:
                (ckpt / f"{step}-rank{rank}.json").write_text(json.dumps(loader.state_dict()))
                dist.barrier()
                if rank == 0:
                    (ckpt / "latest.tmp").write_text(str(step))
                    os.replace(ckpt / "latest.tmp", latest)
                dist.barrier()
            if attempt == 0 and rank == 1 and step == KILL_AT:
                os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer (or a node) takes a rank
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
