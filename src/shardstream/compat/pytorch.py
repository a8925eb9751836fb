"""WebDataset-compatible ``pytorch`` namespace: the torch classes WebDataset re-exports.

Resolved on first access, so that importing shardstream does not need torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DataLoader", "IterableDataset", "TorchTensor"]  # noqa: F822 - resolved by __getattr__

_TORCH = ("DataLoader", "IterableDataset", "TorchTensor")


def torch_names(module: str, *names: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for compat modules that re-export torch classes, as WebDataset's
    do: each of ``names`` resolves here on first access (so importing them needs no torch)."""

    def getattr_(name: str) -> Any:
        if name in names:
            return __getattr__(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return getattr_


def __getattr__(name: str) -> Any:
    if name == "TorchTensor":  # ``torch.Tensor``
        from ..pipeline.iterable import require_torch

        require_torch("shardstream.pytorch.TorchTensor")
        import torch

        return torch.Tensor
    if name in _TORCH:
        from ..pipeline.iterable import require_torch

        require_torch(f"shardstream.pytorch.{name}")
        import torch.utils.data

        return getattr(torch.utils.data, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
