"""WebDataset-compatible names and namespaces: thin re-exports, no logic.

``wds.compat`` itself is WebDataset's ``compat`` module (WebDataset, WebLoader, FluidInterface,
FluidWrapper, check_empty); the sibling modules mirror ``webdataset.handlers``,
``webdataset.shardlists``, ``webdataset.filters``, ``webdataset.tariterators``,
``webdataset.utils``, ``webdataset.gopen``, ``webdataset.mix``, ``webdataset.autodecode``,
``webdataset.writer`` and ``webdataset.extradatasets``.
"""

from ..loader.loader import WebLoader
from ..pipeline.fluent import FluidInterface, FluidWrapper, WebDataset, check_empty

__all__ = ["FluidInterface", "FluidWrapper", "WebDataset", "WebLoader", "check_empty"]
