"""WebLoader: a torch DataLoader with fluent methods, epochs that advance, and a real close()."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ..config import read_settings
from ..errors import StateError
from ..malloc import tune_allocator
from ..pipeline.fluent import FluidInterface, FluidWrapper
from ..pipeline.iterable import require_torch
from ..pipeline.seams import LoaderDataset
from ..shards.world import World
from ._arguments import check_worker_restarts
from ._length import loader_length
from ._orphans import follow
from ._start import StartChoice, choose, prepare
from ._state import Live, StampingCollate, fingerprint, loader_state, restore_plan, tracked
from ._telemetry import attach_telemetry, loader_stats
from .lightning import join_running_trainer

require_torch("shardstream.WebLoader (a torch DataLoader)")

from torch.utils.data import DataLoader  # noqa: E402 - after the install hint above

from ._heal import Healing, Restarts  # noqa: E402 - needs torch
from ._watchdog import WatchedIter, arm  # noqa: E402 - needs torch

__all__ = ["WebLoader"]

log = logging.getLogger(__name__)


@runtime_checkable
class _EpochSetting(Protocol):
    """A dataset that is not a shardstream pipeline but takes ``set_epoch`` (as samplers do)."""

    def set_epoch(self, epoch: int) -> None: ...


class _WorkerInit:
    """Picklable worker_init_fn: follow the loader's process, arm the stack dump, tune the
    allocator, call the user's function."""

    def __init__(self, user_fn: Callable[[int], None] | None) -> None:
        self.user_fn = user_fn
        self.stacks: str | None = None  # the loader's directory for stack dumps (see _watchdog)
        self.loader_pid: int | None = None  # the process that starts the workers (see _orphans)

    def __call__(self, worker_id: int) -> None:
        if self.loader_pid is not None:
            follow(self.loader_pid)
        arm(self.stacks)
        if read_settings().tune_malloc:  # SHARDSTREAM_TUNE_MALLOC=0 opts out
            tune_allocator()
        if self.user_fn is not None:
            self.user_fn(worker_id)


