"""Reused shared-memory batches for worker processes (``ss.Loader(num_workers=M)``).

A torch DataLoader worker stacks every batch into a fresh shared-memory segment; the main process
maps it, page-faults it in, and unmaps it when the batch dies: per batch of 32 256x256 RGB images
that is 6 MiB of zero-filled pages in the worker and 1,536 page faults in each process. Here each
worker keeps a pool of buffers instead, created once and reused:

* in the worker, :class:`WorkerRing` is the pipeline's :class:`~shardstream.pipeline.batch.BatchMemory`:
  collation stacks a batch's arrays straight into a free buffer (``/dev/shm/shardstream-<token>-
  <pid>-<n>``), and :class:`RingHandOff` replaces each tensor that lives in one by a small
  :class:`RingRef` before the batch crosses the DataLoader's queue;
* in the main process, :class:`MainRing` maps each buffer once (then unlinks its name: nothing is
  left in /dev/shm while the loader runs, and the memory goes when both processes drop it) and
  turns every :class:`RingRef` back into a tensor over the mapping;
* the buffer returns to its worker when the training loop drops the last tensor over it (a
  finalizer clears the buffer's byte in the worker's flag page). A training loop that keeps its
  batches does not stall the workers: when a worker's buffers are all held (more than
  ``prefetch_factor + 3`` batches' worth), its next batches take a fresh segment, torch's way,
  and are counted (:attr:`MainRing.fresh`).
* a tensor that collation did not stack into a buffer (a column of numbers, small arrays, a
  custom collate's tensors) crosses inside the batch's pickle when small (:class:`InlineTensor`,
  counted in :attr:`MainRing.inline`) or is copied into a buffer, not through torch's
  per-tensor file descriptor (only a dtype numpy lacks, or a pool at its budget, still goes
  torch's way, counted in :attr:`MainRing.fresh`).

A buffer has one owner at a time, written in its flag byte: ``FREE`` (the worker may take it),
``WORKER`` (being filled), ``MAIN`` (sent; only the main process moves it back to ``FREE``, after
its last reader is gone). Each side writes a byte only in the state it owns, and a batch crosses
through the DataLoader's queue (a pipe: a full barrier between the two processes), so no lock
spans the processes; the worker's own allocation and finalizers share a lock (no reliance on the
GIL).

Names are removed in every stop path: the main process unlinks each name once it maps it, a
worker unlinks what it created when it exits, and :meth:`MainRing.close` (the loader's close, or
garbage collection) unlinks anything left under the loader's token, a killed worker's included.
Linux only (``/dev/shm``); elsewhere the loader hands batches torch's way.
"""

from __future__ import annotations

import logging
import mmap
import os
import secrets
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.util import Finalize
from pathlib import Path
from typing import Any

import numpy as np

from ..pipeline.batch import use_batch_memory
from .structure import map_leaves

__all__ = [
    "InlineTensor",
    "MainRing",
    "RingHandOff",
    "RingRef",
    "RingWorkers",
    "WorkerRing",
    "ring_directory",
]

log = logging.getLogger(__name__)

FREE, WORKER, MAIN = 0, 1, 2
MAX_BUFFERS = 4096  # one flag byte each: the flag page of a worker
#: A tensor outside the buffers up to this size crosses inside the batch's pickle (see
#: :meth:`WorkerRing._outside`); a larger one is copied into a buffer.
INLINE_MAX = 64 * 1024
_PAGE = mmap.PAGESIZE


def ring_directory() -> str | None:
    """Where the buffers live (``/dev/shm``), or ``None`` where there is none (not Linux)."""
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


def new_token() -> str:
    """A name for one loader's buffers: ``shardstream-<token>-...``."""
    return secrets.token_hex(5)


@dataclass(frozen=True)
class RingRef:
    """A tensor in a worker's buffer, as it crosses to the main process (a few dozen bytes)."""

    pid: int
    buffer: int
    size: int
    offset: int
    dtype: str  # numpy dtype string
    shape: tuple[int, ...]


@dataclass(frozen=True)
class InlineTensor:
    """A small tensor that crosses to the main process by value, inside the batch's pickle."""

    array: np.ndarray[Any, Any]


