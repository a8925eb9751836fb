"""WebDataset-compatible ``extradatasets`` namespace (thin re-exports)."""

from ..pipeline.window import MockDataset, repeatedly, with_epoch, with_length

__all__ = ["MockDataset", "repeatedly", "with_epoch", "with_length"]
