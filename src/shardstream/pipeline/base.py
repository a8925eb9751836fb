"""The one stage contract every pipeline step follows.

A stage is called with an upstream iterator and returns a downstream iterator (WebDataset's
convention, so plain functions ``f(src) -> iterator`` work as stages too). Stages that are
:class:`Stage` objects additionally take part in the epoch and state protocol:

* ``set_epoch(epoch)`` is called by the pipeline before each epoch's iterator is built;
* ``get_state()`` returns a JSON-able dict; ``reset(state)`` restores it before the next run;
* ``close()`` releases resources held by a running iterator (streams, connections, children).

:class:`Stage.__call__` is a template method: subclasses implement :meth:`Stage.run` and inherit
counting of skipped items (``stats``) and the epoch bookkeeping without calling ``super()``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..handlers import Handler

__all__ = ["FunctionStage", "Stage", "StageStats", "pipelinefilter", "PipelineStage"]


class StageStats:
    """Counters a stage keeps about the items its error policy skipped."""

    __slots__ = ("skipped", "last_error")

    def __init__(self) -> None:
        self.skipped = 0
        self.last_error: str | None = None

    def record(self, exn: BaseException) -> None:
        self.skipped += 1
        self.last_error = f"{type(exn).__name__}: {exn}"

    def __repr__(self) -> str:
        return f"StageStats(skipped={self.skipped}, last_error={self.last_error!r})"


class Stage:
    """Base class of stateful pipeline stages (see the module docstring for the contract)."""

    epoch: int = 0

    def __call__(self, src: Iterable[Any]) -> Iterator[Any]:
        return self.run(iter(src))

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        """Transform the upstream iterator; implemented by every subclass."""
        raise NotImplementedError(f"{type(self).__name__} must implement run(src)")

    @property
    def stats(self) -> StageStats:
        stats: StageStats | None = self.__dict__.get("_stats")
        if stats is None:
            stats = self.__dict__["_stats"] = StageStats()
        return stats

    def handle(self, handler: Handler, exn: BaseException) -> bool:
        """Apply ``handler`` to ``exn``; count the skip when the handler decides to go on."""
        go_on = handler(exn)
        self.stats.record(exn)
        return go_on

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def get_state(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    def reset(self, state: dict[str, Any] | None = None) -> None:
        if state is not None:
            self.epoch = int(state.get("epoch", self.epoch))

    def close(self) -> None:
        pass


# WebDataset name for the stage base class.
PipelineStage = Stage


class FunctionStage(Stage):
    """A generator function with its arguments bound: ``run(src) = f(src, *args, **kw)``."""

    def __init__(self, f: Callable[..., Iterator[Any]], *args: Any, **kw: Any) -> None:
        self.f = f
        self.args = args
        self.kw = kw

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        return self.f(src, *self.args, **self.kw)

    def __repr__(self) -> str:
        name = getattr(self.f, "__name__", repr(self.f))
        return f"{name}({', '.join([*map(repr, self.args), *(f'{k}={v!r}' for k, v in self.kw.items())])})"


def pipelinefilter(f: Callable[..., Iterator[Any]]) -> Callable[..., FunctionStage]:
    """Curry a generator function ``f(src, *args, **kw)`` into a stage factory.

    ``shuffle = pipelinefilter(_shuffle)`` makes ``shuffle(1000)`` a stage to put in a pipeline.
    """

    @functools.wraps(f)
    def factory(*args: Any, **kw: Any) -> FunctionStage:
        return FunctionStage(f, *args, **kw)

    # Show the curried signature (without the upstream iterator) in help() and introspection.
    try:
        params = list(inspect.signature(f).parameters.values())[1:]
        factory.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    return factory
