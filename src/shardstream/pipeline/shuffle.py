"""Buffered sample shuffle, seeded and reproducible per (seed, epoch, rank, worker)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from ..shards.world import World, derive_seed
from .base import Stage

__all__ = ["Shuffle", "detshuffle", "shuffle"]


class Shuffle(Stage):
    """Shuffle samples through a buffer of ``bufsize`` items.

    Output starts once ``initial`` items are buffered; while the buffer is below ``bufsize`` one
    extra item is read per item emitted, so it grows to full size early in the stream. The seed
    of each run is derived from ``(seed, epoch, rank, worker)``: reproducible for a fixed seed,
    different every epoch and in every worker.

    Args:
        bufsize: buffer size (default 1000). Values below 2 make the stage a pass-through.
        initial: items buffered before the first output (default 100, capped at bufsize).
        rng: an explicit ``random.Random`` to draw from (overrides the seed logic).
        seed: base seed; ``None`` uses ``SHARDSTREAM_SEED``/``WDS_SEED`` or 0.
    """

    def __init__(
        self,
        bufsize: int = 1000,
        initial: int = 100,
        rng: random.Random | None = None,
        seed: int | None = None,
        handler: object = None,
    ) -> None:
        self.bufsize = bufsize
        self.initial = min(initial, bufsize)
        self.rng = rng
        self.seed = seed

    def _rng(self) -> random.Random:
        if self.rng is not None:
            return self.rng
        world = World.current()
        return random.Random(derive_seed(self.seed, "samples", self.epoch, world.rank, world.worker))

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        if self.bufsize < 2:
            yield from src
            return
        draw = self._rng().random
        buf: list[Any] = []
        bufsize, initial = self.bufsize, self.initial
        for item in src:
            buf.append(item)
            if len(buf) < bufsize:
                extra = next(src, _END)
                if extra is not _END:
                    buf.append(extra)
            if len(buf) >= initial:
                k = int(draw() * len(buf))
                buf[k], buf[-1] = buf[-1], buf[k]
                yield buf.pop()
        while buf:
            k = int(draw() * len(buf))
            buf[k], buf[-1] = buf[-1], buf[k]
            yield buf.pop()


_END = object()


def shuffle(
    bufsize: int = 1000,
    initial: int = 100,
    rng: random.Random | None = None,
    seed: int | None = None,
    handler: object = None,
) -> Shuffle:
    """WebDataset-compatible factory: ``wds.shuffle(1000)``."""
    return Shuffle(bufsize, initial, rng=rng, seed=seed)


class detshuffle(Shuffle):  # noqa: N801 - WebDataset name
    """Deterministic shuffle whose order changes every epoch (WebDataset's ``detshuffle``)."""

    def __init__(self, bufsize: int = 1000, initial: int = 100, seed: int = 0, epoch: int = -1) -> None:
        super().__init__(bufsize, initial, seed=seed)
        self._auto_epoch = epoch

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        # WebDataset's detshuffle advances its own epoch counter on every run.
        self._auto_epoch += 1
        self.epoch = max(self.epoch, self._auto_epoch)
        return super().run(src)
