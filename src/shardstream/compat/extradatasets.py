"""WebDataset-compatible ``extradatasets`` namespace (thin re-exports).

WebDataset's module also binds what it imports (the ``utils`` module); so does this one, for code
that reaches them through it.
"""

from __future__ import annotations

from ..pipeline.base import PipelineStage
from ..pipeline.window import MockDataset, repeatedly, with_epoch, with_length
from . import utils as utils
from .pytorch import torch_names

__all__ = [  # noqa: F822 - IterableDataset: resolved by __getattr__
    "IterableDataset",
    "MockDataset",
    "PipelineStage",
    "repeatedly",
    "with_epoch",
    "with_length",
]


__getattr__ = torch_names(__name__, "IterableDataset")