def _create(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _attach(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _Buffer:
    __slots__ = ("generation", "index", "mm", "path", "ptr", "size")

    def __init__(self, index: int, path: str, size: int) -> None:
        self.index, self.path, self.size = index, path, size
        self.mm = _create(path, size)
        self.generation = 0
        import torch

        # The address torch reports for a tensor over this buffer (its storage's data_ptr).
        self.ptr = torch.frombuffer(self.mm, dtype=torch.uint8, count=1).data_ptr()


class WorkerRing:
    """A worker's pool of reused batch buffers (see the module docstring).

    Args:
        directory: where the buffers live (``/dev/shm``).
        token: the loader's name for its buffers.
        budget: batches' worth of buffers the pool may hold (the largest batch seen so far times
            this); past it, batches take a fresh segment.
    """

    def __init__(self, directory: str, token: str, budget: int) -> None:
        self.prefix = os.path.join(directory, f"shardstream-{token}-{os.getpid()}")
        self.flags: mmap.mmap | bytearray = bytearray(0)  # the flag page, made with the first buffer
        self.budget = budget
        self.buffers: list[_Buffer] = []
        self.by_ptr: dict[int, _Buffer] = {}
        self.largest_batch = 0
        self.lock = threading.RLock()  # a finalizer may run in a thread that holds it
        Finalize(self, _unlink_all, args=(self.prefix, self.buffers), exitpriority=10)

    # -- BatchMemory: called by collation ---------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        import torch

        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes == 0:
            return None
        with self.lock:
            buf = self._free(nbytes) or self._grow(nbytes)
            if buf is None:
                return None
            self.flags[buf.index] = WORKER
            buf.generation += 1
            generation = buf.generation
        arr: np.ndarray[Any, Any] = np.ndarray(shape, dtype, buffer=buf.mm)
        weakref.finalize(arr, self._dropped, buf, generation)
        return torch.from_numpy(arr)

    def _free(self, nbytes: int) -> _Buffer | None:
        best = None
        for buf in self.buffers:
            if nbytes <= buf.size <= 2 * nbytes and self.flags[buf.index] == FREE:
                if best is None or buf.size < best.size:
                    best = buf
        return best

    def _grow(self, nbytes: int) -> _Buffer | None:
        size = -(-nbytes // _PAGE) * _PAGE
        held = sum(b.size for b in self.buffers)
        if len(self.buffers) >= MAX_BUFFERS or (
            self.largest_batch and held + size > self.budget * self.largest_batch
        ):
            return None
        if not self.buffers:
            self.flags = _create(f"{self.prefix}-flags", MAX_BUFFERS)
        buf = _Buffer(len(self.buffers), f"{self.prefix}-{len(self.buffers)}", size)
        self.buffers.append(buf)
        self.by_ptr[buf.ptr] = buf
        return buf

    def _dropped(self, buf: _Buffer, generation: int) -> None:
        """The worker's own tensor over ``buf`` is gone: free it unless it was sent (or reused)."""
        with self.lock:
            if buf.generation == generation and self.flags[buf.index] == WORKER:
                self.flags[buf.index] = FREE

    # -- the hand-off: called on each finished batch ----------------------------------------------
    def hand_off(self, data: Any) -> Any:
        """``data`` with every tensor in one of this pool's buffers replaced by a :class:`RingRef`."""
        import torch

        sent: list[int] = [0]
        out = map_leaves(data, lambda x: isinstance(x, torch.Tensor), lambda t: self._ref(t, sent))
        self.largest_batch = max(self.largest_batch, sent[0])
        return out

    def _ref(self, t: Any, sent: list[int]) -> Any:
        if t.device.type != "cpu" or t.requires_grad or t.is_sparse:
            return t
        buf = self.by_ptr.get(t.untyped_storage().data_ptr())
        if buf is None or not t.is_contiguous():
            return self._outside(t, sent)
        with self.lock:
            self.flags[buf.index] = MAIN
        sent[0] += buf.size
        offset = t.data_ptr() - buf.ptr
        return RingRef(os.getpid(), buf.index, buf.size, offset, t.numpy().dtype.str, tuple(t.shape))

    def _outside(self, t: Any, sent: list[int]) -> Any:
        """A tensor that collation did not stack into a buffer: a column of numbers, arrays under
        the shared-memory threshold, a custom collate's own tensors.

        torch's queue would move its storage into a new shared-memory segment and send the file
        descriptor over a fresh, authenticated socket to the main process: one connection per
        tensor, costly in CPU across the two processes (with a label and a 16-byte payload per
        sample, batches of 32, that hand-off was most of process mode's cost in an A/B run that
        no results file holds; ``benchmarks/bench_loader.py``'s tiny section measures process
        mode as it is). A small tensor crosses inside the batch's pickle instead; a larger one is copied
        into a buffer of the pool (what torch's segment would cost, without the socket).
        """
        try:
            array = t.numpy()
        except (TypeError, RuntimeError):  # no numpy dtype (bfloat16, ...): torch's way
            return t
        if array.nbytes <= INLINE_MAX:
            return InlineTensor(array)
        out = self.empty(tuple(array.shape), array.dtype)
        if out is None:  # the pool is at its budget: torch's way
            return t
        out.numpy()[...] = array
        return self._ref(out, sent)


def _unlink_all(prefix: str, buffers: list[_Buffer]) -> None:
    _unlink(f"{prefix}-flags")
    for buf in buffers:
        _unlink(buf.path)


_worker_ring: list[WorkerRing] = []


class RingWorkers:
    """Picklable part of a ``worker_init_fn``: give the worker process its buffer pool."""

    def __init__(self, directory: str, token: str, budget: int) -> None:
        self.directory, self.token, self.budget = directory, token, budget

    def __call__(self, worker_id: int) -> None:
        ring = WorkerRing(self.directory, self.token, self.budget)
        _worker_ring[:] = [ring]
        use_batch_memory(ring)


class RingHandOff:
    """Picklable collate wrapper: collate, then hand the batch's buffers to the main process."""

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, data: Any) -> Any:
        out = self.collate(data)
        return _worker_ring[0].hand_off(out) if _worker_ring else out


class MainRing:
    """The main process's side: maps workers' buffers once and makes tensors over them.

    Args:
        directory: where the workers' buffers live.
        token: the loader's name for its buffers.
        pin: copy each batch into pinned memory (and give the buffer back at once) instead of
            handing out tensors over the buffers.
    """

    def __init__(self, directory: str, token: str, pin: bool = False) -> None:
        self.prefix = os.path.join(directory, f"shardstream-{token}-")
        self.pin = pin
        self.maps: dict[tuple[int, int], mmap.mmap] = {}
        self.flags: dict[int, mmap.mmap] = {}
        self.held: dict[tuple[int, int], int] = {}
        self.lock = threading.RLock()  # a finalizer may run in a thread that holds it
        self.batches = 0  # batches that came through the buffers
        self.inline = 0  # small tensors that came inside a batch's pickle
        self.fresh = 0  # tensors that came torch's way (a fresh segment and a descriptor each)
        weakref.finalize(self, _unlink_prefix, self.prefix)

    def take(self, data: Any) -> Any:
        """``data`` with every :class:`RingRef` turned into a tensor."""
        import torch

        found = [False]

        def tensor(ref: Any) -> Any:
            if type(ref) is RingRef:
                found[0] = True
                return self._tensor(ref, torch)
            if type(ref) is InlineTensor:
                self.inline += 1
                small = torch.from_numpy(ref.array)
                return small.pin_memory() if self.pin else small
            self.fresh += 1
            return ref

        out = map_leaves(data, lambda x: isinstance(x, (RingRef, InlineTensor, torch.Tensor)), tensor)
        self.batches += found[0]
        return out

    def _tensor(self, ref: RingRef, torch: Any) -> Any:
        key = (ref.pid, ref.buffer)
        with self.lock:
            mm = self.maps.get(key)
            if mm is None:
                mm = self.maps[key] = self._map(f"{self.prefix}{ref.pid}-{ref.buffer}", ref.size)
                if ref.pid not in self.flags:
                    self.flags[ref.pid] = self._map(f"{self.prefix}{ref.pid}-flags", MAX_BUFFERS)
            self.held[key] = self.held.get(key, 0) + 1
        arr: np.ndarray[Any, Any] = np.ndarray(ref.shape, np.dtype(ref.dtype), buffer=mm, offset=ref.offset)
        weakref.finalize(arr, self._release, key)
        view = torch.from_numpy(arr)
        if not self.pin:
            return view
        pinned = torch.empty(view.shape, dtype=view.dtype, pin_memory=True)
        pinned.copy_(view)
        return pinned  # the view (and with it the buffer) is dropped here

    @staticmethod
    def _map(path: str, size: int) -> mmap.mmap:
        mm = _attach(path, size)
        _unlink(path)  # both processes have it mapped: the name is no longer needed
        return mm

    def _release(self, key: tuple[int, int]) -> None:
        with self.lock:
            n = self.held[key] - 1
            if n:
                self.held[key] = n
                return
            del self.held[key]
            flags = self.flags.get(key[0])
        if flags is not None and not flags.closed:
            flags[key[1]] = FREE

    def forget_exited(self) -> None:
        """Drop the mappings of workers that exited (a tensor still in use keeps its own mapping
        alive): called when an epoch starts, for loaders whose workers do not persist."""
        with self.lock:
            gone = {pid for pid in self.flags if not os.path.exists(f"/proc/{pid}")}
            for key in [k for k in self.maps if k[0] in gone]:
                del self.maps[key]
            for pid in gone:
                del self.flags[pid]

    def forget(self, pids: list[int]) -> None:
        """Workers that were ended at once (``_heal.py``): unlink the names they left and drop
        their mappings (a tensor still in use keeps its own)."""
        with self.lock:
            for key in [k for k in self.maps if k[0] in pids]:
                del self.maps[key]
            for pid in pids:
                self.flags.pop(pid, None)
        for pid in pids:
            _unlink_prefix(f"{self.prefix}{pid}-")

    def close(self) -> None:
        """Unlink every name left under this loader's token (a killed worker's included)."""
        _unlink_prefix(self.prefix)


def _unlink_prefix(prefix: str) -> None:
    directory, stem = os.path.split(prefix)
    try:
        names = [p.name for p in Path(directory).iterdir() if p.name.startswith(stem)]
    except OSError:
        return
    for name in names:
        _unlink(os.path.join(directory, name))
