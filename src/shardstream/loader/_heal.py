"""A loader that heals: a worker process that dies or stalls is replaced, and the epoch goes on
with exactly the batches of an uninterrupted run.

When a worker is lost (``_watchdog.py`` finds it: killed by a signal, a failing exit, or no batch
for ``worker_timeout`` seconds), the loader logs it, ends *every* worker of the epoch, and starts
them all again at the position after the last batch it yielded: the exact restore a saved state
gets (``_state.py``: ``live_plan``, the same per-worker positions and round-robin start as
``state_dict()`` and ``load_state_dict()``), so the training loop receives the same batches in
the same order, none lost and none twice, with shuffles, resampling, ``split="equal"``/``"exact"``
and mixtures. The lost worker starts after the last batch it delivered, the others after theirs.

Why all of them, and not only the lost one inside torch's iterator: the workers share one result
queue, and a worker killed while it writes to it can hold the queue's write lock forever (every
other worker's next result then waits on it) or leave half a message in its pipe. Fresh workers
get fresh queues; the restart is the restore path every checkpoint already takes (tested for
every kind of pipeline); and nothing new runs per batch while no worker fails. The cost is paid
only on a loss: every worker starts again (a fork, or shardstream's forkserver), and the batches
made ahead but not yet yielded are made again.

The budget (``worker_restarts=``, 3 per epoch by default; 0: the first loss raises) bounds the
restarts. Past it, or when the same worker is lost twice at the same position (a sample that
kills or stalls whatever makes it), a diagnostic run (``_diagnose.py``) finds the sample being
made, and :class:`~shardstream.errors.WorkerDiedError` or
:class:`~shardstream.errors.WorkerStuckError` names it (shard, byte offset, key) with every
restart of the epoch. A poison sample can cost two restarts rather than one: a batch the lost
worker had made but not yet written into the result pipe (still in its queue's feeder thread) is
made again by the replacement, which moves the position once before the sample takes a worker
there twice. A dataset that is not a shardstream pipeline cannot say where its workers
are: its first loss raises.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from ..errors import WorkerDiedError, WorkerLostError, WorkerStuckError
from ._diagnose import Finding, diagnose
from ._state import Live, live_plan
from ._watchdog import WorkerLost

__all__ = ["Healing", "Restarts"]

log = logging.getLogger(__name__)

#: Restarts kept in :meth:`Restarts.stats` (the oldest are dropped after that many).
KEPT = 50


class Restarts:
    """A loader's replaced workers: the budget per epoch, the counts by cause, the recent ones.

    Args:
        budget: restarts allowed per epoch (0: none, the first lost worker raises).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.total = 0
        self.causes: Counter[str] = Counter()
        self.recent: list[dict[str, Any]] = []
        self.epoch: list[dict[str, Any]] = []  # this epoch's, for the budget and the final error
        self.positions: set[tuple[int, str]] = set()  # (role, position) lost at in this epoch

    def begin_epoch(self) -> None:
        self.epoch = []
        self.positions = set()

    def add(self, event: dict[str, Any]) -> None:
        self.total += 1
        self.causes[event["cause"]] += 1
        self.epoch.append(event)
        self.recent = [*self.recent, event][-KEPT:]

    def stats(self) -> dict[str, Any]:
        """``count``: workers replaced since the loader was made; ``causes``: how many per cause
        (``"SIGKILL"``, ``"exit code 1"``, ``"stuck"``); ``budget``: restarts allowed per epoch;
        ``recent``: the last ones (``epoch``, ``worker``, ``pid``, ``cause``, ``batch``)."""
        return {
            "count": self.total,
            "causes": dict(self.causes),
            "budget": self.budget,
            "recent": [dict(e) for e in self.recent],
        }


