"""WebDataset-compatible ``pytorch`` namespace: the torch classes WebDataset re-exports.

Resolved on first access, so that importing shardstream does not need torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DataLoader", "IterableDataset", "TorchTensor"]  # noqa: F822 - resolved by __getattr__


def __getattr__(name: str) -> Any:
    if name == "TorchTensor":  # ``torch.Tensor``
        from ..pipeline.iterable import require_torch

        require_torch("shardstream.pytorch.TorchTensor")
        import torch

        return torch.Tensor
    if name in __all__:
        from ..pipeline.iterable import require_torch

        require_torch(f"shardstream.pytorch.{name}")
        import torch.utils.data

        return getattr(torch.utils.data, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
