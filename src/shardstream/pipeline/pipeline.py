"""DataPipeline: a source followed by stages; the owner of the epoch and of the pipeline's state."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import logging
import sys
import weakref
from collections.abc import Iterator
from typing import Any, Literal

from ..errors import StateError, redact_url
from ..shards.world import World
from ..telemetry.recorder import Recorder, enable, fresh, resolve
from ._epochs import EpochOwner
from .base import Node, RunContext, StateDict
from .build import ChainNode, Pass, build_nodes
from .instrument import consumer, pipeline_stats
from .iterable import IterableDatasetBase, in_worker
from .labels import skip_counters
from .parallel import Threads
from .trace import Trace

__all__ = ["STATE_VERSION", "DataPipeline", "RunOptions", "check_position", "close_iterator", "run_in_worker"]

#: Version of the pipeline state format (``state_dict()["version"]``).
STATE_VERSION = 1
#: The keys of a position, exactly one of which says where in its epoch it is.
_POSITIONS = ("start", "nodes", "replay", "finished")


def check_position(position: Any) -> None:
    """Raise :class:`StateError` unless ``position`` is a whole pipeline position: an integer
    epoch and exactly one of ``start``, ``nodes`` (a list of node states), ``replay`` (items to
    skip) or ``finished``."""
    if not isinstance(position, dict):
        raise StateError(f"not a pipeline position: {redact_url(position, limit=200)}")
    epoch = position.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise StateError(f"the state has no valid 'epoch' (got {epoch!r}): {redact_url(position, limit=200)}")
    where = [k for k in _POSITIONS if k in position]
    if len(where) != 1:
        raise StateError(
            f"the state is incomplete or corrupted: it needs exactly one of {list(_POSITIONS)} to say where "
            f"in epoch {epoch} it stopped, and has {where or 'none'}: {redact_url(position, limit=200)}. "
            "Pass the whole dict that state_dict() returned."
        )
    nodes, replay = position.get("nodes"), position.get("replay")
    if "nodes" in position and not (
        isinstance(nodes, list) and all(n is None or isinstance(n, dict) for n in nodes)
    ):
        raise StateError(f"the state's 'nodes' must be a list of node states: {redact_url(nodes, limit=200)}")
    if "replay" in position and not (isinstance(replay, int) and replay >= 0):
        raise StateError(f"the state's 'replay' must be a count of items: {replay!r}")


log = logging.getLogger(__name__)


def close_iterator(it: object) -> None:
    """Close an iterator now if it can be closed (generators and nodes can; islice cannot)."""
    close = getattr(it, "close", None)
    if close is not None:
        close()


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How one run of a pipeline goes (:meth:`DataPipeline.run`): the pool that runs its
    per-sample stages, whether a loader's default collation takes its items, and a trace of
    every node's items (a loader's diagnostic run, ``trace.py``)."""

    threads: Threads | None = None
    fills: bool = False
    trace: Trace | None = None


_PLAIN = RunOptions()
#: In a worker process of ``ss.Loader``: how the worker runs its copy of the loader's pipeline
#: (:func:`run_in_worker`). Empty in every other process.
_worker_runs: weakref.WeakKeyDictionary[DataPipeline, RunOptions] = weakref.WeakKeyDictionary()


def run_in_worker(
    dataset: DataPipeline, threads: Threads | None, *, fills: bool, trace: Trace | None = None
) -> None:
    """In a DataLoader worker process that shardstream set up (``ss.Loader(num_workers=M)``, or a
    loader's diagnostic run with ``trace``): make the worker's iterations of ``dataset``, its own
    copy of the loader's pipeline, runs of ``dataset.run(threads, fills=fills)``. torch's worker
    calls ``iter(dataset)`` itself, so the options wait in this process's table, keyed by that
    copy (weakly): no other pipeline, and nothing in the loader's own process, sees them."""
    _worker_runs[dataset] = RunOptions(threads, fills, trace)


