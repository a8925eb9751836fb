"""WebDataset-compatible ``extradatasets`` namespace (thin re-exports)."""

from __future__ import annotations

from typing import Any

from ..pipeline.base import PipelineStage
from ..pipeline.window import MockDataset, repeatedly, with_epoch, with_length

__all__ = [  # noqa: F822 - IterableDataset: resolved by __getattr__
    "IterableDataset",
    "MockDataset",
    "PipelineStage",
    "repeatedly",
    "with_epoch",
    "with_length",
]


def __getattr__(name: str) -> Any:
    if name == "IterableDataset":  # torch's class, imported on first use
        from . import pytorch

        return pytorch.IterableDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
