"""``ss.Mix``: several datasets interleaved in set proportions, exactly and resumably.

::

    import shardstream as ss

    mix = ss.Mix(
        [
            ss.ShardStream(laion, split="equal"),
            ss.ShardStream(cc12m, split="equal"),
            ss.ShardStream(coyo, split="equal"),
        ],
        weights=[0.5, 0.3, 0.2],
        stop="all_exhausted",
    ).shuffle(1000).decode("rgb8").to_tuple("jpg", "txt").batched(64)

The order is the low-discrepancy interleave of :mod:`shardstream.shards.mixing`: after any number
of items each source has its weight's share up to about one item, in every window. Each source
keeps its own shards, split, shuffle and seed; the mixture's state holds every source's state.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, TypeGuard

from ..errors import ConfigurationError
from ..pipeline.base import RunContext
from ..pipeline.batch import items_after
from ..pipeline.fluent import FluidInterface
from ..pipeline.mix import MixSource
from ..pipeline.pipeline import DataPipeline
from ..shards.mixing import balanced_count, phases
from ..shards.world import World
from .shard_stream import ShardStream
from .specs import Spec

__all__ = ["Mix"]

STOPS = ("first_exhausted", "all_exhausted", "never", "longest")


class Mix(DataPipeline, FluidInterface):
    """An iterable dataset: several datasets' items interleaved in set proportions, deterministically.

    Args:
        datasets: the sources: ``ShardStream``, ``WebDataset`` or any ``DataPipeline``, each with its
            own shards, ``split=``, shuffles and seed (a source's ``repeat()``/``with_epoch()``
            is refused: the mixture runs the passes, by ``stop``); or a shard spec, as every
            front door takes it (``"laion/"``, ``"s3://bucket/cc12m/"``, a brace pattern, a
            list of URLs), which becomes ``ss.ShardStream(spec, world=world)`` with its defaults.
        weights: one positive weight per source, normalised (default: equal). A weight above a
            source's share of the data repeats that source (upsampling) under
            ``"all_exhausted"`` and ``"never"``.
        seed: seed of the interleave's phases (the same on every rank and worker) and of
            the stages composed after the mixture (``.shuffle()``). Default 0.
        stop: when the mixture's epoch ends:

            * ``"first_exhausted"`` (default): when any source ends its epoch; nothing repeats.
            * ``"all_exhausted"``: a source that ends starts its next epoch (its own shard order)
              until every source has ended at least once.
            * ``"never"``: endless; every source restarts when it ends (use ``.with_epoch(n)``
              or a step count).
            * ``"longest"``: a source that ends leaves, the others go on (weights
              renormalised) until all have ended: each sample once.

        world: an explicit ``World`` for the mixture and its stages (a source's own ``world=``
            wins for that source).
        telemetry: time the mixture (one ``mix`` stage: its sources' reading) and the stages
            after it.

    With DataLoader workers or ``ss.Loader(num_workers=M)``, each worker mixes its own share of
    every source. With ``split="equal"`` sources every rank then yields the same number of
    items (the shares, and so the interleave, are the same on every rank). Lengths are exact
    with any number of workers: ``len(mix)`` is one process's; a loader (``WebLoader``,
    ``ss.Loader``) adds up its workers' :meth:`slot_length`, each batched on its own.

    A loader's state restores exactly with the same ``num_workers`` and world size, and
    elastically with others (the same global batch; every rank's state for another world
    size; ``readers/elastic_mix.py``): the rest of the epoch yields, per source, exactly the
    samples the uninterrupted run would have (``"never"``: the rest of every source's pass),
    with a fresh interleave by the weights, and with ``split="equal"`` sources every rank the
    same number of batches. ``"first_exhausted"`` and ``"all_exhausted"`` need planned sources
    (``split="equal"`` or ``"exact"``: where each old worker would have stopped depends on the
    counts) and no shuffle inside a source that would have stopped part-way (shuffle after the
    mixture); what cannot be re-split exactly raises :class:`~shardstream.errors.StateError`.
    """

    def __init__(
        self,
        datasets: Sequence[DataPipeline | Spec],
        weights: Sequence[float] | None = None,
        *,
        seed: int | None = 0,
        stop: str = "first_exhausted",
        world: World | None = None,
        telemetry: bool | None = None,
    ) -> None:
        super().__init__(seed=seed, world=world, telemetry=telemetry)
        if stop not in STOPS:
            raise ConfigurationError(f"stop={stop!r} is unknown; use one of {', '.join(map(repr, STOPS))}")
        sources: list[Any] = [ShardStream(ds, world=world) if _is_spec(ds) else ds for ds in datasets]
        for i, ds in enumerate(sources):
            if not isinstance(ds, DataPipeline):
                raise ConfigurationError(
                    f"source {i} of the mixture is a {type(ds).__name__}; pass ss.ShardStream, WebDataset or "
                    "DataPipeline sources (their state is part of the mixture's), or shard specs"
                )
            if ds.repetitions != 1 or ds.nsamples > 0:
                raise ConfigurationError(
                    f"source {i} of the mixture has repeat() or with_epoch(); the mixture runs each "
                    "source's passes itself: drop it and choose stop='all_exhausted' or 'never' (or "
                    "call with_epoch() on the mixture)"
                )
        self.datasets: list[DataPipeline] = sources
        self.mix = MixSource(self.datasets, weights, stop=stop, seed=seed)
        self.append(self.mix)

    def compose(self, *stages: Any) -> Any:
        return DataPipeline.compose(self, *stages)

    def __repr__(self) -> str:
        return (
            f"Mix(iterable, sources={len(self.datasets)}, weights={list(self.mix.weights)}, "
            f"stop={self.mix.stop!r})"
        )

    def fingerprint(self) -> dict[str, Any]:
        """Stages, seed and the mixture: number of sources, weights, stop rule, each source's own."""
        return {**DataPipeline.fingerprint(self), "seed": self.seed, **self.mix.fingerprint()}

    def __len__(self) -> int:
        """Items per rank per epoch in one process (no workers, or ``ss.Loader`` threads), when
        every source's length is known (a planned ``split=``), through the stages composed after
        the mixture (``.batched(n)``). Loaders with workers count worker by worker
        (:meth:`slot_length`): ``len(loader)`` is exact with any ``num_workers``.
        """
        if self.size is not None:
            return self.size
        if self.mix.stop == "never":
            raise TypeError("an endless mixture (stop='never') has no length; use .with_epoch(n)")
        sizes = self._source_lengths(self.context(0).world.with_worker(0, 1))
        unknown = [i for i, n in enumerate(sizes) if n is None]
        if unknown:
            raise TypeError(
                f"the mixture's length needs every source's: that of source(s) {unknown} is unknown; "
                "give the sources a planned split (split='equal' or 'exact'), or call .with_epoch(n) on "
                "the mixture for epochs of n items"
            )
        return self._items([n for n in sizes if n is not None])

    def slot_length(self, world: World) -> int | None:
        """Items the ``(rank, worker)`` slot of ``world`` yields per epoch, as its worker runs:
        the worker mixes its own share of every source (each source's ``slot_length`` for that
        worker: with planned splits, its quota) by the schedule every worker shares (the phases
        depend on the seed alone), stops by the stop rule, and batches its own items (a partial
        batch per worker). ``None`` when a source's share is unknown or ``stop="never"``.

        Closed form per slot (:func:`~shardstream.shards.mixing.balanced_count`: a bisection
        per source, no schedule replayed), so a loader's ``len()`` costs microseconds per worker
        whatever the number of samples.
        """
        if self.size is not None or self.mix.stop == "never" or self.repetitions != 1 or self.nsamples > 0:
            return DataPipeline.slot_length(self, world)
        sizes = self._source_lengths(world)
        if None in sizes:
            return None
        return self._items([n for n in sizes if n is not None])

    def _source_lengths(self, world: World) -> list[int | None]:
        """Each source's items in ``world``'s slot, in the world the mixture gives that source
        (its own ``world=`` wins for rank and world size: ``MixSource.context``)."""
        ctx = RunContext(0, world, self.seed)
        return [src.slot_length(self.mix.context(i, 0, ctx).world) for i, src in enumerate(self.datasets)]

    def _items(self, sizes: list[int]) -> int:
        """Items one process yields from sources of ``sizes`` items per pass, after the stages."""
        stop = self.mix.stop
        if stop == "longest":
            n = sum(sizes)
        else:
            phase = phases(len(sizes), self.seed)
            n = balanced_count(self.mix.weights, phase, sizes, last=stop == "all_exhausted")
        return items_after(self.pipeline[1:], n)


def _is_spec(source: object) -> TypeGuard[Spec]:
    """A shard spec in the place of a source: a string, a path, or a list of them."""
    if isinstance(source, str | os.PathLike):
        return True
    return isinstance(source, list | tuple) and all(isinstance(s, str | os.PathLike) for s in source)
