"""PyTorch integration: WebLoader."""

from .loader import WebLoader

__all__ = ["WebLoader"]
