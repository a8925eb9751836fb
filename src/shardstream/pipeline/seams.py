"""The seams other packages use to drive a pipeline, declared as Protocols.

* :class:`Stateful`: what checkpointing code duck-types on (torchdata, Lightning);
* :class:`LoaderDataset`: what a loader (``WebLoader``) drives in a dataset that saves its
  position; every shardstream pipeline provides it;
* :class:`ReadsSource`: a node that reads through a Source (telemetry times its I/O).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..shards.world import World
    from ..sources import Source
    from ..telemetry.io import IoCounters
    from ..telemetry.recorder import Recorder
    from .base import RunContext, StateDict
    from .parallel import Threads

__all__ = ["CountsIO", "LoaderDataset", "ReadsSource", "Stateful", "finished_epoch", "worker_restore"]


@runtime_checkable
class Stateful(Protocol):
    """What checkpointing code duck-types on (torchdata's ``Stateful``, Lightning's
    ``_Stateful``): pipelines, datasets and ``WebLoader`` all provide both methods."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


@runtime_checkable
class LoaderDataset(Stateful, Protocol):
    """What a loader (``WebLoader``) drives in a dataset that saves its position: every
    shardstream pipeline (``DataPipeline`` and the datasets built on it) provides it.

    Runs: a loader never changes the dataset it is given beyond taking an epoch set with
    ``set_epoch`` (:meth:`loader_epoch`): each loader counts its own epochs, runs a private copy
    (:meth:`run_copy`, iterated with :meth:`run`, which takes the loader's thread pool and fill
    flag for that run only), or hands each worker process its copy with the epoch and its saved
    state (:meth:`restore_workers`, then :meth:`workers_started` once they have their copies).
    Positions: each batch carries the :meth:`position` of the copy that made it. Telemetry: a
    loader's copies may count into the loader's recorder (``run_copy(telemetry=)``), and the
    loader's report gets the stages' own counters from :meth:`add_stage_counters`.

    Lengths: :meth:`slot_length` gives the items one ``(rank, worker)`` slot yields per epoch,
    so a loader counts its batches worker by worker (each worker batches its own items, with a
    partial batch of its own) instead of dividing the rank's total.
    """

    epoch: int

    def set_epoch(self, epoch: int) -> None: ...

    def loader_epoch(self, last: int | None) -> int: ...

    def begin_epoch(self, epoch: int) -> None: ...

    def next_epoch(self) -> int: ...

    def run(self, threads: Threads | None = None, *, fills: bool = False) -> Iterator[Any]: ...

    def run_copy(self, *, telemetry: Recorder | Literal[False] | None = None) -> LoaderDataset: ...

    def context(self, epoch: int) -> RunContext: ...

    def fingerprint(self) -> dict[str, Any]: ...

    def position(self) -> StateDict: ...

    def restore_position(self, position: StateDict) -> None: ...

    def restore_workers(self, epoch: int, states: list[StateDict | None], roles: list[int]) -> None: ...

    def workers_started(self) -> None: ...

    def with_telemetry(self, enabled: bool = True, *, log_interval: float | None = None) -> Any: ...

    def telemetry_on(self) -> bool: ...

    def add_stage_counters(self, report: dict[str, Any] | None) -> dict[str, Any]: ...

    def slot_length(self, world: World) -> int | None:
        """Items the slot ``(world.rank, world.worker)`` of ``world`` yields in one epoch (its
        ``num_workers`` workers per rank); ``None`` when the dataset cannot know it."""
        ...


@runtime_checkable
class ReadsSource(Protocol):
    """A node that reads its bytes through a :class:`~shardstream.sources.Source` (the readers).

    Telemetry calls :meth:`read_through` before the node starts, to time its I/O.
    """

    def read_through(self, wrap: Callable[[Source], Source]) -> Source:
        """Read through ``wrap(source)`` from now on (in a copy of the stage: the user's stage is
        untouched); returns the source it read through before."""
        ...


@runtime_checkable
class CountsIO(Protocol):
    """A reading node that fetches its bytes itself (the object fetch engine), not through a
    source's streams: telemetry hands it the recorder's I/O counters before the node starts, and
    the node adds its time waiting for bytes, the bytes and the requests (opens)."""

    def count_io(self, counters: IoCounters) -> None: ...


def finished_epoch(state: StateDict | None, epoch: int) -> bool:
    """Whether a worker's saved ``state`` says it had yielded everything of ``epoch``: a position
    taken after a pass ends names the next epoch and nothing else."""
    return state is not None and set(state) <= {"epoch", "start"} and int(state["epoch"]) > epoch


def worker_restore(state: StateDict | None, epoch: int) -> StateDict | None:
    """A worker's saved position as a loader hands it back for ``epoch``. A worker that had yielded
    its whole share (with DataLoader batching, the position taken after its last, short batch
    names the next epoch) stays finished: ``{"epoch": epoch, "finished": True}``, a pass that
    yields nothing, instead of a state that would start the next epoch in its place."""
    return {"epoch": epoch, "finished": True} if finished_epoch(state, epoch) else state
