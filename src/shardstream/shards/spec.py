"""Shard specs -> lists of URLs: brace expansion, ``::`` joined lists, sequences of URLs."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import braceexpand

from ..errors import ConfigurationError
from .world import World, derive_seed

__all__ = ["ResampledShards", "SimpleShardList", "expand_urls", "shardspec"]


def expand_urls(urls: str | Iterable[str]) -> list[str]:
    """Expand ``"a-{000..009}.tar::b-{00..03}.tar"`` (or a list of such) into a flat URL list.

    Raises:
        ConfigurationError: (a ValueError) when the spec expands to nothing.
    """
    if isinstance(urls, str):
        specs = urls.split("::")
    else:
        specs = [u for spec in urls for u in (spec.split("::") if isinstance(spec, str) else [str(spec)])]
    result: list[str] = []
    for spec in specs:
        spec = spec.strip()
        if spec:
            result.extend(braceexpand.braceexpand(spec))
    if not result:
        raise ConfigurationError(
            f"the shard spec {urls!r} names no shards; pass a URL, a brace pattern such as "
            "'data-{000000..000099}.tar', or a non-empty list of URLs"
        )
    return result


def shardspec(spec: str | Sequence[str]) -> SimpleShardList:
    """A shard list from a spec string or list (WebDataset's ``shardspec``)."""
    return SimpleShardList(spec)


class SimpleShardList:
    """Yields ``{"url": ...}`` for each shard, in order, or shuffled with ``seed``.

    Args:
        urls: a spec string or a list of URLs.
        seed: when given, the list is shuffled with this seed (and the epoch) on every pass.
    """

    def __init__(self, urls: str | Sequence[str], seed: int | None = None) -> None:
        self.urls = expand_urls(urls)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.urls)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        urls = list(self.urls)
        if self.seed is not None:
            random.Random(derive_seed(self.seed, "shardlist", self.epoch)).shuffle(urls)
        for url in urls:
            yield {"url": url}

    def __repr__(self) -> str:
        return f"SimpleShardList({len(self.urls)} shards, first={self.urls[0]!r}, seed={self.seed})"


class ResampledShards:
    """Yields ``nshards`` shards drawn at random with replacement (an endless stream by default).

    The draw is seeded from ``(seed, epoch, rank, worker)``: reproducible across runs, different
    every epoch and for every reader, so workers and ranks do not read in lockstep.

    Args:
        urls: a spec string or a list of URLs.
        nshards: how many shards to yield per pass (default: endless).
        seed: base seed (``None``: ``SHARDSTREAM_SEED``/``WDS_SEED`` or 0).
        deterministic: accepted for WebDataset compatibility; draws are always deterministic.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        nshards: int = sys.maxsize,
        seed: int | None = None,
        worker_seed: Any = None,
        deterministic: bool = True,
        max_urls: int = int(1e6),
        empty_check: bool = True,
    ) -> None:
        self.urls = expand_urls(urls)[:max_urls]
        self.nshards = nshards
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        world = World.current()
        rng = random.Random(derive_seed(self.seed, "resample", self.epoch, world.rank, world.worker))
        urls = self.urls
        for _ in range(self.nshards):
            yield {"url": urls[int(rng.random() * len(urls))]}

    def __repr__(self) -> str:
        return f"ResampledShards({len(self.urls)} shards, nshards={self.nshards}, seed={self.seed})"
