"""The native dataset: shards in, samples out, configured by a few typed value objects.

::

    import shardstream as ss

    ds = (
        ss.Dataset("s3://bucket/train-{000000..000999}.tar",
                   split=ss.SplitPolicy("equal", batch_size=64),
                   cache=ss.CachePolicy("/scratch/cache", "500G"))
        .shuffle(1000).decode("rgb8").to_tuple("jpg", "cls").batched(64)
    )

``Dataset`` only assembles stages that exist on their own (a shard list, its shuffle and split,
or the epoch planner; a reader with a format and a source, cached or not); WebDataset's
``WebDataset`` class is a thin translation of its arguments onto this one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from ..cache import cached_source
from ..config import UNSET, Unset, read_settings
from ..handlers import Handler, reraise_exception
from ..pipeline.batch import items_after
from ..pipeline.fluent import FluidInterface
from ..pipeline.pipeline import DataPipeline
from ..readers.empty import CheckEmpty
from ..readers.planned import PlannedSamples
from ..readers.read_shards import ReadShards, ShardFormat
from ..readers.shardlists import ResampledShards, ShardShuffle, SimpleShardList
from ..shards.plan import PLAN_VERSION, worker_quotas
from ..shards.spec import expand_urls
from ..shards.world import World
from ..sources import SchemeRouter, Source, check_pipe
from .policy import CachePolicy, SplitPolicy

__all__ = ["Dataset", "make_source"]


def make_source(
    cache: CachePolicy | None,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
    source: Source | None = None,
    urls: Sequence[str] | None = None,
) -> Source:
    """The source shards are read from: ``source`` (default: every URL scheme with
    ``storage_options``, checked against the schemes of ``urls``), behind the cache when
    ``cache`` is enabled. Cache tiers nest: the first (fastest) tier fills from the second, and
    so on; only the last tier reads the store."""
    inner = source if source is not None else SchemeRouter(storage_options, allow_pipe, urls=urls)
    if cache is None or not cache.enabled:
        return inner
    for directory, size in reversed(list(zip(cache.tiers, cache.tier_sizes, strict=True))):
        inner = cached_source(
            inner,
            cache_dir=directory,
            cache_size=size,
            url_to_name=cache.url_to_name,
            **dict(cache.options or {}),
        )
    return inner


class Dataset(DataPipeline, FluidInterface):
    """Samples from shards, with shard order, splitting, reading and caching chosen by value objects.

    Arguments by concern: order and splitting (``split`` to ``world``); reading (``format`` to
    ``read_ahead``); telemetry (``telemetry``); sources (``cache`` to ``source``).

    Args:
        urls: a shard spec (``"data-{000000..000099}.tar"``, ``::``-joined specs) or a list of URLs.
        split: a :class:`SplitPolicy` or its mode name (default ``"shards"``: every rank and
            worker reads every n-th shard). ``"equal"`` gives every rank the same number of
            batches; ``"exact"`` reads every sample once (evaluation); ``"resampled"`` draws
            shards with replacement.
        shuffle_shards: permute the shard list every epoch, identically on every rank
            (default True).
        seed: base seed of every shuffle in this dataset (default: ``SHARDSTREAM_SEED`` or 0).
        world: an explicit ``World(rank=..., world_size=...)`` instead of detection; it
            reaches every stage (planner, splitters, shuffles).
        format: the shard format (default: WebDataset tar).
        handler: error policy for shard errors (default: raise).
        empty_check: raise a clear error when an epoch yields no sample (default True).
        log_shards: log every shard as it is opened (INFO, ``shardstream.readers.read_shards``).
        read_ahead: open the next object-store or ``http(s)://`` shard while this one is read
            (default True; not through the cache). See :class:`ReadShards`.
        telemetry: measure time per stage, throughput and whether the consumer waits for
            data (see :meth:`stats`); default ``SHARDSTREAM_TELEMETRY`` (off).
        cache: a :class:`CachePolicy`; default from ``SHARDSTREAM_CACHE_DIR``/``_SIZE``,
            ``None`` for no cache.
        storage_options: options for the sources (endpoint, credentials, anon, ...).
        allow_pipe: allow ``pipe:`` URLs (they run shell commands).
        source: a :class:`~shardstream.sources.Source` to open shards with (replaces the
            scheme registry; the cache still wraps it).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        split: SplitPolicy | str = "shards",
        shuffle_shards: bool = True,
        seed: int | None = None,
        world: World | None = None,
        format: ShardFormat | None = None,  # noqa: A002
        handler: Handler = reraise_exception,
        empty_check: bool = True,
        cache: CachePolicy | None | Unset = UNSET,
        storage_options: Mapping[str, Any] | None = None,
        allow_pipe: bool = False,
        source: Source | None = None,
        log_shards: bool = False,
        read_ahead: bool = True,
        telemetry: bool | None = None,
    ) -> None:
        super().__init__(seed=seed, world=world, telemetry=telemetry)
        self.urls = expand_urls(urls)
        self._shards_digest: str | None = None  # see fingerprint()
        allow_pipe = allow_pipe or read_settings().allow_pipe  # SHARDSTREAM_ALLOW_PIPE=1
        if source is None and not allow_pipe:
            for url in self.urls:  # refuse pipe: now, not at the first read inside a worker
                if url[:5].lower() == "pipe:":
                    check_pipe(url, False)
        self.split = SplitPolicy(split) if isinstance(split, str) else split
        policy = CachePolicy.from_env() if isinstance(cache, Unset) else cache
        self.source = make_source(policy, storage_options, allow_pipe, source, self.urls)
        self.planned: PlannedSamples | None = None
        if self.split.planned:
            self.planned = PlannedSamples(
                self.urls,
                mode=self.split.mode,
                batch_size=self.split.batch_size,
                epoch_size=self.split.epoch_size,
                granularity=self.split.granularity,
                shuffle=shuffle_shards,
                format=format,
                source=self.source,
                handler=handler,
                index=self.split.index,
                count_cache=self.split.count_cache,
                storage_options=dict(storage_options or {}),
                read_ahead=read_ahead,
            )
            self.append(self.planned)
            return
        split = self.split
        if split.mode == "resampled":  # endless: each rank and worker draws its own shards
            self.append(ResampledShards(self.urls))
        else:
            self.append(SimpleShardList(self.urls))
            if shuffle_shards:
                self.append(ShardShuffle())
            if split.node_splitter is not None:
                self.append(split.node_splitter)
        if split.worker_splitter is not None:
            self.append(split.worker_splitter)
        self.append(ReadShards(format, self.source, handler, log_shards=log_shards, read_ahead=read_ahead))
        if empty_check:
            self.append(CheckEmpty(len(self.urls)))

    def compose(self, *stages: Any) -> Any:
        return DataPipeline.compose(self, *stages)

    def fingerprint(self) -> dict[str, Any]:
        """Stages plus the shard list (and counts), seed and split a state depends on."""
        # The shard list and counts are fixed at construction: hashed once (0.2 s at a million
        # shards; loaders take a fingerprint with every state_dict()).
        digest = self._shards_digest
        if digest is None:
            # (the counts as a list, so the digest is the one states saved before were checked with)
            planned = self.planned.counts if self.planned is not None else None
            counts = planned.tolist() if planned is not None else None
            digest = hashlib.blake2b(repr((self.urls, counts)).encode(), digest_size=8).hexdigest()
            self._shards_digest = digest
        return {
            **DataPipeline.fingerprint(self),
            "shards": digest,
            "nshards": len(self.urls),
            "seed": self.seed,
            "split": self.split.mode,
            "split_batch": self.split.batch_size,
            **({"plan": PLAN_VERSION} if self.planned is not None else {}),
        }

    def __len__(self) -> int:
        """Items per rank per epoch: known with a planned split (or after ``with_length``).

        Batching stages composed after the planner are taken into account, so
        ``len(DataLoader(ds.batched(b), batch_size=None))`` is the number of batches.
        """
        if self.size is None and self.planned is not None:
            n = self.planned.samples_per_rank(self.context(0).world.world_size)
            return items_after(self.pipeline[1:], n)
        return DataPipeline.__len__(self)

    def slot_length(self, world: World) -> int | None:
        """Items the ``(rank, worker)`` slot of ``world`` yields per epoch. With a planned split:
        the worker's quota (whole batches of the split's ``batch_size``, the same on every rank;
        :func:`~shardstream.shards.plan.worker_quotas`) through the stages after the planner."""
        planned = self.planned
        if self.size is not None or planned is None or self.repetitions != 1 or self.nsamples > 0:
            return DataPipeline.slot_length(self, world)
        batches = planned.batches_per_rank(world.world_size)
        quota = worker_quotas(batches, world.num_workers, planned.batch_size)[world.worker]
        return items_after(self.pipeline[1:], quota)
