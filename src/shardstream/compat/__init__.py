"""WebDataset-compatible names and namespaces: thin re-exports, no logic.

``wds.compat`` itself is WebDataset's ``compat`` module (WebDataset, WebLoader, FluidInterface,
FluidWrapper, check_empty); the sibling modules mirror ``webdataset.handlers``,
``webdataset.shardlists``, ``webdataset.filters``, ``webdataset.tariterators``,
``webdataset.utils``, ``webdataset.gopen``, ``webdataset.mix``, ``webdataset.autodecode``,
``webdataset.writer`` and ``webdataset.extradatasets``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..pipeline.fluent import FluidInterface, FluidWrapper
from .webdataset import WebDataset, check_empty

if TYPE_CHECKING:
    from ..loader.loader import WebLoader

__all__ = ["FluidInterface", "FluidWrapper", "WebDataset", "WebLoader", "check_empty"]


def __getattr__(name: str) -> Any:
    # WebLoader derives from torch's DataLoader: imported on first use, not with the package.
    if name == "WebLoader":
        from ..loader.loader import WebLoader

        return WebLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
