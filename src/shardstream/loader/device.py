"""``ss.Loader``'s way to the GPU: pinned batches and the next batch copied on a side stream.

``pin_memory=True`` (with CUDA) stacks a batch straight into pinned memory (:class:`PinnedMemory`,
the default collation) or pins what the user's collate function made (:class:`Pinning`).
``device="cuda"`` copies batch ``k + 1`` to the device on a side CUDA stream while the training
loop works on batch ``k`` (:class:`Prefetch`); ``record_stream`` tells torch's caching allocator
that the batch is used on the loop's stream. Without CUDA all of this is a no-op (a warning for
an explicit CUDA device).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..pipeline.pipeline import close_iterator
from .structure import map_leaves

__all__ = ["PinnedMemory", "Pinning", "Prefetch", "cuda", "move", "pin", "record", "to_device"]

log = logging.getLogger(__name__)


class PinnedMemory:
    """Pinned batch tensors (torch's caching host allocator reuses them once they are freed):
    with ``pin_memory=True`` a batch is stacked into pinned memory once, not stacked then pinned."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        torch = self.torch
        kind = torch.from_numpy(np.empty(0, dtype)).dtype
        return torch.empty(shape, dtype=kind, pin_memory=True)


class Pinning:
    """Collate, then pin the batch's tensors (when CUDA is there)."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, samples: Any) -> Any:
        return pin(self.collate(samples))


def cuda() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def pin(data: Any) -> Any:
    torch = cuda()
    if torch is None:
        return data
    from torch.utils.data._utils.pin_memory import pin_memory

    return pin_memory(data)  # type: ignore[no-untyped-call]


def move(data: Any, device: Any, torch: Any) -> Any:
    """``data`` with every tensor copied to ``device`` (asynchronously), its structure kept."""
    return map_leaves(data, lambda x: isinstance(x, torch.Tensor), lambda t: t.to(device, non_blocking=True))


def to_device(batches: Iterator[Any], device: Any) -> Iterator[Any]:
    """``batches``, each copied to ``device`` one batch ahead on a side CUDA stream (as is when
    ``device`` is ``None`` or CUDA is missing)."""
    torch = cuda() if device is not None else None
    if torch is None:
        if device is not None and str(device).startswith("cuda"):
            log.warning("device=%r was asked for but CUDA is not available: batches stay on the CPU", device)
        return batches
    return Prefetch(batches, torch, torch.device(device))


class Prefetch:
    """Copies batch ``k + 1`` on a side stream while batch ``k`` is in use."""

    def __init__(self, batches: Iterator[Any], torch: Any, device: Any) -> None:
        self.batches, self.torch, self.device = iter(batches), torch, device
        self.stream = torch.cuda.Stream(device=device)
        self.next: Any = None
        self.done = False
        self.ahead = 0  # batches taken from the loader but not handed out yet (0 or 1)
        self._advance()

    def _advance(self) -> None:
        try:
            host = next(self.batches)
        except StopIteration:
            self.done = True
            self.ahead = 0
            return
        self.ahead = 1
        with self.torch.cuda.stream(self.stream):
            self.next = move(host, self.device, self.torch)

    def __iter__(self) -> Prefetch:
        return self

    def __next__(self) -> Any:
        if self.done:
            raise StopIteration
        self.torch.cuda.current_stream(self.device).wait_stream(self.stream)
        batch = self.next
        record(batch, self.torch)
        self._advance()
        return batch

    def close(self) -> None:
        close_iterator(self.batches)


def record(data: Any, torch: Any) -> None:
    """Tell the caching allocator that ``data`` is used on the current stream now."""
    if isinstance(data, torch.Tensor):
        data.record_stream(torch.cuda.current_stream(data.device))
    elif isinstance(data, dict):
        for v in data.values():
            record(v, torch)
    elif isinstance(data, (list, tuple)):
        for v in data:
            record(v, torch)
