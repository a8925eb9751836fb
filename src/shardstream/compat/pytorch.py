"""WebDataset-compatible ``pytorch`` namespace: the torch classes WebDataset re-exports."""

from torch.utils.data import DataLoader, IterableDataset

__all__ = ["DataLoader", "IterableDataset"]
