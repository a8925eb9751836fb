"""Stages that annotate samples as they pass: ``info`` (log them) and ``associate`` (merge data by key)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..handlers import reraise_exception
from .base import MapStage, RunContext, Stage

__all__ = ["associate", "info"]

log = logging.getLogger(__name__)


class _Info(MapStage):
    """Log the first ``n`` samples (and every ``every``-th) at INFO; samples pass unchanged."""

    def __init__(
        self,
        fmt: str | None = None,
        n: int = 3,
        every: int = -1,
        width: int = 50,
        stream: Any = None,
        name: str = "",
    ) -> None:
        if stream is not None:
            raise TypeError("info(stream=...) is not supported: shardstream logs (logger 'shardstream')")
        self.fmt, self.n, self.every, self.width, self.name = fmt, n, every, width, name
        self.handler = reraise_exception
        self.count = 0

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        def apply(sample: Any) -> Any:
            i = self.count
            self.count = i + 1
            if i < self.n or (self.every > 0 and (i + 1) % self.every == 0):
                text = self.fmt.format(**sample) if self.fmt is not None else repr(sample)[: self.width]
                log.info("%s %d %s", self.name, i, text)
            return sample

        return apply


def info(
    fmt: str | None = None, n: int = 3, every: int = -1, width: int = 50, stream: Any = None, name: str = ""
) -> Stage:
    """Log samples as they pass (WebDataset's ``info``, through logging)."""
    return _Info(fmt, n, every, width, stream, name)


class _Associate(MapStage):
    def __init__(self, associator: Callable[[str], dict[str, Any]] | dict[str, Any]) -> None:
        self.associator = associator
        self.handler = reraise_exception

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        associator = self.associator

        def apply(sample: Any) -> Any:
            key = sample["__key__"]
            extra = associator(key) if callable(associator) else associator.get(key)
            return {**sample, **extra} if extra is not None else sample

        return apply


def associate(associator: Callable[[str], dict[str, Any]] | dict[str, Any]) -> Stage:
    """Merge ``associator(key)`` (or ``associator[key]``) into each sample."""
    return _Associate(associator)
