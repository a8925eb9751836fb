"""``ss.Loader``'s automatic mode: threads, processes or both, chosen by measuring the pipeline.

Given neither ``num_workers`` nor ``num_threads``, the loader starts in thread mode with one thread
per core it may use (``_cores.py``) and measures its first batches: after the first batch of an
epoch (start-up: shards opening), for at least :data:`PROBE_SECONDS` and :data:`PROBE_BATCHES`
batches (over several epochs if they are short). Two things are measured over the same time:

* how long the GIL was held, by a :class:`~shardstream.telemetry.gil.GilSampler` (a thread that
  wakes every millisecond and times its wait for the GIL);
* how long the loader's threads (its producer and its pool) were runnable: on a core, or waiting
  for one (``/proc/self/task/ID/schedstat``).

``_choice.py`` decides from them, once: threads, or processes (with threads each on many cores).
Under a Lightning Trainer, which ends an epoch after the ``len()`` it counted in thread mode, and
in a world of several ranks, each choosing on its own (a rank making more batches than the others
would leave them waiting at a collective), processes are kept only where they make as many
batches as thread mode.

The choice is logged once (INFO) and kept in ``stats()["auto"]``. A switch to processes happens
at the next batch: the thread-mode run's position after the last batch yielded
(``_state.loader_state``) is restored into the worker processes (elastically: the rest of the
epoch is exactly the samples not yet yielded, in a new order), so no sample is lost or repeated.
A pipeline whose position cannot be re-split over workers (a plain-function stage that saves no
position) switches at the start of the next epoch instead. The order of batches therefore
depends on the choice: give the counts for an order that does not.

Rejected: trying each configuration in turn and keeping the fastest (a worker start costs
0.1-1.5 s, and on a shared machine two short runs differ more than the configurations do); the
GIL's share of the wall time alone (it falls as the loader gets fewer cores: a Pillow pipeline
read above the bound in one run and below it in another on a loaded machine); the per-stage GIL
wait that ``stats()["threads"]`` reports (a fast stage's calls run within one hold of the GIL, so
the waits fall between calls, and a stage that sleeps or reads looks like one waiting).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from ..errors import StateError
from ..pipeline.pipeline import close_iterator
from ..telemetry.gil import GilSampler, gil_enabled, thread_times
from ._choice import Choice, Measured, choose, initial, torch_installed, worker_split
from ._cores import Cores, detect_cores
from ._length import loader_length
from ._state import Live, fingerprint, loader_state, restore_plan

__all__ = ["PROBE_BATCHES", "PROBE_SECONDS", "AutoMode"]

log = logging.getLogger(__name__)

#: Measure at least this long (seconds, after an epoch's first batch) ...
PROBE_SECONDS = 0.5
#: ... and at least this many batches.
PROBE_BATCHES = 4
#: A sampler never runs longer than this (a training loop that stops iterating mid-measurement).
_SAMPLER_SECONDS = 30.0
#: The loader threads' times are read at most this often while measuring (their producer ends
#: with the epoch, and its times with it).
_READ_EVERY = 0.05


class _Segment:
    """One stretch of measurement: from an epoch's first batch to the window's end or the epoch's
    (``owner``: the epoch's iterator), with the loader threads' times at its start and as last
    read."""

    def __init__(self, owner: object, threads: list[int]) -> None:
        self.owner = owner
        self.threads = threads
        self.start = self.read = time.perf_counter()
        self.first = thread_times(threads)
        self.last = dict(self.first) if self.first is not None else None
        self.sampler = GilSampler(limit=_SAMPLER_SECONDS)

    def update(self) -> None:
        """Read the threads' times again (a thread that has ended keeps its last reading)."""
        self.read = time.perf_counter()
        now = thread_times(self.threads)
        if now is None or self.last is None:
            self.last = None
        else:
            self.last.update(now)

    def totals(self) -> tuple[int, int] | None:
        """(ns on a core, ns waiting for one) of the threads since the start."""
        if self.first is None or self.last is None:
            return None
        first, last = self.first, self.last
        on_core = sum(last[t][0] - first[t][0] for t in first if t in last)
        queued = sum(last[t][1] - first[t][1] for t in first if t in last)
        return on_core, queued


class AutoMode:
    """The automatic choice of one ``ss.Loader`` (see the module docstring). The loader calls
    :meth:`before_epoch` at every ``iter()``, wraps thread-mode epochs in :meth:`watch` while
    :attr:`measuring`, and asks :meth:`state_across_switch` for its state after a switch."""

    def __init__(self, dataset: Any, cores: Cores | None = None) -> None:
        self.cores = cores if cores is not None else detect_cores()
        self.has_gil = gil_enabled()
        no_processes = (
            "torch is not installed, and worker processes need it" if not torch_installed() else None
        )
        no_processes = no_processes or worker_split(dataset)
        self.choice = initial(self.cores, has_gil=self.has_gil, no_processes=no_processes)
        self.measured: Measured | None = None
        #: Where thread mode handed over to processes: ``{"epoch": e, "after_batches": k}`` (k
        #: batches of epoch e came from threads; 0: at the epoch's start).
        self.switched: dict[str, int] | None = None
        self.trainer = False  # a Lightning Trainer has run this loader (it counted its length)
        self.pending = False  # a switch to processes waits for the next iter()
        self.switch_next = False  # ... or for the running epoch's next batch
        self._carry: tuple[Live, Live] | None = None  # see state_across_switch
        # Measurement, summed over segments.
        self._seconds = 0.0
        self._batches = 0
        self._waited = 0.0
        self._probes = 0
        self._held = 0
        self._times: tuple[int, int] | None = (0, 0)  # the loader threads' (on a core, queued) ns
        self._segment: _Segment | None = None
        if self.choice is not None:
            self._log()

    @property
    def measuring(self) -> bool:
        return self.choice is None

    @property
    def num_threads(self) -> int:
        """Threads to start with: the choice's, or one per usable core while measuring."""
        return self.choice.num_threads if self.choice is not None else self.cores.usable

    # -- measuring -------------------------------------------------------------------------------
    def watch(self, loader: Any, batches: Any) -> Iterator[Any]:
        """A thread-mode epoch's batches (``engine._Batches``), measured until the choice is made
        and switched to processes at the next batch when that is the choice."""
        return _Watched(self, loader, batches)

    def _begin(self, owner: object, batches: Any) -> None:
        pool = batches.pool
        threads = [batches.run.thread.native_id, *(t.native_id for t in (pool.members if pool else ()))]
        self._segment = _Segment(owner, [t for t in threads if t is not None])

    def _end(self) -> None:
        segment, self._segment = self._segment, None
        if segment is None:
            return
        segment.sampler.stop()
        segment.update()
        self._seconds += time.perf_counter() - segment.start
        self._probes += segment.sampler.probes
        self._held += segment.sampler.held
        totals = segment.totals()
        if self._times is not None and totals is not None:
            self._times = (self._times[0] + totals[0], self._times[1] + totals[1])
        else:
            self._times = None

    def _batch(self, owner: object, batches: Any, waited: float, loader: Any) -> None:
        """A batch of a watched epoch (``owner``) was yielded after the loop waited ``waited``
        seconds for it."""
        segment = self._segment
        if segment is None or segment.owner is not owner:  # the epoch's first batch: start-up
            self._end()
            self._begin(owner, batches)
            return
        self._batches += 1
        self._waited += waited
        now = time.perf_counter()
        if now - segment.read >= _READ_EVERY:
            segment.update()
        elapsed = self._seconds + now - segment.start
        if elapsed >= PROBE_SECONDS and self._batches >= PROBE_BATCHES and segment.sampler.probes:
            self._decide(loader)
            if self.choice is not None and self.choice.num_workers > 0:
                self.switch_next = True

    def _decide(self, loader: Any) -> None:
        self._end()
        copy = loader._copy
        stages = list(copy.stats().get("threads", [])) if copy is not None else []
        share = self._held / self._probes if self._probes else 0.0
        seconds = self._seconds or 1e-9
        cores = queued = of_work = None
        if self._times is not None:
            cores, queued = self._times[0] / 1e9 / seconds, self._times[1] / 1e9 / seconds
            of_work = min(1.0, share / (cores + queued)) if cores + queued > 0 else 0.0
        self.measured = Measured(
            seconds=self._seconds,
            batches=self._batches,
            threads=self.cores.usable,
            gil_share=share,
            probes=self._probes,
            loader_cores=cores,
            loader_queued=queued,
            gil_share_of_work=of_work,
            loop_wait_share=min(1.0, self._waited / seconds),
            stages=stages,
        )
        choice = choose(self.cores, self.measured)
        ranks = loader.dataset.context(0).world.world_size
        if choice.num_workers and (self.trainer or ranks > 1):
            choice = self._keeps_length(loader, choice, ranks)
        self.choice = choice
        self._log()

    def _keeps_length(self, loader: Any, choice: Choice, ranks: int) -> Choice:
        """``choice``, or threads when worker processes would make another number of batches per
        epoch than thread mode (each worker makes a short last batch of its own): a Lightning
        Trainer took its epoch's length from ``len()`` in thread mode and would stop short, and
        with several ranks, each of which measures and chooses on its own, a rank that chose
        otherwise would make another number of batches than the others and leave them waiting
        at a collective."""
        dataset, size, drop = loader.dataset, loader.batch_size, loader.drop_last
        threads = loader_length(dataset, 0, size, drop)
        processes = loader_length(dataset, choice.num_workers, size, drop)
        if threads is None or threads == processes:
            return choice
        made = f"{processes} batches" if processes is not None else "a number of batches it cannot know"
        return Choice(
            0,
            self.cores.usable,
            f"{choice.why}; but "
            + (
                f"a Lightning Trainer counted {threads} batches per epoch in thread mode"
                if self.trainer
                else f"each of the {ranks} ranks must make {threads} batches per epoch (thread mode's)"
            )
            + f" and {choice.num_workers} worker processes would make {made}, so threads",
        )

    def pause(self, owner: object) -> None:
        """The epoch of ``owner`` ended or was dropped: stop its sampling (the measurement goes
        on in the next epoch)."""
        if self._segment is not None and self._segment.owner is owner:
            self._end()

    # -- switching -------------------------------------------------------------------------------
    def _restorable(self, loader: Any, state: dict[str, Any]) -> bool:
        """Whether ``state`` can be restored over the chosen worker processes (checked before
        thread mode stops); logs why not."""
        choice = self.choice
        assert choice is not None
        dataset = loader.dataset
        world = dataset.context(0).world
        try:
            restore_plan(
                state,
                dataset,
                fingerprint(dataset, loader.batch_size),
                rank=world.rank,
                world_size=world.world_size,
                num_workers=choice.num_workers,
                log_resume=False,
            )
        except StateError as exn:
            log.info("ss.Loader switches to worker processes when an epoch starts: %s", exn)
            return False
        return True

    def switch(self, loader: Any) -> Iterator[Any] | None:
        """Move the running epoch to worker processes from the position after the last batch
        yielded: the process-mode batches, or ``None`` when the position cannot be re-split
        over workers (then the switch waits for the next epoch)."""
        self.switch_next = False
        choice = self.choice
        assert choice is not None
        live = loader._live
        state = loader_state(loader.dataset, loader.batch_size, 0, live, trainer_attached=False, held=0)
        if not self._restorable(loader, state):
            self.pending = True
            return None
        lag = live.yielded - live.trained if loader.trainer_attached else 0
        loader._become_processes(choice.num_workers, choice.num_threads)
        loader._workers.load_state_dict(state)
        batches: Iterator[Any] = loader._process_batches()
        self.switched = {"epoch": live.epoch, "after_batches": live.yielded}
        proc_live = loader._workers._live
        if proc_live is not None:
            # Batches of thread mode that Lightning holds untrained count in the new run's lag.
            proc_live.trained -= lag
            self._carry = (live, proc_live)
        return batches

    def before_epoch(self, loader: Any, trainer: bool = False) -> None:
        """At every ``iter()`` (``trainer``: a Lightning Trainer runs it): end a measurement left
        open; make a switch that waited for an epoch's start (the thread-mode epoch count,
        ``set_epoch`` and a loaded state carry over)."""
        self.trainer = self.trainer or trainer
        self._end()
        if not self.pending:
            return
        choice = self.choice
        assert choice is not None
        pending, epoch_set, last = loader._pending, loader._epoch_set, loader._last_epoch
        if pending is not None and not self._restorable(loader, pending["state"]):
            return  # the loaded state is restored in thread mode; processes from the next epoch
        loader._pending = loader._epoch_set = None
        loader._become_processes(choice.num_workers, choice.num_threads)
        if pending is not None:
            loader._workers.load_state_dict(pending["state"])
            epoch = int(pending["plan"]["epoch"])
        else:
            epoch = epoch_set if epoch_set is not None else int(loader.dataset.loader_epoch(last))
            loader._workers.set_epoch(epoch)
        self.pending = False
        self.switched = {"epoch": epoch, "after_batches": 0}

    def state_across_switch(self, loader: Any, held: int) -> dict[str, Any] | None:
        """The loader's state while the batches the training loop has not taken (``held``, or
        under a Trainer those not trained on) reach back before a mid-epoch switch: thread
        mode's position, rolled back; ``None`` otherwise (the worker processes' state is exact)."""
        if self._carry is None:
            return None
        live, proc_live = self._carry
        if proc_live.finished or proc_live is not loader._workers._live:
            self._carry = None
            return None
        attached = loader.trainer_attached
        lag = proc_live.yielded - proc_live.trained if attached else held
        back = lag - proc_live.yielded
        if back <= 0:
            return None
        before = Live(live.epoch, live.roles, live.seen)
        before.seen, before.last, before.undo = list(live.seen), live.last, live.undo
        before.yielded, before.trained = live.yielded, live.yielded - back
        return loader_state(
            loader.dataset, loader.batch_size, 0, before, trainer_attached=attached, held=back
        )

    # -- reporting -------------------------------------------------------------------------------
    def _log(self) -> None:
        choice = self.choice
        assert choice is not None
        cores = self.cores
        measured = self.measured
        how = ""
        if measured is not None:
            how = (
                f"; measured over {measured.batches} batches in {measured.seconds:.2f} s (the loop waited "
                f"{measured.loop_wait_share:.0%} of it for batches)"
            )
        log.info(
            "ss.Loader chose %s: %s; cores: %d of %d given, bound by %s%s. Pass num_workers= or "
            "num_threads= to choose yourself",
            choice.describe(),
            choice.why,
            cores.usable,
            cores.given,
            cores.limit,
            how,
        )

    def report(self) -> dict[str, Any]:
        """``stats()["auto"]``: the choice (or ``measuring``), why, the cores and the measurement."""
        choice = self.choice
        return {
            "state": "measuring" if choice is None else "chosen",
            "num_workers": choice.num_workers if choice is not None else 0,
            "num_threads": self.num_threads,
            "why": choice.why if choice is not None else "measuring the pipeline in thread mode",
            "switched": self.switched,
            "cores": self.cores.as_dict(),
            "measured": self.measured.as_dict() if self.measured is not None else None,
        }

    def close(self) -> None:
        self._end()


class _Watched:
    """A thread-mode epoch's batches while the loader measures; after a switch, the worker
    processes' batches of the same epoch."""

    def __init__(self, auto: AutoMode, loader: Any, batches: Any) -> None:
        self.auto, self.loader, self.batches = auto, loader, batches
        self.after: Iterator[Any] | None = None

    def __iter__(self) -> _Watched:
        return self

    def __next__(self) -> Any:
        if self.after is not None:
            return next(self.after)
        auto = self.auto
        if auto.switch_next:
            self.after = auto.switch(self.loader)
            if self.after is not None:
                return next(self.after)
        start = time.perf_counter()
        try:
            batch = next(self.batches)
        except BaseException:
            auto.pause(self)
            raise
        if auto.measuring:
            auto._batch(self, self.batches, time.perf_counter() - start, self.loader)
        return batch

    def close(self) -> None:
        self.auto.pause(self)
        self.batches.close()
        if self.after is not None:
            close_iterator(self.after)

    def __del__(self) -> None:
        self.auto.pause(self)
