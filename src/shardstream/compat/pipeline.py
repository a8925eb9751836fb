"""WebDataset-compatible ``pipeline`` module for ``install_as_webdataset()`` (``webdataset.pipeline``).

``islice`` is here because WebDataset's module imports it (code may reach it there).
"""

from __future__ import annotations

from itertools import islice as islice

from ..pipeline.base import PipelineStage
from ..pipeline.pipeline import DataPipeline
from ..pipeline.window import add_length_method
from .pytorch import torch_names

__all__ = ["DataLoader", "DataPipeline", "IterableDataset", "PipelineStage", "add_length_method"]  # noqa: F822

__getattr__ = torch_names(__name__, "DataLoader", "IterableDataset")
