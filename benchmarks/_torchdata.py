"""torchdata.nodes 0.11.0 over shardstream's raw samples (a peer of bench_loader and bench_scaling).

torchdata.nodes reads no tar shards of its own: its guide for iterable data ("Migrating to
torchdata.nodes from torch.utils.data", IterableDatasets) wraps the iterable in ``IterableWrapper``
and keeps the reading in the main process, parallelizing only the heavier transforms with
``ParallelMapper``; its getting-started page and its ImageNet benchmark
(``examples/nodes/imagenet_benchmark.py``) use ``method="thread"``, and that benchmark maps whole
batches: ``Batcher`` first, then one ``ParallelMapper`` task per batch that maps its samples and
collates them (``MapAndCollate``), then ``Prefetcher(prefetch_factor=2)`` and ``Loader``. The
source here is shardstream's reader of the same shards (``ss.ShardStream``, raw samples), as every
other row's reader is its own:

* :func:`batch_loader`: the ImageNet benchmark's shape (a task per batch: the images rows);
* :func:`sample_loader`: a task per sample (the getting-started shape, ``ParallelMapper`` on the
  samples, then ``Batcher`` and a ``Mapper`` that collates), optionally with
  ``ParallelMapper(prebatch=k)``, its documented option for small items (one task per ``k``
  samples, unbatched after the map).

torchdata.nodes has no ``close()``: its threads stop when the iterators that own them are
collected (``_ParallelMapperIter.__del__``); :class:`NodesLoader.close` lets go of the loader
and collects, so no thread outlives its row.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["INSTALL", "NodesLoader", "batch_loader", "sample_loader", "unavailable"]

INSTALL = ".venv/bin/pip install -e '.[bench]' (torchdata==0.11.0)"


def unavailable() -> str | None:
    """Why torchdata.nodes cannot run here, or None."""
    try:
        import torchdata.nodes  # noqa: F401
    except ImportError as exc:
        return f"torchdata.nodes is not importable ({exc})"
    return None


class NodesLoader:
    """A ``torchdata.nodes.Loader``: each ``iter()`` is one epoch (the Loader resets its nodes);
    ``close()`` stops its threads."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def close(self) -> None:
        self.loader = None
        gc.collect()  # the mappers' iterators join their threads when collected


class MapAndCollate:
    """A batch of samples mapped one by one, then collated (the ImageNet benchmark's task)."""

    def __init__(self, map_fn: Callable[[Any], Any], collate: Callable[[list[Any]], Any]) -> None:
        self.map_fn, self.collate = map_fn, collate

    def __call__(self, batch: list[Any]) -> Any:
        map_fn = self.map_fn
        return self.collate([map_fn(sample) for sample in batch])


def _default_collate() -> Callable[[list[Any]], Any]:
    from torch.utils.data import default_collate

    return default_collate  # type: ignore[no-any-return]


def batch_loader(
    source: Iterable[Any],
    map_fn: Callable[[Any], Any],
    threads: int,
    batch: int,
    collate: Callable[[list[Any]], Any] | None = None,
) -> NodesLoader:
    """``IterableWrapper(source) -> Batcher(batch) -> ParallelMapper(MapAndCollate, threads,
    "thread") -> Prefetcher(2) -> Loader``; ``collate``: torch's ``default_collate``."""
    import torchdata.nodes as tn

    node: Any = tn.IterableWrapper(source)
    node = tn.Batcher(node, batch_size=batch, drop_last=False)
    task = MapAndCollate(map_fn, collate or _default_collate())
    node = tn.ParallelMapper(node, map_fn=task, num_workers=threads, method="thread", in_order=True)
    node = tn.Prefetcher(node, prefetch_factor=2)
    return NodesLoader(tn.Loader(node))


def sample_loader(
    source: Iterable[Any],
    map_fn: Callable[[Any], Any],
    threads: int,
    batch: int,
    prebatch: int | None = None,
    collate: Callable[[list[Any]], Any] | None = None,
) -> NodesLoader:
    """``IterableWrapper(source) -> ParallelMapper(map_fn, threads, "thread", prebatch=prebatch)
    -> Batcher(batch) -> Mapper(collate) -> Prefetcher(2) -> Loader``."""
    import torchdata.nodes as tn

    node: Any = tn.IterableWrapper(source)
    node = tn.ParallelMapper(
        node, map_fn=map_fn, num_workers=threads, method="thread", in_order=True, prebatch=prebatch
    )
    node = tn.Batcher(node, batch_size=batch, drop_last=False)
    node = tn.Mapper(node, collate or _default_collate())
    node = tn.Prefetcher(node, prefetch_factor=2)
    return NodesLoader(tn.Loader(node))