class Healing:
    """One epoch's batches from a :class:`~shardstream.WebLoader`'s worker processes, the workers
    started again whenever one is lost (see the module docstring).

    Args:
        loader: the WebLoader (its ``_start_workers`` and ``_restart_at`` start the workers).
        live: the epoch's positions (``None``: the dataset keeps none, so nothing is replaced).
        restarts: the loader's accounting and budget.
    """

    def __init__(self, loader: Any, live: Live | None, restarts: Restarts) -> None:
        self.loader, self.live, self.restarts = loader, live, restarts
        self.it: Any = None

    def start(self) -> Healing:
        """Start the workers (replacing any lost while they start); returns this iterator."""
        try:
            self.it = self.loader._start_workers()
        except WorkerLost as lost:
            self.it = self._replace(lost)
        return self

    def __iter__(self) -> Healing:
        return self

    def __next__(self) -> Any:
        while True:
            try:
                return next(self.it)
            except WorkerLost as lost:
                self.it = self._replace(lost)

    # -- replacing ---------------------------------------------------------------------------------
    def _replace(self, lost: WorkerLost) -> Any:
        """Start every worker again after the last batch yielded; returns the new iterator."""
        while True:
            self._account(lost)
            try:
                return self.loader._start_workers()
            except WorkerLost as again:
                lost = again

    def _account(self, lost: WorkerLost) -> None:
        """Stop the lost iterator, log, check the budget (raise past it), restore the positions."""
        loader, live, restarts = self.loader, self.live, self.restarts
        loader._workers_gone(lost.source.stop_now())
        workers = max(loader.num_workers, 1)
        role = live.roles[lost.worker] if live is not None and lost.worker < len(live.roles) else lost.worker
        batch = (live.yielded if live is not None else 0) + (lost.ahead or 0)
        event: dict[str, Any] = {
            "epoch": live.epoch if live is not None else None,
            "worker": lost.worker,
            "pid": lost.pid,
            "cause": lost.cause,
            "batch": batch,
        }
        why = self._refusal(lost, role)
        if why is not None:
            finding = self._diagnose(lost, role) if live is not None and restarts.budget > 0 else None
            raise _final(lost, role, event, why, restarts.epoch, finding) from None
        assert live is not None
        restarts.positions.add(_at(live, role))
        restarts.add(event)
        states, roles = _restart_plan(live, workers)
        live.roles[:] = roles  # in place: the epoch's tracker reads this list
        log.warning(
            "%s; replacing it (restart %d of %d in epoch %d): every worker starts again at its own "
            "position after the %d batches delivered (batches made ahead are made again)%s",
            _what(lost, role, batch),
            len(restarts.epoch),
            restarts.budget,
            live.epoch,
            live.yielded,
            "\n" + lost.report if lost.stuck else "",
        )
        loader._restart_at(live.epoch, states, roles)

    def _refusal(self, lost: WorkerLost, role: int) -> str | None:
        """Why ``lost`` is not replaced, or ``None`` when it is."""
        live, restarts = self.live, self.restarts
        if restarts.budget == 0:
            return "worker_restarts=0: the loader does not replace lost workers"
        if live is None:
            return (
                f"its dataset ({type(self.loader.dataset).__name__}) is not a shardstream pipeline, so "
                "it cannot say where its workers were and a replacement could not continue exactly"
            )
        if _at(live, role) in restarts.positions:
            return (
                f"it is the second worker lost at the same position in epoch {live.epoch} (worker "
                f"{role}'s share, no batch of it delivered since): a sample there kills or stalls "
                "whatever makes it, so a replacement would be lost again"
            )
        if len(restarts.epoch) >= restarts.budget:
            return f"worker_restarts={restarts.budget} were used up in epoch {live.epoch}"
        return None

    def _diagnose(self, lost: WorkerLost, role: int) -> Finding | None:
        """Run ``role``'s share once more, traced, in a sacrificial process: which sample kills it."""
        live = self.live
        assert live is not None
        states, roles = _restart_plan(live, max(self.loader.num_workers, 1))
        try:
            return diagnose(self.loader, live.epoch, states, roles, roles.index(role))
        except Exception as exc:  # the diagnosis is a courtesy: the loss is the error
            log.warning("the diagnostic run of worker %d's share failed: %r", role, exc)
            return None


