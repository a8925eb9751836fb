"""The iterable dataset over single-sample objects: ``ObjectStream`` (a pipeline that starts with
:class:`~shardstream.readers.objects.ObjectSamples`, with the fluent stages).

::

    ds = ss.ObjectStream("s3://bucket/train/", split="equal", batch_size=64, seed=0)
    ds = ds.decode("rgb8").to_tuple("jpg", "cls").batched(64)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from ..handlers import Handler, reraise_exception
from ..objects import DEFAULT_MAX_BYTES, DEFAULT_WINDOW, Manifest, ObjectReader
from ..pipeline.batch import items_after
from ..pipeline.fluent import FluidInterface
from ..pipeline.pipeline import DataPipeline
from ..readers.objects import ObjectSamples, open_table
from ..shards.world import World
from .policy import SplitPolicy

__all__ = ["ObjectStream"]


class ObjectStream(DataPipeline, FluidInterface):
    """An iterable dataset over a prefix of single-sample objects, with the fluent stages.

    Arguments by concern: listing (``manifest`` to ``manifest_dir``); order and splitting
    (``shuffle`` to ``world``); fetching (``window`` to ``storage_options``).

    Args:
        url: the prefix: ``s3://bucket/prefix/``, a local directory, or ``http(s)://`` with a
            manifest.
        manifest: a key list / JSONL / S3 Inventory CSV path or URL, a list of keys, or a
            :class:`~shardstream.objects.Manifest`; default: list the prefix once.
        manifest_dir: where listings are saved and reused (default: not saved).
        shuffle: a new global permutation of the samples every epoch (default True).
        seed: base seed (default: ``SHARDSTREAM_SEED`` or 0).
        split: ``None`` (every n-th sample per rank and worker), ``"equal"`` (the same
            number of batches on every rank) or ``"exact"`` (every sample once, padded);
            a :class:`SplitPolicy` with one of those modes works too.
        batch_size: with a split, quotas are whole batches of this size.
        world: an explicit ``World`` instead of detection.
        window: requests in flight per process (per DataLoader worker), default 32.
        max_bytes: bytes fetched ahead and not consumed, at most (default 256 MiB).
        ordered: deliver in the permutation's order (default); False delivers as fetched
            (faster with uneven object sizes; the order and resume are then not exact).
        gather: the longest pause, in seconds, the S3 fetch loop takes to gather more answers
            before it wakes the consumer when many requests are in flight (default
            ``objects.fetch_loop.DEFAULT_GATHER``, 2 ms; 0 turns gathering off). Gathering
            trades a little latency for fewer wake-ups; ``benchmarks/bench_objects.py``
            measures it on and off.
        handler: error policy for a sample that cannot be fetched (default: raise).
        storage_options: options for the sources (endpoint, credentials, ...).
    """

    def __init__(
        self,
        url: str,
        *,
        manifest: str | Manifest | Sequence[str] | None = None,
        manifest_dir: str | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        split: str | SplitPolicy | None = None,
        batch_size: int | None = None,
        world: World | None = None,
        window: int = DEFAULT_WINDOW,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ordered: bool = True,
        gather: float | None = None,
        handler: Handler = reraise_exception,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(seed=seed, world=world)
        mode = split.mode if isinstance(split, SplitPolicy) else split
        if isinstance(split, SplitPolicy) and batch_size is None:
            batch_size = split.batch_size
        self.url = url
        table = open_table(url, manifest, storage_options, manifest_dir)
        self.reader = ObjectReader(
            table, storage_options, window=window, max_bytes=max_bytes, ordered=ordered, gather=gather
        )
        self.source_stage = ObjectSamples(
            self.reader, split=mode, batch_size=batch_size or 1, shuffle=shuffle, seed=seed, handler=handler
        )
        self.append(self.source_stage)

    def compose(self, *stages: Any) -> Any:
        return DataPipeline.compose(self, *stages)

    def __repr__(self) -> str:
        return (
            f"ObjectStream(iterable, objects={len(self.reader.table.keys)}, "
            f"split={self.source_stage.split!r}, stages={len(self.pipeline)})"
        )

    @property
    def throttles(self) -> int:
        """503 SlowDown / 429 answers this process has seen (each one retried, never fatal)."""
        return self.reader.throttles

    def fingerprint(self) -> dict[str, Any]:
        keys = self.reader.table.keys
        digest = hashlib.blake2b(repr((len(keys), keys[:1], keys[-1:])).encode(), digest_size=8).hexdigest()
        stage = self.source_stage
        return {**DataPipeline.fingerprint(self), "objects": digest, "seed": self.seed, "split": stage.split}

    def __len__(self) -> int:
        """Items this rank reads per epoch in one process (with ``split=None``, every
        ``world_size``-th object from its rank on, so ranks may differ by one), through the
        stages composed after the source (``.batched(n)``). Loaders with workers count worker by
        worker (:meth:`slot_length`)."""
        if self.size is not None:
            return DataPipeline.__len__(self)
        rank = self.context(0).world.with_worker(0, 1)
        return items_after(self.pipeline[1:], self.source_stage.slot_samples(rank))

    def slot_length(self, world: World) -> int | None:
        """Items the ``(rank, worker)`` slot of ``world`` yields per epoch: its share of the
        listing (:meth:`ObjectSamples.slot_samples`: every n-th sample, or the split's worker
        quota) through the stages after the source, each batching on its own. ``None`` (the
        loader falls back to ``len()``) with ``with_epoch``/``repeat``; a ``with_length`` is the
        rank's (:meth:`DataPipeline.slot_length`). Samples a ``handler`` skips are not foreseen."""
        if self.size is not None or self.repetitions != 1 or self.nsamples > 0:
            return DataPipeline.slot_length(self, world)
        return items_after(self.pipeline[1:], self.source_stage.slot_samples(world))
