"""WebDataset-compatible ``mix``: RandomMix and RoundRobin over several datasets."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..pipeline.iterable import IterableDatasetBase as IterableDataset

__all__ = ["RandomMix", "RoundRobin"]


class RoundRobin(IterableDataset):  # type: ignore[type-arg]
    """Take one sample from each dataset in turn; ``longest=True`` continues until all end."""

    def __init__(self, datasets: Sequence[Iterable[Any]], longest: bool = False) -> None:
        self.datasets = datasets
        self.longest = longest

    def __iter__(self) -> Iterator[Any]:
        sources = [iter(d) for d in self.datasets]
        while sources:
            for s in list(sources):
                try:
                    yield next(s)
                except StopIteration:
                    if not self.longest:
                        return
                    sources.remove(s)


class RandomMix(IterableDataset):  # type: ignore[type-arg]
    """Draw each sample from a dataset chosen at random with ``probs`` weights."""

    def __init__(
        self,
        datasets: Sequence[Iterable[Any]],
        probs: Sequence[float] | None = None,
        longest: bool = False,
        seed: int | None = None,
    ) -> None:
        self.datasets = datasets
        self.probs = list(probs) if probs is not None else [1.0] * len(datasets)
        self.longest = longest
        self.rng = random.Random(seed)

    def __iter__(self) -> Iterator[Any]:
        sources = [iter(d) for d in self.datasets]
        probs = list(self.probs)
        while sources:
            i = self.rng.choices(range(len(sources)), weights=probs)[0]
            try:
                yield next(sources[i])
            except StopIteration:
                if not self.longest:
                    return
                del sources[i], probs[i]
