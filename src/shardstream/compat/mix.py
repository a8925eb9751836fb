"""WebDataset-compatible ``mix``: RandomMix and RoundRobin over several datasets.

Both are pipelines over one :class:`~shardstream.pipeline.mix.MixSource` (the stage under
``ss.Mix``), so they save and restore their position like any other pipeline. Their semantics are
WebDataset 1.0.2's: ``RoundRobin`` takes one item of each dataset in turn, ``RandomMix`` draws
each item's dataset at random with ``probs``; both stop at the first dataset that runs out, or
with ``longest=True`` drop it and go on until all have.

``RandomMix`` draws from a generator seeded per epoch, rank and DataLoader worker from ``seed``
(default ``SHARDSTREAM_SEED``, else 0), so a run can be repeated and resumed. WebDataset draws
from Python's global generator, which every DataLoader worker inherits in the same state: there,
all workers draw the same sequence of sources.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..pipeline.mix import MixSource
from ..pipeline.pipeline import DataPipeline
from .pytorch import torch_names

__all__ = [
    "IterableDataset",  # noqa: F822 - torch's, resolved by __getattr__ (no torch at import)
    "RandomMix",
    "RoundRobin",
    "random_samples",
    "round_robin_longest",
    "round_robin_shortest",
]


__getattr__ = torch_names(__name__, "IterableDataset")


# WebDataset's generator forms, over iterators (no state: the classes below save theirs).
def round_robin_shortest(*sources: Iterator[Any]) -> Iterator[Any]:
    """One item of each iterator in turn, until the first one runs out."""
    turn = 0
    while True:
        try:
            item = next(sources[turn % len(sources)])
        except StopIteration:
            return
        yield item
        turn += 1


def round_robin_longest(*sources: Iterator[Any]) -> Iterator[Any]:
    """One item of each iterator in turn; an iterator that runs out leaves the rotation."""
    live = list(sources)
    turn = 0
    while live:
        turn %= len(live)
        try:
            item = next(live[turn])
        except StopIteration:
            del live[turn]
            continue
        turn += 1
        yield item


def random_samples(
    sources: list[Iterator[Any]], probs: Sequence[float] | None = None, longest: bool = False
) -> Iterator[Any]:
    """Items of iterators chosen at random with ``probs`` (Python's global generator, as in
    WebDataset); the first one to run out ends it, or with ``longest`` leaves the draw."""
    weights = [1.0] * len(sources) if probs is None else [float(p) for p in probs]
    while sources:
        total = sum(weights)
        r, acc, pick = random.random() * total, 0.0, len(weights) - 1
        for i, w in enumerate(weights):
            acc += w
            if r < acc:
                pick = i
                break
        try:
            yield next(sources[pick])
        except StopIteration:
            if not longest:
                return
            del sources[pick], weights[pick]


class RoundRobin(DataPipeline):
    """Take one sample from each dataset in turn; ``longest=True`` continues until all end."""

    def __init__(self, datasets: Sequence[Iterable[Any]], longest: bool = False) -> None:
        super().__init__()
        self.datasets = datasets
        self.longest = longest
        self.append(
            MixSource(list(datasets), stop="longest" if longest else "first_exhausted", order="rotation")
        )


class RandomMix(DataPipeline):
    """Draw each sample from a dataset chosen at random with ``probs`` weights."""

    def __init__(
        self,
        datasets: Sequence[Iterable[Any]],
        probs: Sequence[float] | None = None,
        longest: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self.datasets = datasets
        self.probs = list(probs) if probs is not None else [1.0] * len(datasets)
        self.longest = longest
        stop = "longest" if longest else "first_exhausted"
        self.append(MixSource(list(datasets), self.probs, stop=stop, order="random", seed=seed))
