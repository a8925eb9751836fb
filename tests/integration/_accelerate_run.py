"""A training loop under Hugging Face Accelerate over an ``ss.Loader``, stopped mid-epoch after
``save_state``, or resumed in a fresh process with ``load_state``.

Usage: python _accelerate_run.py ROOT MODES OUT threads|processes

MODES: ``full``, ``stop`` or ``resume``, or several joined by commas (run one after another in
this process, each with everything built again); each writes ``OUT.<mode>.json``.

The one line that makes ``save_state``/``load_state`` carry the loader's position is
``accelerator.register_for_checkpointing(loader)``; ``prepare`` returns the loader unchanged.
"""

from __future__ import annotations

import glob
import json
import sys

import torch
from accelerate import Accelerator

import shardstream as ss

ROOT, MODES, OUT, KIND = sys.argv[1:5]
STOP_AFTER = 4


def main(MODE: str) -> None:
    urls = sorted(glob.glob(f"{ROOT}/*.tar"))
    dataset = ss.ShardStream(urls, seed=2).shuffle(10).decode().to_tuple("__key__", "cls")
    loader = ss.Loader(dataset, batch_size=4, num_threads=2, num_workers=2 if KIND == "processes" else 0)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    if prepared is not loader:
        raise SystemExit(f"accelerator.prepare() replaced the loader: {type(prepared).__name__}")
    accelerator.register_for_checkpointing(loader)
    if MODE == "resume":
        accelerator.load_state(f"{ROOT}/state")
    seen = []
    with loader:
        for step, (keys, cls) in enumerate(loader):
            seen.append(list(keys))
            loss = model(cls.float().view(-1, 1)).sum()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if MODE == "stop" and step + 1 == STOP_AFTER:
                accelerator.save_state(f"{ROOT}/state")
                break
    with open(f"{OUT}.{MODE}.json", "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    for mode in MODES.split(","):
        main(mode)
