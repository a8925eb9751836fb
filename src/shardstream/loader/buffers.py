"""Thread mode's batch buffers: allocated once, reused when the training loop drops a batch.

A batch of 32 256x256 RGB images is 6 MiB. Made in fresh memory every time, each of its pages
is faulted in and zeroed by the kernel on first touch (about 1,500 faults a batch), and unmapped
again when the batch is freed, which in a process with several threads also interrupts the
other threads' cores to flush their TLBs: decoding straight into fresh batches cost clearly more
CPU per JPEG than the same decode into memory already mapped, in an A/B run that no results file
holds (``benchmarks/bench_loader.py`` measures thread mode with the reused buffers). So thread
mode makes its batches in a few buffers that stay mapped, as process mode does with its
shared-memory ring (``shm.py``).

A buffer is lent as a numpy array over it; the batch tensor holds that array (``from_numpy``),
and so does every view of the batch. When the last of them is gone, a finalizer on the array
gives the buffer back, so a batch the training loop keeps (a list of batches, a view of one) is
never overwritten. When every buffer is lent (the loop keeps many batches) ``empty`` answers
``None`` and collation allocates as usual. The lock makes lending and returning safe from any
thread, with or without the GIL.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["ReusedBuffers"]


class _Buffer:
    __slots__ = ("data", "lent")

    def __init__(self, size: int) -> None:
        self.data = np.empty(size, np.uint8)
        self.lent = False


class ReusedBuffers:
    """A :class:`~shardstream.pipeline.batch.BatchMemory` of at most ``budget`` buffers.

    Args:
        budget: buffers kept (batches in the queue, on the pool and in the training loop's hands).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.buffers: list[_Buffer] = []
        # Reentrant: a finalizer can run in this thread while it holds the lock (a batch in a
        # reference cycle collected by an allocation inside empty()).
        self.lock = threading.RLock()
        self.reused = 0  # batches made in a buffer already used
        self.fresh = 0  # batches made elsewhere: every buffer was lent

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A torch tensor of ``shape`` and ``dtype`` over a free buffer, or ``None``."""
        try:
            import torch
        except ImportError:
            return None
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            return None
        with self.lock:
            buf = self._free(nbytes)
            if buf is not None:
                self.reused += 1
            else:
                buf = self._new(nbytes)
                if buf is None:
                    self.fresh += 1
                    return None
            buf.lent = True
        arr: np.ndarray[Any, Any] = np.ndarray(shape, dtype, buffer=buf.data)
        weakref.finalize(arr, self._returned, buf)
        return torch.from_numpy(arr)

    def _free(self, nbytes: int) -> _Buffer | None:
        """The smallest free buffer that holds ``nbytes`` without wasting half of it."""
        best = None
        for buf in self.buffers:
            if not buf.lent and nbytes <= buf.data.nbytes <= 2 * nbytes:
                if best is None or buf.data.nbytes < best.data.nbytes:
                    best = buf
        return best

    def _new(self, nbytes: int) -> _Buffer | None:
        """A new buffer within the budget; when it is spent, one in place of a free buffer of
        another size (the batches changed size), else ``None``."""
        if len(self.buffers) >= self.budget:
            idle = [b for b in self.buffers if not b.lent]
            if not idle:
                return None
            self.buffers.remove(idle[0])
        buf = _Buffer(nbytes)
        self.buffers.append(buf)
        return buf

    def _returned(self, buf: _Buffer) -> None:
        with self.lock:
            buf.lent = False
