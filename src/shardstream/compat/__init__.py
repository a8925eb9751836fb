"""WebDataset-compatible names and namespaces: thin re-exports, no logic.

``wds.compat`` itself is WebDataset's ``compat`` module (WebDataset, WebLoader, FluidInterface,
FluidWrapper, check_empty, and the names that module imports, ``SimpleNamespace`` and ``urlparse``
included); the sibling modules mirror
``webdataset.handlers``,
``webdataset.shardlists``, ``webdataset.filters``, ``webdataset.tariterators``,
``webdataset.utils``, ``webdataset.gopen``, ``webdataset.mix``, ``webdataset.autodecode``,
``webdataset.writer`` and ``webdataset.extradatasets``.
"""

from __future__ import annotations

from types import SimpleNamespace as SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse as urlparse

from ..handlers import reraise_exception
from ..pipeline.base import pipelinefilter
from ..pipeline.fluent import FluidInterface, FluidWrapper
from ..pipeline.pipeline import DataPipeline
from .tariterators import group_by_keys, tar_file_expander
from .webdataset import WebDataset, check_empty

if TYPE_CHECKING:
    from ..loader.loader import WebLoader

__all__ = [  # noqa: F822 - DataLoader and WebLoader: resolved by __getattr__
    "DataLoader",
    "DataPipeline",
    "FluidInterface",
    "FluidWrapper",
    "WebDataset",
    "WebLoader",
    "check_empty",
    "group_by_keys",
    "pipelinefilter",
    "reraise_exception",
    "tar_file_expander",
]


def __getattr__(name: str) -> Any:
    # WebLoader derives from torch's DataLoader: imported on first use, not with the package.
    if name == "WebLoader":
        from ..loader.loader import WebLoader

        return WebLoader
    if name == "DataLoader":
        from . import pytorch

        return pytorch.DataLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
