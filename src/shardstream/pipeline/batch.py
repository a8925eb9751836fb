"""Batching stages and the default collation function."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from ..decoders.deferred import DeferredArray
from .base import Node, RunContext, Stage, StateDict
from .iterable import in_worker

__all__ = [
    "BatchMemory",
    "Batched",
    "Expand",
    "batched",
    "converted",
    "default_collation_fn",
    "items_after",
    "listed",
    "unbatched",
    "unlisted",
    "use_batch_memory",
]

Collate = Callable[[list[Any]], Any]
#: Runs ``fn(i)`` for every ``i`` in ``range(n)``, possibly on several threads, returning when
#: all have ended (``Threads.spread``): how a loader's collation fills a batch's rows.
Spread = Callable[[int, Callable[[int], None]], None]

# Below this size per sample the shared-memory setup costs more than the copy it saves.
_SHARED_MIN_BYTES = 4096
#: Values that torch's ``default_convert`` returns as they are.
_PLAIN = frozenset({bytes, str, int, float, bool, type(None)})


class BatchMemory(Protocol):
    """Where a worker process stacks its batches' arrays (installed by a loader, see
    :func:`use_batch_memory`)."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A contiguous torch tensor of ``shape`` and ``dtype`` to stack a batch's arrays into
        (shared with the loader's main process in a worker, pinned in one process), or ``None``
        to stack them the usual way this time."""
        ...


_memory: list[BatchMemory] = []


def use_batch_memory(memory: BatchMemory | None) -> None:
    """In a worker process: stack batches' large arrays into ``memory`` (``None``: a fresh
    shared-memory segment per array, torch's way). ``ss.Loader`` installs its reused buffers."""
    _memory[:] = [memory] if memory is not None else []


def _shared_out(n: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
    """A ``(n, *shape)`` shared-memory torch tensor for a batch made inside a DataLoader worker.

    A batch leaving a worker is moved to shared memory by torch's queue, which copies it (and
    page-faults the new mapping). Making the batch in shared memory directly, as torch's own
    ``default_collate`` does in workers, saves that copy of every batch. The consumer sees the
    same thing either way: ``default_convert`` would turn the numpy batch into a tensor. The
    loader's reused buffers (:func:`use_batch_memory`) come first.
    """
    import torch

    if _memory:
        out = _memory[0].empty((n, *shape), dtype)
        if out is not None:
            return out
    torch_dtype = torch.from_numpy(np.empty(0, dtype)).dtype
    nbytes = n * int(np.prod(shape)) * dtype.itemsize
    storage = torch.UntypedStorage._new_shared(nbytes)  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=torch_dtype).set_(storage).view(n, *shape)


def _batch_out(
    n: int, shape: tuple[int, ...], dtype: np.dtype[Any], memory: BatchMemory | None
) -> tuple[Any, np.ndarray[Any, Any]]:
    """The batch to write ``n`` rows into, and a numpy view of it: a tensor from ``memory``
    (pinned), a shared-memory tensor in a DataLoader worker, else a new numpy array."""
    if memory is not None:
        out = memory.empty((n, *shape), dtype)
        if out is not None:
            return out, out.numpy()
    elif in_worker():
        out = _shared_out(n, shape, dtype)
        return out, out.numpy()
    array = np.empty((n, *shape), dtype)
    return array, array


def _fill_rows(values: list[Any], rows: np.ndarray[Any, Any], spread: Spread | None) -> None:
    """Each value into its row: a deferred one decoded there, an array copied in; the rows spread
    over the loader's threads when it gives ``spread`` (a decode is ~0.3 ms a row; a column of
    plain arrays is copied by one ``np.stack``, which a Python call per row would slow)."""

    def fill(i: int) -> None:
        value = values[i]
        if type(value) is DeferredArray:
            value.fill(rows[i])
        else:
            rows[i][...] = value

    if spread is not None:
        spread(len(values), fill)
    else:
        for i in range(len(values)):
            fill(i)


def _fill_column(values: list[Any], memory: BatchMemory | None, spread: Spread | None) -> Any:
    """A column holding :class:`~shardstream.decoders.deferred.DeferredArray` values, as one
    batch: each is decoded straight into its row (arrays beside them are copied in). ``None``
    when the values differ in shape or dtype (the caller makes them arrays)."""
    first = values[0]
    shape, dtype = tuple(first.shape), np.dtype(first.dtype)
    if dtype.kind in "biuf" and all(tuple(v.shape) == shape and v.dtype == dtype for v in values):
        out, rows = _batch_out(len(values), shape, dtype, memory)
        _fill_rows(values, rows, spread)
        return out
    return None


def _combine(
    values: list[Any],
    combine_tensors: bool,
    combine_scalars: bool,
    memory: BatchMemory | None = None,
    spread: Spread | None = None,
) -> Any:
    first = values[0]
    if combine_scalars and isinstance(first, (numbers.Number, np.generic)) and not isinstance(first, bool):
        return np.array(values)
    if type(first) is DeferredArray or (
        isinstance(first, np.ndarray) and any(type(v) is DeferredArray for v in values)
    ):
        filled = _fill_column(values, memory, spread) if combine_tensors else None
        if filled is not None:
            return filled
        values = [v.array() if type(v) is DeferredArray else v for v in values]
        first = values[0]
    if combine_tensors:
        if isinstance(first, np.ndarray):
            if (
                first.dtype.kind in "biuf"
                and (memory is not None or first.nbytes >= _SHARED_MIN_BYTES)
                and all(v.shape == first.shape and v.dtype == first.dtype for v in values)
            ):
                if memory is not None or in_worker():
                    out, rows = _batch_out(len(values), first.shape, first.dtype, memory)
                    np.stack(values, out=rows)
                    return out
            return np.stack(values)
        if type(first).__module__ == "torch" and type(first).__name__ == "Tensor":
            import torch

            return torch.stack(values)
    return list(values)


def default_collation_fn(
    samples: Sequence[Any],
    combine_tensors: bool = True,
    combine_scalars: bool = True,
    *,
    memory: BatchMemory | None = None,
    spread: Spread | None = None,
) -> Any:
    """Collate a list of tuples (or dicts) into one tuple (dict) of batched columns.

    Numbers become a numpy array, numpy arrays and torch tensors are stacked, anything else
    (strings, bytes, PIL images) becomes a list. Inside a DataLoader worker, large numeric
    arrays are stacked into a shared-memory torch tensor instead of a numpy array (the loader
    would convert the numpy batch to a tensor anyway, with one more copy). With ``memory``,
    numeric arrays are stacked into the tensors it gives (pinned memory, for one). With
    ``spread`` (a loader's ``Threads.spread``), deferred values (``decoders/deferred.py``) are
    decoded into their rows by the loader's idle threads too.
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
        return {
            k: _combine([s[k] for s in samples], combine_tensors, combine_scalars, memory, spread)
            for k in keys
        }
    if isinstance(first, (list, tuple)):
        try:  # the columns, cut in C (a Python loop per column costs more than the rest)
            columns = list(zip(*samples, strict=True))
        except ValueError:
            raise ValueError("cannot collate tuples of different lengths") from None
        return tuple(
            _combine(list(column), combine_tensors, combine_scalars, memory, spread) for column in columns
        )
    return _combine(list(samples), combine_tensors, combine_scalars, memory, spread)


def converted(batch: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(batch)``, where ``convert`` is torch's ``default_convert`` (numpy arrays to
    tensors) and ``batch`` one of :func:`default_collation_fn`: the same result, but a column
    of values that ``convert`` leaves as they are (bytes, str, numbers) is copied whole instead
    of calling ``convert`` on every value, which took most of a batch of small samples' making."""
    kind = type(batch)
    if kind is tuple:
        return [_converted_column(column, convert) for column in batch]  # default_convert's list
    if kind is dict:
        return {key: _converted_column(column, convert) for key, column in batch.items()}
    return _converted_column(batch, convert)


def _converted_column(column: Any, convert: Callable[[Any], Any]) -> Any:
    if type(column) is list and all(type(value) in _PLAIN for value in column):
        return list(column)
    return convert(column)


class _BatchNode(Node):
    def __init__(self, stage: Batched, upstream: Node) -> None:
        super().__init__(upstream)
        self.stage = stage
        self.up_tell = upstream.tell
        self.positions: list[Any] = []
        if upstream.tell is not None:
            self.tell = self._tell
        self._it = self._run()

    def _tell(self) -> list[Any]:
        return self.positions

    def state_dict(self) -> StateDict:
        return {}  # the state is taken between batches: no partial batch is held then

    def item_at(self, token: Any) -> Any:
        assert self.upstream is not None
        items = self.upstream.items_at(list(token))
        collate = self.stage.collation_fn
        return collate(items) if collate is not None else items

    def _run(self) -> Iterator[Any]:
        assert self.upstream is not None
        size, collate, tell = self.stage.batchsize, self.stage.collation_fn, self.up_tell
        batch: list[Any] = []
        positions: list[Any] = []
        for sample in self.upstream:
            batch.append(sample)
            if tell is not None:
                positions.append(tell())
            if len(batch) == size:
                self.positions = positions
                yield collate(batch) if collate is not None else batch
                batch, positions = [], []
        if batch and self.stage.partial:
            self.positions = positions
            yield collate(batch) if collate is not None else batch


class Batched(Stage):
    """Group samples into batches of ``batchsize`` and collate them.

    Between two batches nothing is pending, so the stage keeps no state of its own; a batch's
    position (for a shuffle or unbatch after it) is the list of its samples' positions.

    Args:
        batchsize: samples per batch.
        collation_fn: list of samples -> batch (default :func:`default_collation_fn`; None
            yields plain lists).
        partial: yield the last, smaller batch (default True).
    """

    kind = "batch"
    label = "batched"

    def __init__(
        self, batchsize: int = 20, collation_fn: Collate | None = default_collation_fn, partial: bool = True
    ) -> None:
        if batchsize < 1:
            raise ValueError(f"batchsize={batchsize} must be at least 1")
        self.batchsize = batchsize
        self.collation_fn = collation_fn
        self.partial = partial

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("batched needs an upstream stage")
        return _BatchNode(self, upstream)


def items_after(stages: Sequence[Any], n: int) -> int:
    """Items that ``n`` items become through ``stages`` in one process: each :class:`Batched`
    makes batches of them (the last one partial, or dropped); other stages keep the count."""
    for stage in stages:
        if isinstance(stage, Batched):
            n = -(-n // stage.batchsize) if stage.partial else n // stage.batchsize
    return n


def batched(
    batchsize: int = 20, collation_fn: Collate | None = default_collation_fn, partial: bool = True
) -> Batched:
    return Batched(batchsize, collation_fn, partial)


def listed(batchsize: int = 20, partial: bool = True) -> Batched:
    """Batches as plain lists of samples (no collation)."""
    return Batched(batchsize, None, partial)


class _ExpandNode(Node):
    def __init__(self, stage: Expand, upstream: Node, state: StateDict | None) -> None:
        super().__init__(upstream)
        state = state or {}
        self.stage = stage
        self.token: Any = state.get("token")
        self.next = int(state.get("next", 0))
        self.count = 0
        self.stateful = upstream.tell is not None
        pending: list[Any] = []
        if self.token is not None:
            pending = stage.expand(upstream.item_at(self.token))
            self.count = len(pending)
        if upstream.tell is not None:
            self.tell = self._tell
        self._it = self._run(pending)

    def _tell(self) -> list[Any]:
        return [self.token, self.next - 1]

    def item_at(self, token: Any) -> Any:
        assert self.upstream is not None
        return self.stage.expand(self.upstream.item_at(token[0]))[token[1]]

    def state_dict(self) -> StateDict:
        if self.token is None or self.next >= self.count:
            return {}
        return {"token": self.token, "next": self.next}

    def _run(self, pending: list[Any]) -> Iterator[Any]:
        assert self.upstream is not None
        expand, tell = self.stage.expand, self.upstream.tell
        if pending:
            while self.next < len(pending):
                self.next += 1
                yield pending[self.next - 1]
        for item in self.upstream:
            parts = expand(item)
            self.token = tell() if tell is not None else None
            self.next, self.count = 0, len(parts)
            for part in parts:
                self.next += 1
                yield part
        self.token = None


class Expand(Stage):
    """A one-to-many stage: ``expand(item)`` returns the items to yield in its place.

    Its state is the position of the item being expanded and how many of its parts were
    yielded; restoring produces that item again (``item_at``) and yields the rest.
    """

    kind = "batch"
    label = "unbatched"

    def expand(self, item: Any) -> list[Any]:
        raise NotImplementedError

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError(f"{type(self).__name__} needs an upstream stage")
        return _ExpandNode(self, upstream, state)


class _Unbatched(Expand):
    def expand(self, batch: Any) -> list[Any]:
        if isinstance(batch, dict):
            lengths = {len(v) for v in batch.values()}
            if len(lengths) != 1:
                raise ValueError(f"cannot unbatch a dict whose columns have lengths {sorted(lengths)}")
            keys = list(batch)
            return [{k: batch[k][i] for k in keys} for i in range(lengths.pop())]
        if isinstance(batch, (list, tuple)):
            return list(zip(*batch, strict=True))
        raise ValueError(f"cannot unbatch a {type(batch).__name__}; expected a tuple or dict batch")


class _Unlisted(Expand):
    def expand(self, batch: Any) -> list[Any]:
        return list(batch)


def unbatched() -> Stage:
    """Split collated batches back into samples."""
    return _Unbatched()


def unlisted() -> Stage:
    """Split list batches back into samples."""
    return _Unlisted()