class WebLoader(DataLoader, FluidInterface):  # type: ignore[type-arg]
    """A :class:`torch.utils.data.DataLoader` for shardstream pipelines.

    Takes exactly DataLoader's arguments. In addition:

    * WebDataset's fluent methods: ``with_length``/``with_epoch``/``repeat`` change this loader,
      ``.unbatched().shuffle(1000).batched(64)`` return a new loader over this one's batches;
    * each ``iter()`` runs the loader's next epoch, counted by the loader (``set_epoch(n)`` on
      the loader, or on the dataset as for a DataLoader, sets it) and handed to the workers with
      their copies of the dataset, so shard and sample shuffles change every epoch even with
      non-persistent workers; the dataset's own epoch is left alone, so other loaders over it
      count theirs apart (without workers the loader iterates the dataset itself, in this
      process, as a DataLoader does);
    * ``close()`` (or leaving a ``with`` block) shuts the worker processes down at once;
    * ``state_dict()`` / ``load_state_dict()`` (torchdata's ``StatefulDataLoader`` names and
      semantics, so Lightning checkpoints it): the position after the last batch yielded to the
      training loop, restored exactly with the same ``num_workers`` and world, and elastically
      (the same remaining samples, a new order) with another ``num_workers`` or world size with
      the same global batch (see ``loader/_state.py``);
    * worker processes get a tuned allocator (fewer page faults when decoding images; opt out
      with ``SHARDSTREAM_TUNE_MALLOC=0``); the main process is left alone;
    * workers are forked when no other thread runs in this process, and started from
      shardstream's preloaded forkserver otherwise (gloo/NCCL, the user's threads: a forked worker
      could inherit a lock one of them holds); ``multiprocessing_context=`` or
      ``SHARDSTREAM_WORKER_START`` decide instead (see ``loader/_start.py``);
    * ``worker_timeout=`` (seconds; default ``SHARDSTREAM_WORKER_TIMEOUT`` or 600; 0: wait forever;
      torch's ``timeout=`` wins when set): a worker that sends no batch for that long is stuck;
      the log (or the error) names it, its PID and its Python stack;
    * ``worker_restarts=`` (default 3 per epoch; 0: none): a worker that dies (a signal such as
      the OOM killer's SIGKILL, a failing exit) or is stuck is replaced, and the epoch goes on
      with exactly the batches of an uninterrupted run: every worker starts again after the last
      batch yielded (``loader/_heal.py``). Past the budget, or when the same position loses its
      worker twice, :class:`~shardstream.errors.WorkerDiedError` or
      :class:`~shardstream.errors.WorkerStuckError` names the sample being made (shard, byte
      offset, key). Only a shardstream pipeline says where its workers are: over another
      dataset the first loss raises;
    * ``telemetry=True`` (or ``SHARDSTREAM_TELEMETRY=1``): time per stage and worker, and how
      long the loop waits for data, in :meth:`stats` and a periodic log line;
    * under a Lightning Trainer, its first ``iter()`` adds shardstream's callback to that
      Trainer (``loader/lightning.py``).

    For shardstream's own engine (threads in this process, or workers that hand batches through
    reused shared memory), use :class:`~shardstream.Loader`.
    """

    def __init__(
        self,
        dataset: Any,
        *args: Any,
        worker_timeout: float | None = None,
        worker_restarts: int = 3,
        **kw: Any,
    ) -> None:
        if "engine" in kw:
            raise TypeError(
                f"WebLoader(engine={kw['engine']!r}): the engine argument was removed; WebLoader is "
                "torch's DataLoader. For shardstream's engine write ss.Loader(dataset, batch_size=..., "
                "num_threads=N) (N threads in this process) or ss.Loader(dataset, batch_size=..., "
                "num_workers=N) (N worker processes, batches in reused shared memory)"
            )
        self._restarts = Restarts(check_worker_restarts(worker_restarts))
        #: Called with the PIDs of workers this loader ended at once (a restart): ``ss.Loader``
        #: removes the shared-memory buffers they left.
        self._after_stop: Callable[[list[int]], None] | None = None
        self._worker_init = kw["worker_init_fn"] = _WorkerInit(kw.get("worker_init_fn"))
        telemetry = kw.pop("telemetry", None)
        self._given_context = kw.get("multiprocessing_context")
        self._auto_context: Any = None  # the context this loader chose itself, last time
        self._worker_timeout = worker_timeout
        self._stacks: str | None = None
        self._start_logged: set[str] = set()
        super().__init__(dataset, *args, **kw)
        if self.num_workers > 0 and self._given_context is None and choose().method == "forkserver":
            prepare()  # threads run already (a process group): the server imports while we go on
        self._stateful = isinstance(dataset, LoaderDataset)  # checked once: the dataset never changes
        #: Set by shardstream's Lightning callback while a Trainer fits with this loader
        #: (``loader/lightning.py``): Lightning prefetches batches and saves every rank's state.
        self.trainer_attached = False
        #: Batches of the running epoch that a wrapper of this loader's iterator has taken but not
        #: handed to the training loop yet (``ss.Loader``'s device copy, one batch ahead): left
        #: out of :meth:`state_dict`.
        self.held = 0
        if self._stateful:
            self.collate_fn = StampingCollate(self.collate_fn, dataset)
        self._telemetry = attach_telemetry(self, telemetry)  # wraps collate_fn when on
        if self._telemetry is not None:
            self._telemetry.restarts = self._restarts
        self._pending: dict[str, Any] | None = None  # a loaded state, applied at the next iter()
        self._live: Live | None = None
        self._running: weakref.ref[Any] | None = None  # the epoch's batch iterator, while it is held
        self._iterators: weakref.WeakSet[Any] = weakref.WeakSet()
        self._epoch = -1  # only for datasets that are not shardstream pipelines (see __iter__)
        self._epoch_set: int | None = None  # set_epoch(n): the next iter()'s epoch
        self._last_epoch: int | None = None  # the epoch of the last iter() (this loader's count)
        # The allocator is tuned in our worker processes only (worker_init_fn), never in the
        # user's main process: mallopt settings are process-global and inherited by later forks.

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next ``iter()``."""
        if self._stateful:
            self._epoch_set = epoch
        else:
            self._epoch = epoch - 1

    def _take_epoch(self) -> int:
        """This loader's next epoch: one given to :meth:`set_epoch`, else the dataset's rule
        (``LoaderDataset.loader_epoch``: one set on it, or the one after this loader's last)."""
        if self._epoch_set is not None:
            epoch, self._epoch_set = self._epoch_set, None
            return epoch
        dataset: Any = self.dataset
        return int(dataset.loader_epoch(self._last_epoch))

    def __iter__(self) -> Any:
        join_running_trainer()
        dataset: Any = self.dataset
        workers = max(self.num_workers, 1)
        roles = list(range(workers))
        seen: list[Any] = [None] * workers
        epoch = -1
        if self._pending is not None:
            state, self._pending = self._pending["plan"], None
            epoch, seen = int(state["epoch"]), list(state["workers"])
            if self.num_workers == 0:
                dataset.restore_position(seen[0] if seen[0] is not None else {"epoch": epoch, "start": True})
            else:
                start = int(state.get("next_worker", 0))
                roles = [(start + k) % workers for k in range(workers)]
                dataset.restore_workers(epoch, [seen[r] for r in roles], roles)
                # Workers get the restore with their dataset copy: persistent ones started before
                # (an earlier epoch, or an iter() dropped unstarted) would continue without it.
                self._stop_persistent_workers()
            self._epoch_set = None
        elif self._stateful:
            epoch = self._take_epoch()
            if self.num_workers == 0:
                dataset.begin_epoch(epoch)  # this process iterates the dataset itself
            else:
                # The epoch travels with the workers' copies (started afresh); this process's
                # dataset keeps its own count. Persistent workers count on by themselves: after
                # a jump (set_epoch) they start again, so that new ones take this epoch.
                dataset.restore_workers(epoch, seen, roles)
                if self._last_epoch is None or epoch != self._last_epoch + 1:
                    self._stop_persistent_workers()
        elif isinstance(dataset, _EpochSetting):
            # A foreign dataset with set_epoch (as for DistributedSampler): drive it by count.
            self._epoch += 1
            dataset.set_epoch(self._epoch)
        if self._stateful:
            self._last_epoch = epoch
        live = Live(epoch, roles, seen) if self._stateful else None
        if self.num_workers > 0:  # workers receive their copies of the dataset here
            self._restarts.begin_epoch()
            it: Any = Healing(self, live, self._restarts).start()
        else:
            it = super().__iter__()
            self._iterators.add(it)
        batches: Any = it if self._telemetry is None else self._telemetry.watch(it)
        if live is None:
            return batches
        self._live = live
        running = tracked(batches, live)
        self._running = weakref.ref(running)
        return running

    def _start_workers(self) -> Any:
        """torch's iterator over the worker processes, the dataset's hand-over to them done."""
        it = super().__iter__()
        if self._stateful:
            dataset: Any = self.dataset
            dataset.workers_started()
        self._iterators.add(it)
        return it

    def _restart_at(self, epoch: int, states: list[Any], roles: list[int]) -> None:
        """Make the next :meth:`_start_workers` start new workers at ``states`` (``_heal.py``)."""
        dataset: Any = self.dataset
        dataset.restore_workers(epoch, states, roles)
        self._iterator = None  # persistent workers too: the lost ones were all ended

    def _workers_gone(self, pids: list[int]) -> None:
        if self._after_stop is not None:
            self._after_stop(pids)

    def _wait_bound(self) -> float:
        """Seconds to wait for a batch: torch's ``timeout=``, else ``worker_timeout=``, else the
        environment's (0: forever)."""
        if self.timeout > 0:
            return float(self.timeout)
        bound = self._worker_timeout
        return float(bound if bound is not None else read_settings().worker_timeout)

    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return super()._get_iterator()
        current = self.multiprocessing_context
        if current is not None and current is not self._auto_context:
            self._given_context = current  # set by the user after the loader was built
        choice = choose(self._given_context)
        if not choice.given:
            self.multiprocessing_context = self._auto_context = choice.context
        self._log_start(choice)
        if self._stacks is None:
            self._stacks = tempfile.mkdtemp(prefix="shardstream-stacks-")
            weakref.finalize(self, shutil.rmtree, self._stacks, True)
        self._worker_init.stacks = self._stacks
        self._worker_init.loader_pid = os.getpid()
        # No check_worker_number_rationality() here: DataLoader.__init__ ran it already, and a
        # second call printed torch's "will create N worker processes" warning twice.
        return WatchedIter(self, bound=self._wait_bound(), stacks=self._stacks, choice=choice)

    def _log_start(self, choice: StartChoice) -> None:
        if choice.method in self._start_logged:
            return
        self._start_logged.add(choice.method)
        level = logging.INFO if choice.method == "forkserver" and not choice.given else logging.DEBUG
        log.log(
            level,
            "starting %d DataLoader worker(s) by %s: %s",
            self.num_workers,
            "shardstream's forkserver" if choice.method == "forkserver" else choice.method,
            choice.reason,
        )

    def batch_trained(self) -> None:
        """Called by shardstream's Lightning callback when a training step starts on one of this
        loader's batches (batches yielded but not trained on are not in :meth:`state_dict`)."""
        if self._live is not None:
            self._live.trained += 1

    def stats(self) -> dict[str, Any]:
        """Telemetry of this loader (plain JSON data): every worker's time per stage (added up,
        and per worker), how long the loop waited for data, samples and bytes per second, cache
        hits, retries, and ``verdict``: loader- or training-bound, and the slowest stage. With
        telemetry off or on, ``restarts``: the workers replaced (``count``, ``causes`` such as
        ``{"SIGKILL": 1, "stuck": 1}``, the per-epoch ``budget``, and the ``recent`` ones), and
        ``worker_pids``: the worker processes running now (to watch their memory, say)."""
        report = dict(loader_stats(self._telemetry))
        report["restarts"] = self._restarts.stats()
        report["worker_pids"] = [
            w.pid
            for it in list(self._iterators)
            if isinstance(it, WatchedIter) and not it._shutdown
            for w in it._workers
            if w.is_alive()
        ]
        return report

    # -- state ----------------------------------------------------------------------------------
    def _expected(self) -> tuple[dict[str, Any], World]:
        dataset: Any = self.dataset
        return fingerprint(dataset, self.batch_size), dataset.context(0).world

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch this loader yielded (plain JSON data, small).

        Batches that workers prefetched but the loop has not received are not counted. Taking
        it costs no round trip to the workers: each batch arrives with its worker's state.
        """
        if not self._stateful:
            raise StateError(
                f"{type(self.dataset).__name__} cannot save its position: state_dict() needs a "
                "shardstream pipeline (ShardStream, WebDataset, DataPipeline) as the loader's dataset"
            )
        if self._pending is not None:
            return dict(self._pending["state"])
        live, attached = self._live, self.trainer_attached
        return loader_state(
            self.dataset, self.batch_size, self.num_workers, live, trainer_attached=attached, held=self.held
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next ``iter()``; call it before iterating.

        Raises:
            StateError: the state is from another dataset, seed, split, batch size, rank or
                ``num_workers``, or is corrupted (the message names the fields), or this
                loader is iterating.
        """
        # An epoch whose iterator nobody holds any more is not running: Lightning calls iter()
        # once on a loader that is not a DataLoader (``ss.Loader`` in process mode holds this
        # one) to check that it iterates, and drops the result before it loads the state.
        running = self._running() if self._running is not None else None
        if running is not None and self._live is not None and not self._live.finished:
            raise StateError(
                "load_state_dict() was called while this loader is iterating; call it before iter()"
            )
        if not self._stateful:
            raise StateError(
                f"{type(self.dataset).__name__} cannot restore a position (not a shardstream pipeline)"
            )
        fp, world = self._expected()
        plan = restore_plan(
            state,
            self.dataset,
            fp,
            rank=world.rank,
            world_size=world.world_size,
            num_workers=self.num_workers,
        )
        self._pending = {"state": state, "plan": plan}

    def close(self) -> None:
        """Shut down worker processes of running iterators now (not at garbage collection)."""
        for it in list(self._iterators):
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
        self._iterators = weakref.WeakSet()
        self._stop_persistent_workers()

    def _stop_persistent_workers(self) -> None:
        persistent = getattr(self, "_iterator", None)
        if persistent is not None and hasattr(persistent, "_shutdown_workers"):
            persistent._shutdown_workers()
            self._iterator = None

    def __enter__(self) -> WebLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- WebDataset's WebLoader methods ------------------------------------------------------------
    # WebDataset's WebLoader is a pipeline whose first stage is a DataLoader: with_length,
    # with_epoch and repeat change it in place and return it, and each stage method
    # (.unbatched(), .shuffle(n), .batched(n), ...) returns a new WebLoader with the stage added.
    # Ours is the DataLoader itself, so a loader with stages or an epoch rule runs a pipeline over
    # the batches of the loader it came from: it becomes a _FluidLoader, as WebDataset's
    # with_length changes the instance's class.

    def compose(self, *stages: Any) -> Any:
        """A new WebLoader that applies ``stages`` to this one's batches (this one is unchanged)."""
        result = _FluidLoader.__new__(_FluidLoader)
        result.__dict__.update(self.__dict__)
        result._source = self.__dict__.get("_source", self)
        result._fluid = self._pipeline_over_batches().compose(*stages)
        return result

    def with_length(self, n: int, silent: bool = False) -> WebLoader:
        """Declare ``len()`` as ``n`` (for progress bars and frameworks); the batches are unchanged.

        Logs (INFO) that the length is declared, not enforced, unless ``silent``.
        """
        if not silent:
            log.info(
                "with_length(%d) declares len() only; use with_epoch(n) to make epochs n batches long", n
            )
        self.size: int | None = int(n)
        return self

    def with_epoch(self, nsamples: int = -1, nbatches: int = -1) -> WebLoader:
        """Make every ``iter()`` yield exactly ``max(nsamples, nbatches)`` items, restarting this
        loader's batches when they run out; the next ``iter()`` continues where the last stopped
        (WebDataset restarts the loader instead). Changes this loader and returns it."""
        self._become_fluid().with_epoch(nsamples, nbatches)
        return self

    def repeat(self, nepochs: int = -1, nbatches: int = -1) -> WebLoader:
        """Make every ``iter()`` run through this loader ``nepochs`` times (forever if negative),
        stopping after ``nbatches`` items when that is positive. Changes this loader and returns it."""
        self._become_fluid().repeat(nepochs, nbatches)
        return self

    def __len__(self) -> int:
        size = self.__dict__.get("size")
        if size is not None:
            return int(size)
        fluid = self.__dict__.get("_fluid")
        if fluid is None:  # each worker batches its own share: counted per worker (_length.py)
            n = loader_length(self.dataset, self.num_workers, self.batch_size, self.drop_last)
            return n if n is not None else int(super().__len__())
        if fluid.nsamples > 0 and fluid.repetitions == sys.maxsize:
            return int(fluid.nsamples)  # with_epoch(n): every iter() yields n items
        raise TypeError(
            "this WebLoader's length is unknown (its stages change the number of batches): make every "
            "epoch exactly n batches long with .with_epoch(n) (.with_length(n) only declares a length "
            "and caps nothing)"
        )

    def _pipeline_over_batches(self) -> Any:
        fluid = self.__dict__.get("_fluid")
        return fluid if fluid is not None else FluidWrapper(_Batches(self))

    def _become_fluid(self) -> Any:
        if "_fluid" not in self.__dict__:
            self._fluid = self._pipeline_over_batches()
            self._source = self
            self.__class__ = _FluidLoader
        return self._fluid


class _Batches:
    """The batches of a WebLoader as its DataLoader makes them (a WebLoader's pipeline source)."""

    def __init__(self, loader: WebLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return WebLoader.__iter__(self.loader)


class _FluidLoader(WebLoader):
    """A WebLoader with stages or an epoch rule: iterating runs its pipeline (``_fluid``) over the
    batches of the loader it was made from (``_source``), which also owns the worker processes."""

    _fluid: Any
    _source: WebLoader

    def __iter__(self) -> Any:
        fluid = self.__dict__.get("_fluid")
        if fluid is None:  # rebuilt from the constructor's arguments (frameworks do): plain
            return WebLoader.__iter__(self)
        return iter(fluid)

    def close(self) -> None:
        fluid = self.__dict__.get("_fluid")
        if fluid is not None:
            fluid.close()
        WebLoader.close(self.__dict__.get("_source", self))

    # The position is that of the batches read from the source loader; items held by stages in
    # this process (a shuffle buffer over batches) are not part of it.
    def state_dict(self) -> dict[str, Any]:
        return WebLoader.state_dict(self.__dict__.get("_source", self))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        WebLoader.load_state_dict(self.__dict__.get("_source", self), state)
