"""Small WebDataset stages: slice, rsample, info, associate, non_empty, resampled, repeatedly."""

from __future__ import annotations

import itertools
import logging
import random
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch.utils.data import IterableDataset

from ..shards.world import World, derive_seed
from .base import Stage, pipelinefilter

__all__ = [
    "Cached",
    "MockDataset",
    "associate",
    "info",
    "non_empty",
    "repeatedly",
    "resampled",
    "rsample",
    "slice",
    "with_epoch",
    "with_length",
    "xdecode",
]

log = logging.getLogger(__name__)


class _Slice(Stage):
    def __init__(self, *args: int | None) -> None:
        self.args = args

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        return itertools.islice(src, *self.args)


def slice(*args: int | None) -> Stage:  # noqa: A001 - WebDataset name
    """``slice(stop)`` / ``slice(start, stop[, step])`` over the stream."""
    return _Slice(*args)


class _RandomSample(Stage):
    def __init__(self, p: float) -> None:
        self.p = p

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        world = World.current()
        draw = random.Random(derive_seed(None, "rsample", self.epoch, world.rank, world.worker)).random
        p = self.p
        return (x for x in src if draw() < p)


def rsample(p: float = 0.5) -> Stage:
    """Keep each sample with probability ``p`` (seeded per epoch, rank and worker)."""
    return _RandomSample(p)


def _info(
    data: Iterator[Any],
    fmt: str | None = None,
    n: int = 3,
    every: int = -1,
    width: int = 50,
    stream: Any = None,
    name: str = "",
) -> Iterator[Any]:
    for i, sample in enumerate(data):
        if i < n or (every > 0 and (i + 1) % every == 0):
            text = fmt.format(**sample) if fmt is not None else repr(sample)[:width]
            log.info("%s %d %s", name, i, text)
        yield sample


info = pipelinefilter(_info)


def _associate(
    data: Iterator[Any], associator: Callable[[str], dict[str, Any]] | dict[str, Any], **kw: Any
) -> Iterator[Any]:
    for sample in data:
        extra = associator(sample["__key__"]) if callable(associator) else associator.get(sample["__key__"])
        if extra is not None:
            sample = {**sample, **extra}
        yield sample


associate = pipelinefilter(_associate)


def _non_empty(src: Iterator[Any]) -> Iterator[Any]:
    count = 0
    for s in src:
        count += 1
        yield s
    if count == 0:
        raise ValueError("the shard list is empty; check the spec (pipeline stage non_empty)")


def non_empty(src: Iterable[Any]) -> Iterator[Any]:
    """Pass items through; raise if there were none."""
    return _non_empty(iter(src))


def _resampled(src: Iterator[Any], n: int = sys.maxsize) -> Iterator[Any]:
    items = list(src)
    world = World.current()
    rng = random.Random(derive_seed(None, "resampled", world.rank, world.worker))
    for _ in range(n):
        yield items[int(rng.random() * len(items))]


resampled = pipelinefilter(_resampled)


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


class Cached(Stage):
    """Keep the samples of the first pass in memory and replay them on later passes."""

    def __init__(self) -> None:
        self.cached: list[Any] | None = None

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        if self.cached is not None:
            yield from self.cached
            return
        collected: list[Any] = []
        for sample in src:
            collected.append(sample)
            yield sample
        self.cached = collected


class _XDecode(Stage):
    def __init__(
        self,
        *args: tuple[str, Callable[[bytes], Any]],
        must_decode: bool = True,
        defaults: bool = True,
        **kw: Callable[[bytes], Any],
    ) -> None:
        import fnmatch

        patterns = [*args, *(("*." + k, v) for k, v in kw.items())]
        self.rules = [(fnmatch.translate(p), f) for p, f in patterns]
        self.must_decode = must_decode

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        import re

        rules = [(re.compile(p), f) for p, f in self.rules]
        for sample in src:
            out = dict(sample)
            for key, value in sample.items():
                if key.startswith("__"):
                    continue
                for pattern, f in rules:
                    if pattern.match("." + key) or pattern.match(key):
                        out[key] = f(value)
                        break
                else:
                    if self.must_decode and not isinstance(value, (str, int, float)):
                        raise ValueError(
                            f"xdecode: no rule for field {key!r} of sample {sample.get('__key__')!r}; "
                            "add a pattern or pass must_decode=False"
                        )
            yield out


def xdecode(
    *args: tuple[str, Callable[[bytes], Any]],
    must_decode: bool = True,
    defaults: bool = True,
    **kw: Callable[[bytes], Any],
) -> Stage:
    """Decode fields by glob pattern: ``xdecode(("*.txt", bytes.decode), cls=int)``."""
    return _XDecode(*args, must_decode=must_decode, defaults=defaults, **kw)
