"""What WebLoader needs to save and restore its position: per-worker states carried with batches.

Each batch leaves its worker together with that worker's pipeline state taken right after the
batch's last sample was pulled (the collate function runs in the worker at exactly that point:
no extra round trip). The main process keeps, per worker, the state of the last batch it has
*yielded* to the training loop; batches still in flight are not counted as seen.

The saved state (plain JSON data)::

    {"version": 1, "fingerprint": {...}, "rank": 0, "world_size": 1, "num_workers": 2,
     "epoch": 3, "next_worker": 1, "workers": [<pipeline state> | None, ...]}

On restore, torch's round robin starts again at worker slot 0, so slot ``k`` continues the
worker ``(next_worker + k) % num_workers`` (its shards and random streams): the batches then
arrive in the same order as in the uninterrupted run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..errors import StateError

__all__ = ["StampingCollate", "Stamped", "check_state", "fingerprint", "trainer_prefetch_lag"]

VERSION = 1


class Stamped:
    """A batch with the state of the worker that produced it (unwrapped in the main process)."""

    __slots__ = ("value", "worker", "state")

    def __init__(self, value: Any, worker: int, state: dict[str, Any] | None) -> None:
        self.value = value
        self.worker = worker
        self.state = state

    def pin_memory(self) -> Stamped:
        # DataLoader(pin_memory=True) calls this on objects it does not know.
        from torch.utils.data._utils.pin_memory import pin_memory

        return Stamped(pin_memory(self.value), self.worker, self.state)  # type: ignore[no-untyped-call]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Stamped, (self.value, self.worker, self.state))


class StampingCollate:
    """Wraps the loader's collate function: collate, then attach the worker's pipeline state."""

    def __init__(self, collate: Callable[[Any], Any], main_dataset: Any) -> None:
        self.collate = collate
        self.main_dataset = main_dataset

    def __call__(self, data: Any) -> Any:
        from torch.utils.data import get_worker_info

        out = self.collate(data)
        info = get_worker_info()
        dataset = info.dataset if info is not None else self.main_dataset
        position = getattr(dataset, "position", None)
        if position is None:
            return out
        return Stamped(out, info.id if info is not None else 0, position())

    def __getstate__(self) -> dict[str, Any]:
        # Workers get their own dataset copy; do not pickle the main one a second time.
        return {"collate": self.collate, "main_dataset": None}


def fingerprint(dataset: Any, batch_size: int | None) -> dict[str, Any]:
    """What a state was taken from: the dataset's fingerprint plus the loader's batch size."""
    return {**dataset.fingerprint(), "loader_batch": batch_size}


def check_state(
    state: Any, expected: dict[str, Any], *, rank: int, world_size: int, num_workers: int
) -> None:
    """Raise :class:`StateError` naming every field where ``state`` does not fit this loader."""
    if not isinstance(state, dict) or state.get("version") != VERSION:
        raise StateError(
            f"not a WebLoader state of version {VERSION}: {str(state)[:200]}; pass what "
            "WebLoader.state_dict() returned"
        )
    missing = [
        k for k in ("fingerprint", "epoch", "workers", "rank", "world_size", "num_workers") if k not in state
    ]
    if missing:
        raise StateError(f"the WebLoader state is incomplete or corrupted: missing {missing}")
    saved = state["fingerprint"]
    differ = [f"{k}: saved {saved.get(k)!r}, now {v!r}" for k, v in expected.items() if saved.get(k) != v]
    if differ:
        raise StateError(
            "the state was taken from a different dataset or loader (" + "; ".join(differ) + "); "
            "restore it into a loader built with the same shards, seed, split and batch size"
        )
    if (state["rank"], state["world_size"]) != (rank, world_size):
        raise StateError(
            f"the state was saved on rank {state['rank']} of {state['world_size']} and is loaded on rank "
            f"{rank} of {world_size}; load each rank's own state (save it per rank with the checkpoint)"
        )
    if state["num_workers"] != num_workers:
        raise StateError(
            f"the state was saved with num_workers={state['num_workers']} and is loaded with "
            f"num_workers={num_workers}; an exact resume needs the same number of workers (resuming "
            "with another number of workers is not supported yet)"
        )
    workers = state["workers"]
    if not isinstance(workers, list) or len(workers) != max(num_workers, 1):
        raise StateError(f"the state's worker list is corrupted: {str(workers)[:200]}")


def trainer_prefetch_lag(max_depth: int = 40) -> int:
    """Batches a calling Lightning fit loop has fetched from the loader but not yet trained on.

    Lightning saves a dataloader's ``state_dict()`` in its checkpoint while its data fetcher
    holds a prefetched batch (when the loader has no length), so a state taken "now" would skip
    that batch on resume. When ``state_dict()`` is called from Lightning's fit loop, this finds
    the loop on the call stack and returns how many batches its fetcher holds, so that the state
    can be rolled back by that many batches. Returns 0 anywhere else.
    """
    frame: FrameType | None = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        module = type(owner).__module__
        if type(owner).__name__ == "_FitLoop" and module.startswith(("lightning.", "pytorch_lightning.")):
            batches = getattr(getattr(owner, "_data_fetcher", None), "batches", None)
            return len(batches) if isinstance(batches, list) else 0
        frame = frame.f_back
    return 0
