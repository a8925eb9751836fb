"""Loaders: ``Loader`` (threads, processes or both), ``WebLoader`` (a torch DataLoader), and how
worker processes start (``worker_context``).

``WebLoader`` needs torch and is imported when first used, so ``Loader`` in thread mode and
``worker_context`` work without torch.
"""

from __future__ import annotations

from typing import Any

from ._start import worker_context
from .engine import Loader

__all__ = ["Loader", "WebLoader", "worker_context"]


def __getattr__(name: str) -> Any:
    if name == "WebLoader":
        from .loader import WebLoader

        return WebLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
