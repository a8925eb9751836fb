"""DataPipeline: a source followed by stages, iterated one epoch per ``iter()``."""

from __future__ import annotations

import copy
import itertools
import logging
import sys
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import IterableDataset

from .base import Stage, StageStats

__all__ = ["DataPipeline"]

log = logging.getLogger(__name__)


def _close(it: object) -> None:
    """Close an iterator now if it can be closed (generators can; islice, filter cannot)."""
    close = getattr(it, "close", None)
    if close is not None:
        close()


def _is_source(obj: Any) -> bool:
    return isinstance(obj, Iterable) and not isinstance(obj, (Stage, DataPipeline))


class DataPipeline(IterableDataset):  # type: ignore[type-arg]
    """A source followed by stages: ``DataPipeline(SimpleShardList(urls), tarfile_to_samples(), ...)``.

    The first argument is a source (an iterable such as a shard list, a dataset or a loader, or a
    callable returning an iterator); each following argument is a stage called with the previous
    iterator. Lists are flattened, ``None`` is ignored, and a DataPipeline works as a stage inside
    another one (its own first element then also receives the upstream iterator).

    Epochs: every ``iter(pipeline)`` is one epoch. The epoch number advances by one per
    ``iter()``, or is set with :meth:`set_epoch` (as with DistributedSampler); it is passed to
    every stage that has ``set_epoch``, so shard and sample shuffles differ per epoch.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.pipeline: list[Any] = []
        self.epoch = -1
        self._next_epoch: int | None = None
        self.size: int | None = None
        self.repetitions = 1
        self.nsamples = -1
        self._continuing: Iterator[Any] | None = None
        self._running: weakref.WeakSet[Iterator[Any]] = weakref.WeakSet()
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
        for arg in args:
            if arg is not None:
                result.append(arg)
        return result

    def stage(self, i: int) -> Any:
        return self.pipeline[i]

    # -- epochs ---------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next ``iter()`` (later ones continue from it)."""
        self._next_epoch = epoch
        for step in self.pipeline:
            if isinstance(step, DataPipeline):
                step.set_epoch(epoch)

    def _advance_epoch(self) -> int:
        if self._next_epoch is not None:
            self.epoch, self._next_epoch = self._next_epoch, None
        else:
            self.epoch += 1
        return self.epoch

    # -- running --------------------------------------------------------------------------------
    @staticmethod
    def _invoke(f: Any, upstream: Iterator[Any] | None, epoch: int) -> Iterator[Any]:
        if hasattr(f, "set_epoch") and not isinstance(f, DataPipeline):
            f.set_epoch(epoch)
        if isinstance(f, DataPipeline):
            return f._chain(upstream, epoch)
        if upstream is None:
            if _is_source(f):
                return iter(f)
            if callable(f):
                return iter(f())
            raise TypeError(f"{f!r} cannot start a pipeline: pass an iterable or a callable returning one")
        if isinstance(f, Stage) or callable(f):
            return iter(f(upstream))
        raise TypeError(f"{f!r} is not a pipeline stage: stages are callables taking an iterator")

    def _chain(
        self, upstream: Iterator[Any] | None, epoch: int, built: list[Iterator[Any]] | None = None
    ) -> Iterator[Any]:
        it = upstream
        for f in self.pipeline:
            it = self._invoke(f, it, epoch)
            if built is not None:
                built.append(it)
        if it is None:
            raise ValueError("an empty DataPipeline has no source; pass a shard list or dataset first")
        return it

    def run(self, src: Iterable[Any]) -> Iterator[Any]:
        """Run this pipeline's stages on ``src`` (used when nested as a stage)."""
        return self._chain(iter(src), self.epoch if self.epoch >= 0 else 0)

    def __call__(self, src: Iterable[Any]) -> Iterator[Any]:
        return self.run(src)

    def iterator1(self) -> Iterator[Any]:
        """One pass over the source.

        Every stage's iterator is closed when the pass ends, is closed, or raises. Without this,
        an exception from user code would keep the upstream generators (and their open streams,
        connections and child processes) alive through the traceback until garbage collection.
        """
        built: list[Iterator[Any]] = []
        last = self._chain(None, self._advance_epoch(), built)
        try:
            yield from last
        finally:
            for it in reversed(built):
                _close(it)

    def __iter__(self) -> Iterator[Any]:
        inner: Iterator[Any]
        if self.nsamples > 0 and self.repetitions == sys.maxsize:
            # with_epoch(): epochs are windows of nsamples over a stream that continues across
            # epochs (restarting the source, with the next epoch's shard order, when it ends).
            if self._continuing is None:
                self._continuing = self._endless()
            window = self._take(self._continuing, self.nsamples, close_stream=False)
            self._running.add(window)
            return window
        inner = self.iterator1() if self.repetitions == 1 else self._repeat_passes()
        if self.nsamples > 0:
            inner = self._take(inner, self.nsamples, close_stream=True)
        self._running.add(inner)
        return inner

    @staticmethod
    def _take(stream: Iterator[Any], n: int, *, close_stream: bool) -> Iterator[Any]:
        """The next ``n`` items of ``stream``, as a generator (islice has no close(), so the
        epoch's iterator could not be tracked and closed). ``close_stream`` closes the chain
        underneath when this window ends or is closed, so a truncated epoch releases its
        streams at once; with_epoch() leaves its continuing stream open for the next epoch."""
        try:
            yield from itertools.islice(stream, n)
        finally:
            if close_stream:
                _close(stream)

    def _repeat_passes(self, passes: int | None = None) -> Iterator[Any]:
        """``passes`` passes over the source (default ``self.repetitions``); stops at an empty one."""
        for _ in itertools.repeat(None, self.repetitions if passes is None else passes):
            count = 0
            for sample in self.iterator1():
                count += 1
                yield sample
            if count == 0:
                return  # an empty pass: do not spin forever

    def _endless(self) -> Iterator[Any]:
        return self._repeat_passes(sys.maxsize)

    # -- lengths and epochs -------------------------------------------------------------------
    def with_length(self, n: int, silent: bool = False) -> DataPipeline:
        """Declare ``len()`` (for progress bars and frameworks). Does not change the samples."""
        self.size = int(n)
        return self

    def __len__(self) -> int:
        if self.size is None:
            raise TypeError("this pipeline's length is unknown; call .with_length(n) or use with_epoch(n)")
        return self.size

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
    def stats(self) -> dict[str, StageStats]:
        """Skip counters of every stage that skipped something, keyed by stage position and name."""
        result: dict[str, StageStats] = {}
        for i, step in enumerate(self.pipeline):
            stats = step.__dict__.get("_stats") if hasattr(step, "__dict__") else None
            if stats is not None:
                result[f"{i}:{type(step).__name__}"] = stats
        return result

    @property
    def skipped(self) -> int:
        """Total items skipped by error policies in this process."""
        return sum(s.skipped for s in self.stats().values())

    def close(self) -> None:
        """Stop running iterators at once (closing streams and child processes) and close stages."""
        running, self._running = list(self._running), weakref.WeakSet()
        if self._continuing is not None:
            running.append(self._continuing)
            self._continuing = None
        for it in running:
            _close(it)
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
        # Running iterators (generators) cannot be pickled and belong to this process only.
        state = self.__dict__.copy()
        state["_running"] = None
        state["_continuing"] = None
        return state
