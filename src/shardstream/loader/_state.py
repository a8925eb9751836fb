"""What a loader needs to save and restore its position: per-worker states carried with batches.

Each batch leaves its worker together with that worker's pipeline state taken right after the
batch's last sample was pulled (the collate function runs in the worker at exactly that point:
no extra round trip). The main process keeps, per worker, the state of the last batch it has
*yielded* to the training loop; batches still in flight are not counted as seen. ``ss.Loader``
with ``num_workers=0`` keeps the same state with one worker: its producer thread stamps each batch.

The saved state (plain JSON data)::

    {"version": 2, "fingerprint": {...}, "rank": 0, "world_size": 1, "num_workers": 2,
     "epoch": 3, "next_worker": 1, "workers": [<pipeline state> | None, ...]}

On restore, torch's round robin starts again at worker slot 0, so slot ``k`` continues the
worker ``(next_worker + k) % num_workers`` (its shards and random streams): the batches then
arrive in the same order as in the uninterrupted run.

With another ``num_workers``, or another world size with the same global batch, the restore is
elastic (:func:`restore_plan`, ``readers/elastic.py``; a mixture's, ``readers/elastic_mix.py``):
what every old worker had not yielded is dealt to the new workers, so the rest of the epoch is
the same multiset of samples. With the same world size each rank re-splits its own rest over its
own new workers. Another world size needs every rank's state: under Lightning (which saves rank
0's checkpoint only) the state is gathered from all ranks when it is taken, as ``{"version": 2,
"ranks": [...]}``; the loader knows it runs under a Trainer from shardstream's Lightning callback
(``loader/lightning.py``).

Version 1 (before positions said where in the epoch they are) is migrated: a worker position
that names only its epoch was that epoch's start. Every field is checked before anything is
restored, so an incomplete or corrupted state is refused naming what is wrong.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import StateError, redact_url
from ..pipeline.mix import MixSource
from ..pipeline.pipeline import check_position
from ..pipeline.seams import LoaderDataset, worker_restore
from ..shards.world import World

log = logging.getLogger(__name__)

__all__ = [
    "Live",
    "StampingCollate",
    "Stamped",
    "check_fingerprint",
    "fingerprint",
    "gather_ranks",
    "live_plan",
    "loader_state",
    "rank_states",
    "restore_plan",
    "tracked",
]

VERSION = 2
#: Loader state versions this shardstream restores (older ones are migrated).
READABLE = (1, 2)


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
    """Wraps the loader's collate function: collate, then attach the worker's pipeline state.

    Installed only over a :class:`LoaderDataset` (the loader checks once, when it is built): the
    worker's dataset is a copy of the same class, so no batch pays for a Protocol check.
    """

    def __init__(self, collate: Callable[[Any], Any], main_dataset: LoaderDataset) -> None:
        self.collate = collate
        self.main_dataset = main_dataset

    def __call__(self, data: Any) -> Any:
        from torch.utils.data import get_worker_info

        out = self.collate(data)
        info = get_worker_info()
        dataset: Any = info.dataset if info is not None else self.main_dataset  # a LoaderDataset
        return Stamped(out, info.id if info is not None else 0, dataset.position())

    def __getstate__(self) -> dict[str, Any]:
        # Workers get their own dataset copy; do not pickle the main one a second time.
        return {"collate": self.collate, "main_dataset": None}


def fingerprint(dataset: Any, batch_size: int | None) -> dict[str, Any]:
    """What a state was taken from: the dataset's fingerprint plus the loader's batch size."""
    return {**dataset.fingerprint(), "loader_batch": batch_size}


_BATCH_FIELDS = ("split_batch", "loader_batch")


def rank_states(state: Any) -> list[dict[str, Any]]:
    """The per-rank states in ``state``: one rank's state, ``{"ranks": [...]}`` (every rank's,
    as saved under Lightning) or a list of per-rank states."""
    ranks = state.get("ranks") if isinstance(state, dict) and "ranks" in state else state
    if isinstance(ranks, dict):
        ranks = [ranks]
    if not isinstance(ranks, list) or not ranks:
        raise StateError(
            f"not a WebLoader state: {redact_url(state, limit=200)}; pass what WebLoader.state_dict() "
            "returned"
        )
    return [_checked(one) for one in ranks]


def _checked(state: Any) -> dict[str, Any]:
    """``state`` checked field by field, as a current-version copy (the caller's dict is untouched)."""
    if not isinstance(state, dict) or "version" not in state:
        raise StateError(
            f"not a WebLoader state (no 'version'): {redact_url(state, limit=200)}; pass what "
            "WebLoader.state_dict() (or ss.Loader.state_dict()) returned"
        )
    if state["version"] not in READABLE:
        raise StateError(
            f"the loader state has version {state['version']!r}, and this shardstream restores versions "
            f"{list(READABLE)}: restore it with the shardstream that saved it, or start the run afresh"
        )
    missing = [
        k for k in ("fingerprint", "epoch", "workers", "rank", "world_size", "num_workers") if k not in state
    ]
    if missing:
        raise StateError(f"the loader state is incomplete or corrupted: missing {missing}")
    workers = state["workers"]
    if not isinstance(workers, list) or len(workers) != max(int(state["num_workers"]), 1):
        raise StateError(f"the state's worker list is corrupted: {redact_url(workers, limit=200)}")
    workers = list(workers)
    for k, position in enumerate(workers):
        if position is None:
            continue
        legacy = state["version"] == 1 and isinstance(position, dict)
        if legacy and set(position) <= {"epoch", "pass", "taken"}:
            workers[k] = position = {**position, "start": True}  # version 1: an epoch's start
        try:
            check_position(position)
        except StateError as exn:
            raise StateError(f"worker {k} of rank {state['rank']}: {exn}") from None
    return {**state, "version": VERSION, "workers": workers}


def check_fingerprint(saved: dict[str, Any], expected: dict[str, Any], saved_world: int, world: int) -> None:
    """Raise :class:`StateError` naming every field where ``saved`` does not fit; with another world
    size the batch sizes may change as long as the global batch (batch x world size) is kept (in
    nested fingerprints too: a mixture's sources)."""
    differ = _differences(saved, expected, saved_world, world, "")
    if differ:
        raise StateError(
            "the state was taken from a different dataset or loader (" + "; ".join(differ) + "); "
            "restore it into a loader built with the same shards, seed, split and batch size (with "
            "another world size, keep the global batch: batch size x world size)"
        )


def _differences(
    saved: dict[str, Any], expected: dict[str, Any], saved_world: int, world: int, at: str
) -> list[str]:
    differ = []
    for k, v in expected.items():
        old = saved.get(k)
        if isinstance(old, dict) and isinstance(v, dict) and saved_world != world:
            differ.extend(_differences(old, v, saved_world, world, f"{at}{k}."))
        elif k in _BATCH_FIELDS and saved_world != world and old is not None and v is not None:
            if old * saved_world != v * world:
                differ.append(
                    f"{at}{k}: saved {old} x {saved_world} ranks = global batch {old * saved_world}, "
                    f"now {v} x {world} ranks = {v * world}"
                )
        elif old != v:
            differ.append(f"{at}{k}: saved {old!r}, now {v!r}")
    return differ


def restore_plan(
    state: Any,
    dataset: Any,
    expected: dict[str, Any],
    *,
    rank: int,
    world_size: int,
    num_workers: int,
    log_resume: bool = True,
) -> dict[str, Any]:
    """What a loader restores: ``{"epoch", "workers", "next_worker"}``, exact when the state was
    saved with this rank, world size and ``num_workers``, else re-split elastically (the rest of
    the epoch is exactly the samples the old run had not yielded, in a new order), which is
    logged at INFO unless ``log_resume`` is False (a check that the state can be restored).

    Raises:
        StateError: another dataset, seed, split or global batch; a rank's state loaded on another
            rank; another world size without every rank's state; corrupted data.
    """
    ranks = rank_states(state)
    saved_world = int(ranks[0]["world_size"])
    epochs = {int(r["epoch"]) for r in ranks}
    if len(epochs) > 1 or any(int(r["world_size"]) != saved_world for r in ranks):
        raise StateError(
            f"the rank states are from different epochs or worlds (epochs {sorted(epochs)}); save every "
            "rank's state at the same step"
        )
    epoch, workers = epochs.pop(), max(num_workers, 1)
    by_rank = {int(r["rank"]): r for r in ranks}
    if saved_world != world_size and sorted(by_rank) != list(range(saved_world)):
        raise StateError(
            f"the state was saved by {saved_world} ranks and is loaded by {world_size}: re-splitting "
            f"the rest of the epoch needs every rank's state, but it holds ranks {sorted(by_rank)}. "
            "Pass the list of all ranks' states to load_state_dict() (Lightning's checkpoints hold "
            "them all)"
        )
    for one in ranks:
        check_fingerprint(one["fingerprint"], expected, saved_world, world_size)
    if saved_world == world_size:
        own = by_rank.get(rank)
        if own is None:
            saved = next(iter(by_rank)) if len(by_rank) == 1 else sorted(by_rank)
            raise StateError(
                f"the state was saved on rank {saved} of {saved_world} and is loaded on rank {rank} of "
                f"{world_size}; load each rank's own state (save it per rank with the checkpoint), or "
                "every rank's states together"
            )
        same_batch = all(own["fingerprint"].get(k) == expected.get(k) for k in _BATCH_FIELDS)
        if int(own["num_workers"]) == num_workers and same_batch:
            restored = [worker_restore(s, epoch) for s in own["workers"]]
            return {"epoch": epoch, "workers": restored, "next_worker": own.get("next_worker", 0)}
        # the rank's own rest, over its own new workers (every rank does the same with its own)
        sources, new_world, new_rank = [own], 1, 0
    else:
        sources, new_world, new_rank = [by_rank[r] for r in range(saved_world)], world_size, rank
    old = [
        (World(rank=int(r["rank"]), world_size=saved_world, worker=w, num_workers=len(r["workers"])), s)
        for r in sources
        for w, s in enumerate(r["workers"])
    ]
    if all(s is None for _, s in old):  # saved before any batch of the epoch: start it afresh
        return {"epoch": epoch, "workers": [None] * workers, "next_worker": 0}
    saved = ranks[0]["fingerprint"]
    states: list[Any]
    if dataset.pipeline and isinstance(dataset.pipeline[0], MixSource):
        from ..readers import resplit_mixture

        loader_batch = expected.get("loader_batch")
        states = resplit_mixture(
            dataset, epoch, old, new_world, new_rank, workers, saved=saved, loader_batch=loader_batch
        )
    else:
        from ..readers import resplit

        states = resplit(dataset, epoch, old, new_world, new_rank, workers, saved.get("split_batch"))
    if not log_resume:
        return {"epoch": epoch, "workers": states, "next_worker": 0}
    log.info(
        "elastic resume of epoch %d: %d ranks x %d workers -> %d ranks x %d workers (rank %d)",
        epoch,
        saved_world,
        len(sources[0]["workers"]),
        world_size,
        workers,
        rank,
    )
    return {"epoch": epoch, "workers": states, "next_worker": 0}


def gather_ranks(state: dict[str, Any]) -> dict[str, Any]:
    """Every rank's state, gathered (a collective: every rank must call it at the same step)."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, state)
    return {"version": VERSION, "ranks": gathered}


def loader_state(
    dataset: Any,
    batch_size: int | None,
    num_workers: int,
    live: Live | None,
    *,
    trainer_attached: bool,
    held: int = 0,
) -> dict[str, Any]:
    """The state of a loader (``WebLoader``, or ``ss.Loader`` with ``num_workers=0``) over
    ``dataset`` whose current or last epoch is ``live`` (``None`` before the first ``iter()``).

    It is the position after the last batch yielded or, under a Trainer (``trainer_attached``), after
    the last batch a training step started on: Lightning's fetcher holds the batches between, and
    they are rolled back. Under a Trainer with several ranks it is every rank's state, gathered
    (a collective: Lightning takes it on every rank at the same step, but writes rank 0's checkpoint
    only). Otherwise, ``held`` batches yielded but held back from the training loop (a device
    copy made one batch ahead) are rolled back.
    """
    world = dataset.context(0).world
    workers = max(num_workers, 1)
    state: dict[str, Any] = {
        "version": VERSION,
        "fingerprint": fingerprint(dataset, batch_size),
        "rank": world.rank,
        "world_size": world.world_size,
        "num_workers": num_workers,
    }
    if live is None or live.finished:
        epoch = (live.epoch + 1) if live is not None else dataset.next_epoch()
        return {**state, "epoch": epoch, "next_worker": 0, "workers": [None] * workers}
    lag = live.yielded - live.trained if trainer_attached else held
    seen, last = live.rolled_back(max(lag, 0))
    state = {**state, "epoch": live.epoch, "next_worker": live.next_role(last), "workers": seen}
    if trainer_attached and world.world_size > 1 and _distributed():
        return gather_ranks(state)
    return state


def _distributed() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


class Live:
    """The running epoch: per worker (by role), the state after its last batch yielded."""

    __slots__ = ("epoch", "roles", "seen", "last", "finished", "undo", "yielded", "trained")

    def __init__(self, epoch: int, roles: list[int], seen: list[Any]) -> None:
        self.epoch, self.roles, self.seen = epoch, roles, seen
        self.last: int | None = None
        self.finished = False
        self.yielded = 0  # batches handed to the training loop in this epoch
        self.trained = 0  # of those, batches Lightning has started a training step on
        # (role, its state before, last before) for the most recent batches: to roll back.
        self.undo: deque[tuple[int, Any, int | None]] = deque(maxlen=8)

    def record(self, role: int, state: Any) -> None:
        self.undo.append((role, self.seen[role], self.last))
        self.seen[role] = state
        self.last = role

    def next_role(self, last: int | None) -> int:
        """The worker (role) whose batch comes after one of ``last``'s; with ``None`` (no batch of
        this epoch yielded yet), the first of this epoch's round robin, which a restore may have
        started at another worker than 0."""
        return (last + 1) % len(self.roles) if last is not None else self.roles[0]

    def rolled_back(self, batches: int) -> tuple[list[Any], int | None]:
        """The worker states and last worker as they were ``batches`` batches ago."""
        seen, last = list(self.seen), self.last
        for role, before, last_before in list(self.undo)[::-1][: min(batches, len(self.undo))]:
            seen[role], last = before, last_before
        return seen, last


def live_plan(live: Live) -> dict[str, Any]:
    """The exact restore of the running epoch after its last batch yielded, as
    :func:`restore_plan` makes it from that state (same world and ``num_workers``): what a loader
    starts its workers at again when it replaces a lost one (``_heal.py``)."""
    epoch = live.epoch
    return {
        "epoch": epoch,
        "workers": [worker_restore(s, epoch) for s in live.seen],
        "next_worker": live.next_role(live.last),
    }


def tracked(it: Any, live: Live) -> Any:
    """Yield the loader's batches, recording the state each one carries."""
    roles = live.roles
    for item in it:
        if type(item) is Stamped:
            live.record(roles[item.worker], item.state)
            item = item.value
        live.yielded += 1
        yield item
    live.finished = True
