"""The automatic mode's choice (``_auto.py``): threads, processes or both, as a function of the
cores a loader may use and of what it measured in thread mode.

The measure is the share of the loader's work done holding the GIL: the GIL's share of the time
over the loader threads' time on a core or waiting for one. A machine busy with other programs
delays the holder of the GIL and the others alike, so the ratio stays what it is on an idle
machine, where the GIL's share of the time falls with the loader's share of the cores. ``n``
threads at full speed would keep the GIL busy ``n`` times that share of the time:

* threads that were runnable less than :data:`BUSY_CORES` cores' worth wait (for I/O, or for the
  training loop to take batches): the GIL does not limit them: **threads**;
* ``n`` x the share below :data:`GIL_BOUND`: the stages release the GIL (a JPEG decode in C,
  FFmpeg, numpy): **threads**, which ``benchmarks/bench_loader.py`` finds as fast as processes
  there, at a fraction of the memory;
* above it, Python holds the GIL long enough that threads wait for each other (a pure-Python
  map, Pillow's ``Image.open`` and array conversion, tiny samples whose cost is the engine's
  Python): **processes**, each with its own GIL, with as many threads each as keep a process
  below the bound and leave the fewest cores unused: *both*, on machines with many cores.

Processes are a choice only where they give the same epochs as threads (:func:`worker_split`):
the pipeline shares its shards or samples among worker processes (``ShardStream``'s splits,
``split_by_worker``, object streams, mixtures of such) and counts its epochs as a whole
(no ``with_epoch``/``repeat``, whose counts are per process).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from ..pipeline.mix import MixSource
from ..pipeline.pipeline import DataPipeline
from ..readers import ObjectSamples, PlannedSamples, ReadShards, Splitter
from ._cores import Cores

__all__ = [
    "BUSY_CORES",
    "GIL_BOUND",
    "Choice",
    "Measured",
    "choose",
    "initial",
    "torch_installed",
    "worker_split",
]

#: ``n`` threads x the share of the loader's work done holding the GIL at or above this: processes.
#: It lies between what ``benchmarks/bench_auto.py`` measures on ``bench_loader``'s pipelines where
#: threads are the fastest (simplejpeg, the decode stage, video) and where processes are (Pillow,
#: tiny samples, a pure-Python map): ``benchmarks/results/bench_auto.md``. A loaded machine reads
#: lower (time waiting for a core counts in full as the loader's work, only in part as the GIL's),
#: and there the cores, more than the GIL, are the limit.
GIL_BOUND = 0.35
#: The loader's threads runnable less than this many cores' worth: they wait, and the GIL is not
#: their limit (a pure-Python pipeline keeps at least its GIL's holder runnable: about one core).
BUSY_CORES = 0.75


@dataclass(frozen=True)
class Measured:
    """What the loader measured in thread mode before it chose.

    Attributes:
        seconds: wall time measured (after each epoch's first batch).
        batches: batches in it.
        threads: the pool's threads while measuring.
        gil_share: the share of the time the GIL was held (``GilSampler``), by any thread.
        probes: the sampler's probes behind ``gil_share``.
        loader_cores: the loader's threads' time on a core over the wall time, in cores.
        loader_queued: their time waiting for a core (other threads, other programs), in cores.
        gil_share_of_work: ``gil_share`` over ``loader_cores + loader_queued``, at most 1: the
            share of the loader's work done holding the GIL. ``None`` (with the two before)
            where per-thread times are not readable (not Linux): ``gil_share`` decides then.
        loop_wait_share: the share of the time the training loop waited for a batch (near 1:
            the loader is the limit; near 0: the loop is, and the loader idles).
        stages: ``stats()["threads"]`` at the end: each per-sample stage's share of its calls
            spent blocked on the threads.
    """

    seconds: float
    batches: int
    threads: int
    gil_share: float
    probes: int
    loader_cores: float | None
    loader_queued: float | None
    gil_share_of_work: float | None
    loop_wait_share: float
    stages: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        def rounded(x: float | None) -> float | None:
            return None if x is None else round(x, 3)

        return {
            "seconds": round(self.seconds, 3),
            "batches": self.batches,
            "threads": self.threads,
            "gil_share": round(self.gil_share, 3),
            "probes": self.probes,
            "loader_cores": rounded(self.loader_cores),
            "loader_queued": rounded(self.loader_queued),
            "gil_share_of_work": rounded(self.gil_share_of_work),
            "loop_wait_share": round(self.loop_wait_share, 3),
            "stages": self.stages,
        }


@dataclass(frozen=True)
class Choice:
    """A configuration: ``num_workers`` processes (0: thread mode) with ``num_threads`` threads
    each, and why (a sentence for the log line)."""

    num_workers: int
    num_threads: int
    why: str

    def describe(self) -> str:
        if self.num_workers == 0:
            return f"{self.num_threads} thread{'s' if self.num_threads > 1 else ''} in this process"
        return (
            f"{self.num_workers} worker process{'es' if self.num_workers > 1 else ''} x "
            f"{self.num_threads} thread{'s' if self.num_threads > 1 else ''}"
        )


def initial(cores: Cores, *, has_gil: bool, no_processes: str | None) -> Choice | None:
    """The choice that needs no measurement, or ``None`` (measure with ``cores.usable`` threads);
    ``no_processes``: why worker processes are not an option (``None``: they are)."""
    n = cores.usable
    if n == 1:
        return Choice(0, 1, "one core to use: nothing runs in parallel, and processes only add hand-offs")
    if not has_gil:
        return Choice(0, n, "this interpreter runs without a GIL: threads run the stages in parallel")
    if no_processes is not None:
        return Choice(0, n, f"threads, not processes: {no_processes}")
    return None


def worker_split(dataset: Any) -> str | None:
    """Why worker processes would not give ``dataset``'s epochs exactly as threads do, or ``None``
    when they would: it shares its shards (or samples) among workers and counts epochs as a whole."""
    if not isinstance(dataset, DataPipeline):
        return f"{type(dataset).__name__} is not a DataPipeline, whose readers say how workers share it"
    if dataset.repetitions != 1 or dataset.nsamples > 0:
        return "its epochs are counted per process (with_epoch or repeat), so workers would each make one"
    if not dataset.pipeline:
        return "it has no reader"
    first = dataset.pipeline[0]
    if isinstance(first, MixSource):
        for source in first.sources:
            why = worker_split(source)
            if why is not None:
                return f"a source of its mixture: {why}"
        return None
    splits = False
    for stage in dataset.pipeline:
        if isinstance(stage, (PlannedSamples, ObjectSamples)):
            return None  # they read this (rank, worker) slot's share
        if isinstance(stage, Splitter) and stage.by == "worker":
            splits = True
        if isinstance(stage, ReadShards):
            if splits:
                return None
            return (
                "its shards are not shared among worker processes (no split_by_worker before its "
                "reader), so each would read them all"
            )
    return "it does not read shards (an iterable source, which every worker process would read whole)"


def choose(cores: Cores, measured: Measured) -> Choice:
    """The configuration for a pipeline measured on ``cores.usable`` threads (see the module
    docstring)."""
    n = cores.usable
    if measured.gil_share_of_work is None:  # no per-thread times: the share of the time decides
        load, busy = measured.gil_share, None
        share = load / n
        held = f"the GIL was held {load:.0%} of the time while {n} threads ran the pipeline"
    else:
        share = measured.gil_share_of_work
        load, busy = n * share, (measured.loader_cores or 0.0) + (measured.loader_queued or 0.0)
        held = (
            f"the GIL was held for {share:.0%} of the loader's work, so {n} threads at full speed "
            f"would keep it busy {load:.0%} of the time"
        )
    if busy is not None and busy < BUSY_CORES:
        return Choice(
            0,
            n,
            f"{held}, but its threads were busy only {busy:.2f} cores' worth: they wait (for I/O or "
            "for the training loop), so threads",
        )
    if load < GIL_BOUND:
        return Choice(0, n, f"{held}, below {GIL_BOUND:.0%}: threads")
    # Threads per process: at most as many as keep a process's GIL below the bound; of those, the
    # count that leaves the fewest cores unused (then the fewest processes).
    most = max(1, min(n, int(GIL_BOUND / share - 1e-9))) if share > 0 else n
    _, per = max(((n // t) * t, t) for t in range(1, most + 1))
    return Choice(
        n // per,
        per,
        f"{held}, {GIL_BOUND:.0%} or more: threads would wait for it, and each process has its own",
    )


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None
