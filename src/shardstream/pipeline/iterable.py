"""torch's IterableDataset (and Dataset) as base classes when torch is installed, plain classes otherwise.

DataLoader picks its iterable-dataset mode by ``isinstance(dataset, IterableDataset)``, so our
pipelines must derive from it when torch is there; without torch, ``import shardstream`` and
the pipelines still work (torch is deliberately not a dependency).
"""

from __future__ import annotations

from typing import Any

from ..optional import in_worker
from ..optional import require_torch as _require_torch

__all__ = ["IterableDatasetBase", "MapDatasetBase", "in_worker", "require_torch"]

try:
    from torch.utils.data import Dataset as MapDatasetBase
    from torch.utils.data import IterableDataset as IterableDatasetBase
except ImportError:  # pragma: no cover - exercised by the no-torch test in a fresh venv

    class IterableDatasetBase:  # type: ignore[no-redef]
        """Stands in for torch.utils.data.IterableDataset when torch is not installed."""

        def __class_getitem__(cls, item: Any) -> Any:
            return cls

    class MapDatasetBase:  # type: ignore[no-redef]
        """Stands in for torch.utils.data.Dataset (map-style datasets) when torch is not installed."""

        def __class_getitem__(cls, item: Any) -> Any:
            return cls


def require_torch(what: str) -> Any:
    """Import torch, or raise an ImportError that says what needs it and how to install it."""
    return _require_torch(purpose=what)
