"""PyTorch integration: WebLoader, and how its worker processes start (``worker_context``)."""

from ._start import worker_context
from .loader import WebLoader

__all__ = ["WebLoader", "worker_context"]
