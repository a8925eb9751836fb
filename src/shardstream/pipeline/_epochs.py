"""The epoch and world side of DataPipeline: one owner of the epoch, one world per epoch."""

from __future__ import annotations

from typing import Any

from ..shards.world import World
from .base import RunContext, StateDict
from .iterable import in_worker

__all__ = ["EpochOwner"]


class EpochOwner:
    """Mixin of :class:`~shardstream.pipeline.DataPipeline`: epoch numbering and run contexts."""

    #: The pipeline's stages (a nested pipeline is one step of its parent).
    pipeline: list[Any]
    seed: int | None
    world: World | None
    epoch: int
    _next_epoch: int | None
    _epoch_from_user: bool
    _begun: int
    _main_world: World | None
    _worker_restore: dict[str, Any] | None
    _role: tuple[int, int] | None
    _restore: StateDict | None

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next ``iter()`` (later ones continue from it)."""
        self._next_epoch = epoch
        self._epoch_from_user = True

    def loader_epoch(self, last: int | None) -> int:
        """The epoch a loader runs next when the last one it ran was ``last`` (``None``: it has
        run none yet): one given to this pipeline with :meth:`set_epoch` since (taken: the
        loader's later epochs continue from it), else ``last + 1``, else :meth:`next_epoch`.

        Each loader counts its own epochs (it runs a private copy of this pipeline, or hands
        copies to its workers), so loaders over one pipeline, one after another or at once, do
        not move each other's epochs, nor this pipeline's own.
        """
        if self._next_epoch is not None and self._epoch_from_user:
            self._epoch_from_user = False
            return self._next_epoch
        return last + 1 if last is not None else self.next_epoch()

    def begin_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` of this very pipeline run ``epoch`` (a loader that iterates
        it in this process, as ``WebLoader(num_workers=0)`` does; see :meth:`loader_epoch`)."""
        self._epoch_from_user = False
        self._begun = epoch
        self._next_epoch = epoch

    def next_epoch(self) -> int:
        """The epoch the next ``iter()`` would run when nothing else sets it."""
        return max(self.epoch, self._begun) + 1

    def _advance_epoch(self) -> int:
        if self._next_epoch is not None:
            self.epoch, self._next_epoch = self._next_epoch, None
        else:
            self.epoch += 1
        self._epoch_from_user = False
        return self.epoch

    def context(self, epoch: int) -> RunContext:
        """The run context of ``epoch`` in the calling process: the world is resolved here, once.

        Explicit ``world=`` wins. A DataLoader worker started with *spawn* cannot see
        ``torch.distributed`` (it is not initialised there) and may have no launcher variables;
        it then uses the rank the main process recorded when it pickled this pipeline. Forked
        workers and the main process detect it themselves, so a stale record (a copy made before
        ``init_process_group``) never wins over a live answer.
        """
        if self.world is None:
            world = World.current()
            if world.world_size == 1 and self._main_world is not None and in_worker():
                world = World.current(override=self._main_world)
        else:
            world = World.current(override=self.world)
        if self._role is not None and self._role[0] == epoch:
            # A restored DataLoader worker continues the epoch of the worker it replaces.
            world = world.with_worker(self._role[1], world.num_workers)
        return RunContext(epoch, world, self.seed)

    def restore_workers(self, epoch: int, states: list[StateDict | None], roles: list[int]) -> None:
        """Make DataLoader worker ``k`` continue ``epoch`` from ``states[k]`` as worker ``roles[k]``.

        Called by a loader in the main process before its workers receive their copies (see
        :meth:`shardstream.WebLoader.load_state_dict`); a ``None`` state starts the epoch afresh.
        """
        self._worker_restore = {"epoch": epoch, "states": states, "roles": roles}

    def workers_started(self) -> None:
        """Called by a loader once its workers have their copies: the states handed to them by
        :meth:`restore_workers` are theirs now, and never apply to this process."""
        self._worker_restore = None

    def _take_worker_restore(self) -> None:
        """In a worker: pick this worker's saved state and role out of ``restore_workers``."""
        plan, self._worker_restore = self._worker_restore, None
        if plan is None or not in_worker():
            return
        worker = World.current().worker
        epoch, state = int(plan["epoch"]), plan["states"][worker]
        self._role = (epoch, int(plan["roles"][worker]))
        self._restore = dict(state) if state is not None else {"epoch": epoch, "start": True}

    # -- running --------------------------------------------------------------------------------
