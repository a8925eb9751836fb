"""WebDataset-compatible ``pipeline`` module for ``install_as_webdataset()`` (``webdataset.pipeline``)."""

from __future__ import annotations

from typing import Any

from ..pipeline.base import PipelineStage
from ..pipeline.pipeline import DataPipeline
from .pytorch import torch_names

__all__ = ["DataLoader", "DataPipeline", "IterableDataset", "PipelineStage", "add_length_method"]  # noqa: F822


def add_length_method(obj: Any) -> Any:
    """Give ``obj`` a ``__len__`` returning ``obj.size`` (WebDataset's helper; changes its class)."""

    def length(self: Any) -> int:
        return int(self.size)

    obj.__class__ = type(obj.__class__.__name__ + "_Length", (obj.__class__,), {"__len__": length})
    return obj


__getattr__ = torch_names(__name__, "DataLoader", "IterableDataset")
