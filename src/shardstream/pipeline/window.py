"""Windows over a stream and dataset wrappers: slice, with_epoch, with_length, repeatedly, MockDataset,
and WebDataset's ``add_length_method``."""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .base import Node, RunContext, Stage, StateDict
from .iterable import IterableDatasetBase as IterableDataset

__all__ = ["MockDataset", "add_length_method", "repeatedly", "slice", "with_epoch", "with_length"]


class _SliceNode(Node):
    def __init__(self, upstream: Node, bounds: tuple[int, int | None, int], state: StateDict | None) -> None:
        super().__init__(upstream)
        self.index = int((state or {}).get("index", 0))  # upstream items consumed
        self.tell = upstream.tell
        self.item_at = upstream.item_at  # type: ignore[method-assign]
        self.items_at = upstream.items_at  # type: ignore[method-assign]
        self._it = self._run(*bounds)

    def _run(self, start: int, stop: int | None, step: int) -> Iterator[Any]:
        assert self.upstream is not None
        if stop is not None and self.index >= stop:
            return
        for item in self.upstream:
            i = self.index
            self.index = i + 1
            if i >= start and (i - start) % step == 0:
                yield item
            if stop is not None and self.index >= stop:
                return

    def state_dict(self) -> StateDict:
        return {"index": self.index}


class _Slice(Stage):
    passes_values = True

    def __init__(self, *args: int | None) -> None:
        bounds = builtins.slice(*args)
        self.bounds = (bounds.start or 0, bounds.stop, bounds.step or 1)
        if self.bounds[0] < 0 or (self.bounds[1] is not None and self.bounds[1] < 0) or self.bounds[2] < 1:
            raise ValueError(f"slice{args} needs non-negative start/stop and a positive step")

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("slice needs an upstream stage")
        return _SliceNode(upstream, self.bounds, state)


def slice(*args: int | None) -> Stage:  # noqa: A001 - WebDataset name
    """``slice(stop)`` / ``slice(start, stop[, step])`` over the stream."""
    return _Slice(*args)


def repeatedly(
    source: Iterable[Any],
    nepochs: int | None = None,
    nbatches: int | None = None,
    nsamples: int | None = None,
    batchsize: Callable[[Any], int] | None = None,
) -> Iterator[Any]:
    """Iterate ``source`` again and again, stopping after ``nepochs``/``nbatches``/``nsamples``."""
    count_batches = 0
    count_samples = 0
    for epoch in itertools.count():
        if nepochs is not None and epoch >= nepochs:
            return
        for item in source:
            yield item
            count_batches += 1
            count_samples += batchsize(item) if batchsize is not None else 1
            if nbatches is not None and count_batches >= nbatches:
                return
            if nsamples is not None and count_samples >= nsamples:
                return


class with_epoch(IterableDataset):  # type: ignore[type-arg]  # noqa: N801
    """Wrap a dataset so each iteration yields exactly ``length`` items, continuing across epochs."""

    def __init__(self, dataset: Iterable[Any], length: int) -> None:
        self.dataset = dataset
        self.length = length
        self.source: Iterator[Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "source": None}

    def __iter__(self) -> Iterator[Any]:
        if self.source is None:
            self.source = iter(self.dataset)
        for _ in range(self.length):
            try:
                yield next(self.source)
            except StopIteration:
                self.source = iter(self.dataset)
                try:
                    yield next(self.source)
                except StopIteration:
                    return


class with_length(IterableDataset):  # type: ignore[type-arg]  # noqa: N801
    """Wrap a dataset and give it a ``len()`` (does not change what it yields)."""

    def __init__(self, dataset: Iterable[Any], length: int) -> None:
        self.dataset = dataset
        self.length = length

    def __iter__(self) -> Iterator[Any]:
        return iter(self.dataset)

    def __len__(self) -> int:
        return self.length


class MockDataset(IterableDataset):  # type: ignore[type-arg]
    """Yields the same ``sample`` ``length`` times (for pipeline tests)."""

    def __init__(self, sample: Any, length: int) -> None:
        self.sample = sample
        self.length = length

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.length):
            yield self.sample


def add_length_method(obj: Any) -> Any:
    """Give ``obj`` a ``__len__`` returning ``obj.size`` (WebDataset's ``pipeline.add_length_method``).

    As in WebDataset, ``obj`` changes class in place: to a subclass of its own class and of
    torch's ``IterableDataset`` (a plain stand-in without torch), named ``<class>_Length``.
    """

    def length(self: Any) -> int:
        return int(self.size)

    cls = obj.__class__
    bases = (cls,) if issubclass(cls, IterableDataset) else (cls, IterableDataset)
    obj.__class__ = type(cls.__name__ + "_Length", bases, {"__len__": length})
    return obj
