"""Batching stages and the default collation function."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import get_worker_info

from .base import Stage

__all__ = ["Batched", "batched", "default_collation_fn", "listed", "unbatched", "unlisted"]

Collate = Callable[[list[Any]], Any]

# Below this size per sample the shared-memory setup costs more than the copy it saves.
_SHARED_MIN_BYTES = 4096


def _stack_into_shared_tensor(values: list[np.ndarray[Any, Any]]) -> Any:
    """Stack arrays straight into a shared-memory torch tensor (inside a DataLoader worker).

    A batch leaving a worker is moved to shared memory by torch's queue, which copies it (and
    page-faults the new mapping). Stacking directly into shared memory, as torch's own
    ``default_collate`` does in workers, saves that copy of every batch. The consumer sees the
    same thing either way: ``default_convert`` would turn the numpy batch into a tensor.
    """
    import torch

    first = values[0]
    dtype = torch.from_numpy(first[:0].reshape(0)).dtype
    storage = torch.UntypedStorage._new_shared(len(values) * first.nbytes)  # type: ignore[no-untyped-call]
    out = torch.empty(0, dtype=dtype).set_(storage).view(len(values), *first.shape)
    np.stack(values, out=out.numpy())
    return out


def _combine(values: list[Any], combine_tensors: bool, combine_scalars: bool) -> Any:
    first = values[0]
    if combine_scalars and isinstance(first, (numbers.Number, np.generic)) and not isinstance(first, bool):
        return np.array(values)
    if combine_tensors:
        if isinstance(first, np.ndarray):
            if (
                first.dtype.kind in "biuf"
                and first.nbytes >= _SHARED_MIN_BYTES
                and all(v.shape == first.shape and v.dtype == first.dtype for v in values)
                and get_worker_info() is not None  # inside a DataLoader worker
            ):
                return _stack_into_shared_tensor(values)
            return np.stack(values)
        if type(first).__module__ == "torch" and type(first).__name__ == "Tensor":
            import torch

            return torch.stack(values)
    return list(values)


def default_collation_fn(
    samples: Sequence[Any], combine_tensors: bool = True, combine_scalars: bool = True
) -> Any:
    """Collate a list of tuples (or dicts) into one tuple (dict) of batched columns.

    Numbers become a numpy array, numpy arrays and torch tensors are stacked, anything else
    (strings, bytes, PIL images) becomes a list. Inside a DataLoader worker, large numeric
    arrays are stacked into a shared-memory torch tensor instead of a numpy array (the loader
    would convert the numpy batch to a tensor anyway, with one more copy).
    """
    if not samples:
        raise ValueError("cannot collate an empty batch")
    first = samples[0]
    if isinstance(first, dict):
        keys = list(first)
        for s in samples:
            if s.keys() != first.keys():
                raise ValueError(
                    f"cannot collate samples with different fields: {sorted(first)} vs {sorted(s)} "
                    f"(sample {s.get('__key__')!r}); use to_tuple() or map() to make them uniform"
                )
        return {k: _combine([s[k] for s in samples], combine_tensors, combine_scalars) for k in keys}
    if isinstance(first, (list, tuple)):
        width = len(first)
        if any(len(s) != width for s in samples):
            raise ValueError("cannot collate tuples of different lengths")
        return tuple(
            _combine([s[i] for s in samples], combine_tensors, combine_scalars) for i in range(width)
        )
    return _combine(list(samples), combine_tensors, combine_scalars)


class Batched(Stage):
    """Group samples into batches of ``batchsize`` and collate them.

    Args:
        batchsize: samples per batch.
        collation_fn: list of samples -> batch (default :func:`default_collation_fn`; None
            yields plain lists).
        partial: yield the last, smaller batch (default True).
    """

    def __init__(
        self, batchsize: int = 20, collation_fn: Collate | None = default_collation_fn, partial: bool = True
    ) -> None:
        if batchsize < 1:
            raise ValueError(f"batchsize={batchsize} must be at least 1")
        self.batchsize = batchsize
        self.collation_fn = collation_fn
        self.partial = partial

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        size, collate = self.batchsize, self.collation_fn
        batch: list[Any] = []
        for sample in src:
            batch.append(sample)
            if len(batch) == size:
                yield collate(batch) if collate is not None else batch
                batch = []
        if batch and self.partial:
            yield collate(batch) if collate is not None else batch


def batched(
    batchsize: int = 20, collation_fn: Collate | None = default_collation_fn, partial: bool = True
) -> Batched:
    return Batched(batchsize, collation_fn, partial)


def listed(batchsize: int = 20, partial: bool = True) -> Batched:
    """Batches as plain lists of samples (no collation)."""
    return Batched(batchsize, None, partial)


class _Unbatched(Stage):
    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        for batch in src:
            if isinstance(batch, dict):
                lengths = {len(v) for v in batch.values()}
                if len(lengths) != 1:
                    raise ValueError(f"cannot unbatch a dict whose columns have lengths {sorted(lengths)}")
                keys = list(batch)
                for i in range(lengths.pop()):
                    yield {k: batch[k][i] for k in keys}
            elif isinstance(batch, (list, tuple)):
                yield from zip(*batch, strict=True)
            else:
                raise ValueError(f"cannot unbatch a {type(batch).__name__}; expected a tuple or dict batch")


class _Unlisted(Stage):
    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        for batch in src:
            yield from batch


def unbatched() -> Stage:
    """Split collated batches back into samples."""
    return _Unbatched()


def unlisted() -> Stage:
    """Split list batches back into samples."""
    return _Unlisted()
