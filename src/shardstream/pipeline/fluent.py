"""Fluent methods: ``ds.shuffle(1000).decode("rgb8").to_tuple("jpg", "cls").batched(32)``.

Every method only composes a stage onto a copy of the pipeline (``compose``), so the fluent and
explicit (:class:`~shardstream.pipeline.DataPipeline`) surfaces share one implementation. The
methods return the type they are called on (``Self``), so a typed ``ShardStream`` stays a ``ShardStream``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

from ..handlers import Handler, reraise_exception
from . import batch, fields, log_keys, sampling, window
from . import mapping as map_stages
from .decode import Decode
from .pipeline import DataPipeline
from .shuffle import shuffle

__all__ = ["FluidInterface", "FluidWrapper"]

Self = TypeVar("Self", bound="FluidInterface")


class FluidInterface:
    """Chainable methods shared by ShardStream, WebDataset, FluidWrapper and WebLoader."""

    def compose(self: Self, *stages: Any) -> Self:
        raise NotImplementedError

    def batched(
        self: Self,
        batchsize: int,
        collation_fn: Callable[[list[Any]], Any] | None = batch.default_collation_fn,
        partial: bool = True,
    ) -> Self:
        return self.compose(batch.batched(batchsize, collation_fn=collation_fn, partial=partial))

    def unbatched(self: Self) -> Self:
        return self.compose(batch.unbatched())

    def listed(self: Self, batchsize: int, partial: bool = True) -> Self:
        return self.compose(batch.listed(batchsize, partial=partial))

    def unlisted(self: Self) -> Self:
        return self.compose(batch.unlisted())

    def shuffle(
        self: Self,
        size: int,
        initial: int = 100,
        rng: random.Random | None = None,
        seed: int | None = None,
        handler: object = None,
    ) -> Self:
        """Buffered sample shuffle (see :class:`~shardstream.pipeline.shuffle.Shuffle`).

        ``handler`` exists for WebDataset signatures only: shuffling raises nothing, so a value
        but ``None`` logs a warning once and is ignored.
        """
        if size < 1:
            return self
        return self.compose(shuffle(size, initial, rng=rng, seed=seed, handler=handler))

    def map(self: Self, f: Callable[[Any], Any], handler: Handler = reraise_exception) -> Self:
        return self.compose(map_stages.map(f, handler=handler))

    def decode(
        self: Self,
        *args: Any,
        pre: Any = None,
        post: Any = None,
        only: Any = None,
        partial: bool = False,
        handler: Handler = reraise_exception,
        **kw: Any,
    ) -> Self:
        return self.compose(
            Decode(*args, pre=pre, post=post, only=only, partial=partial, handler=handler, **kw)
        )

    def map_dict(self: Self, handler: Handler = reraise_exception, **kw: Callable[[Any], Any]) -> Self:
        return self.compose(map_stages.map_dict(handler=handler, **kw))

    def select(self: Self, predicate: Callable[[Any], bool]) -> Self:
        return self.compose(map_stages.select(predicate))

    def to_tuple(self: Self, *args: str, **kw: Any) -> Self:
        return self.compose(fields.to_tuple(*args, **kw))

    def map_tuple(
        self: Self, *args: Callable[[Any], Any] | None, handler: Handler = reraise_exception
    ) -> Self:
        return self.compose(map_stages.map_tuple(*args, handler=handler))

    def slice(self: Self, *args: int | None) -> Self:
        return self.compose(window.slice(*args))

    def rename(self: Self, **kw: Any) -> Self:
        return self.compose(fields.rename(**kw))

    def rsample(self: Self, p: float = 0.5) -> Self:
        return self.compose(sampling.rsample(p))

    def rename_keys(self: Self, *args: Any, **kw: Any) -> Self:
        return self.compose(fields.rename_keys(*args, **kw))

    def extract_keys(self: Self, *args: str, **kw: Any) -> Self:
        return self.compose(fields.extract_keys(*args, **kw))

    def log_keys(self: Self, logfile: str | None = None) -> Self:
        """Append ``index, __worker__, __rank__, __key__`` of every sample to ``logfile`` (a
        tab-separated line each, WebDataset's format); ``None`` logs nothing."""
        return self.compose(log_keys.log_keys(logfile))


class FluidWrapper(DataPipeline, FluidInterface):
    """Fluent methods over any iterable (a DataLoader, a list, another pipeline)."""

    def __init__(self, initial: Any) -> None:
        super().__init__()
        self.append(initial)

    def compose(self, *stages: Any) -> Any:
        return DataPipeline.compose(self, *stages)