def _restart_plan(live: Live, workers: int) -> tuple[list[Any], list[int]]:
    """What every worker slot starts again at: its position, and the share (role) it runs, the
    round robin starting with the worker whose batch comes next (as ``WebLoader.__iter__``
    restores a saved state)."""
    plan = live_plan(live)
    first = int(plan["next_worker"])
    roles = [(first + k) % workers for k in range(workers)]
    return [plan["workers"][r] for r in roles], roles


def _at(live: Live, role: int) -> tuple[int, str]:
    """Where ``role`` is in the running epoch, as a key (its position after its last batch yielded)."""
    return role, json.dumps(live.seen[role], sort_keys=True, default=str)


def _who(lost: WorkerLost, role: int) -> str:
    """``DataLoader worker 1 (pid 42)``, with the share it ran when a restore moved it."""
    share = f", running worker {role}'s share" if role != lost.worker else ""
    return f"DataLoader worker {lost.worker} (pid {lost.pid}{share})"


def _what(lost: WorkerLost, role: int, batch: int) -> str:
    """``DataLoader worker 1 (pid 42) was killed by SIGKILL while it owed batch 17``."""
    owed = f" while it owed batch {batch}" if lost.ahead is not None else ""
    if lost.stuck:
        return f"{_who(lost, role)} sent no batch in time (stuck){owed}"
    if lost.exitcode is not None and lost.exitcode < 0:
        oom = lost.cause == "SIGKILL"
        hint = " (the kernel's OOM killer sends it when memory runs out: see dmesg)" if oom else ""
        return f"{_who(lost, role)} was killed by {lost.cause}{hint}{owed}"
    return f"{_who(lost, role)} exited with status {lost.exitcode}{owed}"


def _final(
    lost: WorkerLost,
    role: int,
    event: dict[str, Any],
    why: str,
    before: list[dict[str, Any]],
    finding: Finding | None,
) -> WorkerLostError:
    """The error for a worker that is not replaced: what happened, why, the restarts before it,
    the sample being made (when a diagnostic run found it) and what to do."""
    head = lost.report if lost.stuck else _what(lost, role, int(event["batch"])) + "."
    lines = [head, f"It was not replaced: {why}."]
    if before:
        done = "; ".join(
            f"worker {e['worker']} (pid {e['pid']}) {e['cause']} at batch {e['batch']}" for e in before
        )
        lines.append(f"Workers replaced before in this epoch: {done}.")
    if finding is not None:
        lines.append(finding.describe(role))
    sample = finding.sample if finding is not None else None
    lines.append(_advice(lost, sample is not None))
    message = "\n".join(lines)
    common: dict[str, Any] = {"worker": lost.worker, "pid": lost.pid, "restarts": before, "sample": sample}
    if lost.stuck:
        return WorkerStuckError(message, stack=lost.stack, **common)
    signal = lost.cause if lost.exitcode is not None and lost.exitcode < 0 else None
    return WorkerDiedError(message, signal=signal, exitcode=lost.exitcode, **common)


def _advice(lost: WorkerLost, found: bool) -> str:
    if found:
        first = (
            "What to do: skip that sample (a .select() before the stage that was making it, on its "
            "key or size; or make that stage raise instead of dying, and handler=warn_and_continue "
            "skips it) or fix it in the shard"
        )
    elif lost.stuck:
        first = (
            "What to do: if the stack is in your code or a slow store, fix it or raise the bound "
            "(worker_timeout= or timeout= on the loader, or SHARDSTREAM_WORKER_TIMEOUT)"
        )
    elif lost.cause == "SIGKILL":
        first = (
            "What to do: SIGKILL is most often the kernel's OOM killer (dmesg says): lower the memory "
            "the workers use (batch_size, prefetch_factor, num_workers, a leak in a transform)"
        )
    else:
        first = "What to do: the worker's own output (stderr) says why it ended"
    return first + "; raise worker_restarts= on the loader if losses are rare and unrelated."