class _PutBack(Node):
    """The last node of a checked restore, with the item already read from it put back in front
    (state, positions and closing are the node's own: the item was its last one yielded)."""

    def __init__(self, node: Node, item: Any) -> None:
        super().__init__(node.upstream)
        self.node = node
        self.stateful = node.stateful
        self.tell = node.tell
        self._it = itertools.chain((item,), node)

    def state_dict(self) -> StateDict:
        return self.node.state_dict()

    def item_at(self, token: Any) -> Any:
        return self.node.item_at(token)

    def items_at(self, tokens: list[Any]) -> list[Any]:
        return self.node.items_at(tokens)

    def close(self) -> None:
        close_iterator(self.node)


def _nothing() -> Iterator[Any]:
    """An empty pass (a generator: it can be closed and weakly referenced like the others)."""
    yield from ()


class DataPipeline(EpochOwner, IterableDatasetBase):  # type: ignore[type-arg]
    """A source followed by stages: ``DataPipeline(SimpleShardList(urls), tarfile_to_samples(), ...)``.

    The first argument is a source (an iterable such as a shard list, a dataset or a loader, or a
    callable returning an iterator); each following argument is a :class:`Stage` or a
    WebDataset-style callable ``f(src) -> iterator``. Lists are flattened, ``None`` is ignored,
    and a DataPipeline works as a stage inside another one.

    Epochs: every ``iter(pipeline)`` is one epoch, numbered by this pipeline (the one owner of
    the epoch): it advances by one per ``iter()``, or is set with :meth:`set_epoch`. Each epoch
    builds a fresh node per stage with one :class:`RunContext` (epoch, world, seed).

    State: :meth:`state_dict` saves where the running epoch is (every node's state), and
    :meth:`load_state_dict` makes the next ``iter()`` continue from there. A pipeline holding a
    stage that cannot save its state (a plain function) saves the number of items it yielded
    instead, and restoring replays the epoch up to that point (exact, but not instant).

    Telemetry (``telemetry=True``, :meth:`with_telemetry` or ``SHARDSTREAM_TELEMETRY=1``; off
    by default): time per stage, samples and bytes per second, and whether the consumer waits
    for data, in :meth:`stats`.
    """

    def __init__(
        self, *args: Any, seed: int | None = None, world: World | None = None, telemetry: bool | None = None
    ) -> None:
        super().__init__()
        self._telemetry: Any = telemetry  # None: from the environment when first iterated
        self.pipeline: list[Any] = []
        self.seed = seed
        self.world = world
        self.epoch = -1
        self._next_epoch: int | None = None
        self._epoch_from_user = False
        self._begun = -1  # the last epoch begun by a loader (see begin_epoch)
        self.size: int | None = None
        self.repetitions = 1
        self.nsamples = -1
        self._restore: StateDict | None = None
        self._live: Pass | None = None
        self._continuing: Iterator[Any] | None = None
        self._taken = 0
        self._pass_index = 0
        self._main_world: World | None = None
        self._worker_restore: dict[str, Any] | None = None
        self._role: tuple[int, int] | None = None  # (epoch, worker index it stands in for)
        self._running: weakref.WeakSet[Iterator[Any]] = weakref.WeakSet()
        self._if_changed = "raise"  # see if_shards_changed()
        for arg in args:
            if arg is None:
                continue
            if isinstance(arg, list):
                self.pipeline.extend(arg)
            else:
                self.pipeline.append(arg)

    # -- building -------------------------------------------------------------------------------
    def append(self, f: Any) -> None:
        """Append a stage in place."""
        self.pipeline.append(f)

    def compose(self, *args: Any) -> DataPipeline:
        """A copy of this pipeline with ``args`` appended (the original is unchanged)."""
        result = copy.copy(self)
        result.pipeline = list(self.pipeline)
        result._running = weakref.WeakSet()
        result._continuing = None
        result._live = None
        result._restore = None
        result._telemetry = fresh(self._telemetry)
        for arg in args:
            if arg is not None:
                result.append(arg)
        return result

    def stage(self, i: int) -> Any:
        return self.pipeline[i]

    def run_copy(self, *, telemetry: Recorder | Literal[False] | None = None) -> DataPipeline:
        """A private copy of this pipeline for one loader to run, as a DataLoader worker runs a
        pickled copy: the same stages (shared: their skip counters add up), settings and epoch
        counters; no running pass, position, pending restore or workers' hand-over of its own.

        Args:
            telemetry: where the copy's telemetry counts: ``None`` (default) apart, in a
                recorder of its own when this pipeline has one; a recorder: into it (a loader's,
                which keeps what its copies measured after they are gone); ``False``: off.
        """
        result = self.compose()
        result._worker_restore = None
        result._role = None
        if telemetry is not None:
            result._telemetry = telemetry
        return result

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        """Build this pipeline's nodes as one node (a pipeline nested inside another)."""
        states = (state or {}).get("nodes")
        return ChainNode(self._build_nodes(upstream, ctx, states))

    def _build_nodes(
        self, upstream: Node | None, ctx: RunContext, states: list[StateDict] | None
    ) -> list[Node]:
        return build_nodes(self.pipeline, upstream, ctx, states)

    # -- running (epoch numbering and run contexts: _epochs.EpochOwner) ---------------------------
    def _pass(
        self, epoch: int, states: list[StateDict] | None, replay: int, how: RunOptions
    ) -> Iterator[Any]:
        """One pass over the source with ``epoch``'s context; closes every node when it ends."""
        live = self._live = Pass(epoch)
        ctx = self.context(epoch)
        recorder = self._telemetry = resolve(self._telemetry)
        if recorder:
            ctx = dataclasses.replace(ctx, telemetry=recorder.begin_pass())
        if how.threads is not None:
            ctx = dataclasses.replace(ctx, threads=how.threads)
        if how.fills:
            ctx = dataclasses.replace(ctx, fills=True)
        if how.trace is not None:
            ctx = dataclasses.replace(ctx, trace=how.trace)
        nodes = live.nodes = self._build_nodes(None, ctx, states)
        if states is not None and self._if_changed == "restart":
            nodes = live.nodes = self._checked_restore(nodes, ctx, epoch)
        if recorder:
            consumer(recorder, nodes[-1])
        live.stateful = all(n.stateful for n in nodes)
        last = nodes[-1]
        try:
            if replay:
                for _ in itertools.islice(last, replay):
                    pass
                live.count = replay
            if live.stateful:
                yield from last
            else:
                for item in last:
                    live.count += 1
                    yield item
            live.done = True
        finally:
            for node in reversed(nodes):
                close_iterator(node)

    def _checked_restore(self, nodes: list[Node], ctx: RunContext, epoch: int) -> list[Node]:
        """Restored nodes whose first item is already read (put back in front), or, when the
        saved position no longer fits the shards (a StateError), fresh nodes for the whole epoch."""
        try:
            head = list(itertools.islice(nodes[-1], 1))
        except StateError as exc:
            log.warning("epoch %d restarts from its beginning (if_shards_changed='restart'): %s", epoch, exc)
            for node in reversed(nodes):
                close_iterator(node)
            return self._build_nodes(None, ctx, None)
        if head:
            nodes[-1] = _PutBack(nodes[-1], head[0])
        return nodes

    def if_shards_changed(self, policy: str) -> DataPipeline:
        """What a restore does when the shard it resumes in was rewritten since the state was
        saved (or its saved positions no longer fit the shards): ``"raise"`` (the default) a
        :class:`~shardstream.errors.StateError` naming the shard; ``"restart"``: log a warning
        and read the saved epoch from its beginning. Returns this pipeline."""
        if policy not in ("raise", "restart"):
            raise ValueError(f"if_shards_changed({policy!r}): use 'raise' or 'restart'")
        self._if_changed = policy
        return self

    def _start(self) -> tuple[int, list[StateDict] | None, int]:
        """The epoch, node states and replay count the next pass starts from."""
        state, self._restore = self._restore, None
        if state is None:
            return self._advance_epoch(), None, 0
        self.epoch = int(state["epoch"])
        self._next_epoch = None
        return self.epoch, state.get("nodes"), int(state.get("replay", 0))

    def iterator1(self, how: RunOptions | None = None) -> Iterator[Any]:
        """One pass over the source, from a restored state if one was loaded."""
        if self._restore is not None and self._restore.get("finished"):
            # restored in place of a worker that had finished the epoch (seams.worker_restore)
            self.epoch, self._restore, self._next_epoch = int(self._restore["epoch"]), None, None
            self._live = Pass(self.epoch)
            self._live.done = True
            return _nothing()
        epoch, states, replay = self._start()
        self._live = Pass(epoch)  # started: a state taken now names this epoch's beginning
        return self._pass(epoch, states, replay, how or _PLAIN)

    def __iter__(self) -> Iterator[Any]:
        how = _worker_runs.get(self) if _worker_runs else None
        return self._run(how) if how is not None else self.run()

    def run(self, threads: Threads | None = None, *, fills: bool = False) -> Iterator[Any]:
        """One ``iter()`` of this pipeline, run the way a loader asks (``ss.Loader``'s thread mode
        and its worker processes call this; ``iter(pipeline)`` is ``run()``).

        Args:
            threads: run the per-sample stages (decode, map, to_tuple) on this pool, in order:
                the items are the same. Default ``None``: in the iterating thread.
            fills: the items go to the loader's default collation, so a decode stage followed
                only by stages that move values (to_tuple, rename, shuffle) may leave JPEGs to
                be decoded straight into the batch (``decoders/deferred.py``). Default ``False``:
                iterating the pipeline yourself never defers.

        Both belong to this run only: nothing is kept on the pipeline, so any number of loaders
        (and plain loops) can run it, one after another or at once. With ``with_epoch(n)``, the
        stream that continues across ``iter()`` calls keeps the options of the run that started
        it.
        """
        return self._run(RunOptions(threads, fills) if threads is not None or fills else _PLAIN)

    def _run(self, how: RunOptions) -> Iterator[Any]:
        inner: Iterator[Any]
        if self._worker_restore is not None:
            self._take_worker_restore()
        if self.nsamples > 0 and self.repetitions == sys.maxsize:
            # with_epoch(): epochs are windows of nsamples over a stream that continues across
            # epochs (restarting the source, with the next epoch's shard order, when it ends).
            restoring = self._restore is not None
            taken = int(self._restore.get("taken", 0)) if self._restore is not None else 0
            if self._continuing is None or restoring:
                self._continuing = self._repeat_passes(how, sys.maxsize)
            if not restoring:
                taken = 0
            window = self._window(self._continuing, self.nsamples - taken, taken)
            self._running.add(window)
            return window
        inner = self.iterator1(how) if self.repetitions == 1 else self._repeat_passes(how)
        if self.nsamples > 0:
            inner = self._take(inner, self.nsamples, close_stream=True)
        self._running.add(inner)
        return inner

    def _window(self, stream: Iterator[Any], n: int, taken: int) -> Iterator[Any]:
        self._taken = taken
        for item in itertools.islice(stream, n):
            self._taken += 1
            yield item
        self._taken = 0

    @staticmethod
    def _take(stream: Iterator[Any], n: int, *, close_stream: bool) -> Iterator[Any]:
        """The next ``n`` items of ``stream`` as a generator that closes the stream underneath."""
        try:
            yield from itertools.islice(stream, n)
        finally:
            if close_stream:
                close_iterator(stream)

    def _repeat_passes(self, how: RunOptions, passes: int | None = None) -> Iterator[Any]:
        """``passes`` passes over the source (default ``self.repetitions``); stops at an empty one."""
        total = self.repetitions if passes is None else passes
        restore = self._restore
        first = int(restore.get("pass", 0)) if restore is not None and passes is None else 0
        for j in range(first, total):
            self._pass_index = j
            resumed = self._restore is not None and ("nodes" in self._restore or "replay" in self._restore)
            count = 0
            for sample in self.iterator1(how):
                count += 1
                yield sample
            if count == 0 and not resumed:
                return  # an empty pass: do not spin forever

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> StateDict:
        """Where this pipeline is: the running epoch and every node's state (JSON-able).

        Taken between two items; the next ``iter()`` after :meth:`load_state_dict` continues
        with the item after the last one yielded. Between epochs, the state names the next
        epoch with no node states (it starts from the beginning). It carries a
        :meth:`fingerprint` of the pipeline, checked on load.
        """
        return {"version": STATE_VERSION, **self.position(), "fingerprint": self.fingerprint()}

    def fingerprint(self) -> dict[str, Any]:
        """What a state must be restored into: the stages (subclasses add shards, seed, split)."""
        names = [type(step).__name__ for step in self.pipeline]
        return {"stages": hashlib.blake2b(repr(names).encode(), digest_size=8).hexdigest()}

    def position(self) -> StateDict:
        """:meth:`state_dict` without the fingerprint (what a loader records per batch)."""
        live = self._live
        if live is None or live.done:
            epoch = self._next_epoch if self._next_epoch is not None else self.epoch + 1
            state: StateDict = {"epoch": epoch, "start": True}
        elif live.nodes is None:
            state = {"epoch": live.epoch, "start": True}
        elif live.stateful:
            state = {"epoch": live.epoch, "nodes": [n.state_dict() for n in live.nodes]}
        else:
            state = {"epoch": live.epoch, "replay": live.count}
        if self.repetitions != 1:
            index = self._pass_index + (1 if live is not None and live.done else 0)
            state["pass"] = index % self.repetitions  # a finished repeat() starts again at pass 0
        if self.nsamples > 0 and self.repetitions == sys.maxsize:
            state["taken"] = self._taken
        return state

    def load_state_dict(self, state: StateDict) -> None:
        """Continue from ``state`` (from :meth:`state_dict`) at the next ``iter()``.

        The whole structure is checked first: a state without its fingerprint, without the
        position inside the epoch, or from a newer shardstream is refused with a
        :class:`~shardstream.errors.StateError` naming what is wrong, never taken as "start
        the epoch again". States of shardstream 0.x before state versions (no ``version``) are
        migrated.
        """
        if not isinstance(state, dict):
            raise StateError(
                f"not a pipeline state (a {type(state).__name__}): {redact_url(state, limit=200)}"
            )
        version = state.get("version")
        if version is not None and version != STATE_VERSION:
            raise StateError(
                f"the state has version {version!r}, and this shardstream reads pipeline states of version "
                f"{STATE_VERSION}: restore it with the shardstream that saved it, or start afresh"
            )
        saved = state.get("fingerprint")
        if not isinstance(saved, dict):
            raise StateError(
                "the state has no 'fingerprint', so it cannot be checked against this pipeline (shards, "
                f"seed, split, stages): {redact_url(state, limit=200)}. Pass the whole dict that "
                "state_dict() returned."
            )
        position = {k: v for k, v in state.items() if k not in ("fingerprint", "version")}
        if version is None and not any(k in position for k in _POSITIONS):
            position["start"] = True  # before versions, a state naming only its epoch was its start
        check_position(position)
        now = self.fingerprint()
        differ = [f"{k}: saved {saved.get(k)!r}, now {v!r}" for k, v in now.items() if saved.get(k) != v]
        if differ:
            raise StateError(
                "the state was taken from a different pipeline (" + "; ".join(differ) + "); "
                "restore it into a pipeline built with the same shards, seed, split and stages"
            )
        self._restore = position
        self._continuing = None

    def restore_position(self, position: StateDict) -> None:
        """Continue from a :meth:`position` (a loader's per-worker record, checked by the loader
        against the fingerprint) at the next ``iter()``."""
        check_position(position)
        self._restore = dict(position)
        self._continuing = None

    # -- lengths and epochs -------------------------------------------------------------------
    def with_length(self, n: int, silent: bool = False) -> DataPipeline:
        """Declare ``len()`` (for progress bars and frameworks). Does not change the samples.

        Logs (INFO) that the length is declared, not enforced, unless ``silent`` (WebDataset's
        switch for its warning).
        """
        if not silent:
            log.info("with_length(%d) declares len() only; use with_epoch(n) to make epochs n items long", n)
        self.size = int(n)
        return self

    def __len__(self) -> int:
        if self.size is None:
            raise TypeError(
                "this pipeline's length is unknown: its sample counts are not known. Build the dataset "
                "with split='equal' (len() then comes from the shards' counts: their _info.json, or one "
                "counting pass), or make every epoch n items long with .with_epoch(n); .with_length(n) "
                "only declares a length and caps nothing"
            )
        return self.size

    def slot_length(self, world: World) -> int | None:
        """Items one ``(rank, worker)`` slot of ``world`` yields per epoch (``LoaderDataset``'s).

        Here: a declared length (``with_length``) is the whole rank's, so only a rank with one
        worker knows its slot's; ``None`` otherwise. Planned datasets, object streams and mixtures compute it.
        """
        if self.size is not None and world.num_workers == 1:
            return self.size
        return None

    def with_epoch(self, nsamples: int = -1, nbatches: int = -1) -> DataPipeline:
        """Make each ``iter()`` yield exactly ``nsamples`` items, continuing the stream across epochs.

        Unlike WebDataset, the next epoch resumes where the previous one stopped (in the same
        process) instead of re-reading the first shards. Counts are per process (per
        DataLoader worker).
        """
        self.repetitions = sys.maxsize
        self.nsamples = max(nsamples, nbatches)
        self._continuing = None
        return self

    def repeat(self, nepochs: int = -1, nbatches: int = -1) -> DataPipeline:
        """Iterate the source ``nepochs`` times per ``iter()`` (forever if negative), optionally capped."""
        self.repetitions = nepochs if nepochs > 0 else sys.maxsize
        self.nsamples = nbatches
        if nepochs <= 0:
            # An endless repeat with a cap behaves like with_epoch; without a cap, like WebDataset.
            self._continuing = None
        return self

    # -- observability and shutdown -----------------------------------------------------------
    def with_telemetry(self, enabled: bool = True, *, log_interval: float | None = None) -> DataPipeline:
        """Turn telemetry on (or off) from the next ``iter()``; changes this pipeline and returns it.

        ``log_interval``: seconds between INFO summary lines of each process (default
        ``SHARDSTREAM_TELEMETRY_INTERVAL`` or 60; 0: none).
        """
        self._telemetry = enable(self._telemetry, enabled, log_interval)
        return self

    def telemetry_on(self) -> bool:
        """Whether telemetry was turned on for this pipeline itself (not from the environment)."""
        return isinstance(self._telemetry, Recorder) or self._telemetry is True

    def stats(self) -> dict[str, Any]:
        """What this pipeline did in this process, as plain (JSON-able) data.

        Always: every stage's skip counters (``stages``: ``skipped``, ``last_error``) and their
        total (``skipped``). With telemetry on, also each stage's own time and share, samples
        and bytes per second, cache hits and misses, retries and throttles, and ``verdict``:
        whether the consumer waits for data and which stage is the slowest. A WebLoader's
        workers report through ``WebLoader.stats()``.
        """
        self._telemetry = resolve(self._telemetry)
        return pipeline_stats(self._telemetry, self.pipeline)

    def add_stage_counters(self, report: dict[str, Any] | None) -> dict[str, Any]:
        """``report``, a loader's report of this pipeline's runs (``ss.Loader``'s thread mode runs
        copies that count into its recorder), with what this pipeline's stages count themselves:
        each stage's ``last_error``, the ``skipped`` total and, for stages run on threads,
        ``threads`` (their time blocked, see :meth:`stats`). ``None`` (the loader's telemetry is
        off): the skip counters alone, as :meth:`stats` gives them with telemetry off."""
        return pipeline_stats(False, self.pipeline, report)

    @property
    def skipped(self) -> int:
        """Total items skipped by error policies in this process."""
        return sum(s.skipped for _, s in skip_counters(self.pipeline))

    def close(self) -> None:
        """Stop running iterators at once (closing streams and child processes) and close stages."""
        running, self._running = list(self._running), weakref.WeakSet()
        if self._continuing is not None:
            running.append(self._continuing)
            self._continuing = None
        for it in running:
            close_iterator(it)
        for step in self.pipeline:
            if hasattr(step, "close") and step is not self:
                step.close()

    def __enter__(self) -> DataPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._running = weakref.WeakSet()

    def __getstate__(self) -> dict[str, Any]:
        # Running iterators (generators, nodes) cannot be pickled and belong to this process.
        state = self.__dict__.copy()
        state["_running"] = None
        state["_continuing"] = None
        state["_live"] = None
        if self.world is None:
            live = World.current()
            if not in_worker():  # pickled in the main process: record its rank for workers
                state["_main_world"] = live.with_worker(0, 1)
        return state
