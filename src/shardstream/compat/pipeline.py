"""WebDataset-compatible ``pipeline`` module for ``install_as_webdataset()`` (``webdataset.pipeline``)."""

from __future__ import annotations

from typing import Any

from ..pipeline.base import PipelineStage
from ..pipeline.pipeline import DataPipeline

__all__ = ["DataLoader", "DataPipeline", "IterableDataset", "PipelineStage", "add_length_method"]  # noqa: F822


def add_length_method(obj: Any) -> Any:
    """Give ``obj`` a ``__len__`` returning ``obj.size`` (WebDataset's helper; changes its class)."""

    def length(self: Any) -> int:
        return int(self.size)

    obj.__class__ = type(obj.__class__.__name__ + "_Length", (obj.__class__,), {"__len__": length})
    return obj


def __getattr__(name: str) -> Any:
    # torch's classes, which WebDataset's pipeline module re-exports: resolved on first access.
    if name in ("DataLoader", "IterableDataset"):
        from . import pytorch

        return getattr(pytorch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
