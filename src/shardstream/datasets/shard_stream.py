"""The native dataset: shards in, samples out, configured by a few typed value objects.

::

    import shardstream as ss

    ds = (
        ss.ShardStream("s3://bucket/train-{000000..000999}.tar",
                   split=ss.SplitPolicy("equal", batch_size=64),
                   cache=ss.CachePolicy("/scratch/cache", "500G"))
        .shuffle(1000).decode("rgb8").to_tuple("jpg", "cls").batched(64)
    )

``ShardStream`` only assembles stages that exist on their own (a shard list, its shuffle and split,
or the epoch planner; a reader with a format and a source, cached or not). Its spec goes through
the one resolver every front door uses (:mod:`.specs`), its options through the one translation
WebDataset's ``WebDataset`` class uses too (:mod:`.options`), and its default split is chosen
from the world (:func:`.policy.default_split`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
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
from ..shards.world import World
from ..sources import SchemeRouter, Source, check_pipe
from .options import translate
from .policy import CachePolicy, SplitPolicy, default_split
from .specs import Spec, check_shards, resolve_shards

__all__ = ["ShardStream", "make_source"]


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


class ShardStream(DataPipeline, FluidInterface):
    """An iterable dataset over tar shards: shard order, split, reading and cache set by value objects.

    Arguments by concern: order and splitting (``split`` to ``world``); reading (``format`` to
    ``read_ahead``); telemetry (``telemetry``); sources (``cache`` to ``source``).

    WebDataset's spellings, accepted as well (:mod:`shardstream.datasets.options`; giving
    both spellings of one option raises): ``shardshuffle=`` (``shuffle_shards``),
    ``cache_dir=``/``cache_size=``/``url_to_name=`` (``cache``), ``nodesplitter=``/
    ``workersplitter=`` (``split="shards"``'s splitters), ``resampled=True``
    (``split="resampled"``, endless), ``verbose=`` (``log_shards``), ``select_files=``/
    ``rename_files=`` (``format``).

    Args:
        urls: a shard spec: a brace pattern (``"data-{000000..000099}.tar"``), a list, a local
            directory or glob, a store prefix ending in ``/`` (``"s3://bucket/train/"``), an
            ``_info.json``, or ``::``-joined specs (:mod:`shardstream.datasets.specs`). Resolved
            once, here, and checked: local shards, and remote ones an ``_info.json`` beside them
            lists, must exist, or the error says how many of how many are missing (remote shards
            without an index are not checked: a request per shard would cost more than it saves).
        split: a :class:`SplitPolicy` or its mode name. ``"equal"`` gives every rank the same
            number of batches; ``"exact"`` reads every sample once (evaluation);
            ``"resampled"`` draws shards with replacement; ``"shards"`` gives every rank and
            worker every n-th shard (WebDataset's way: ranks get different batch counts when
            shard sizes differ). Default, chosen from the world (``world=``, else the process
            group or the launcher's variables) when the dataset is built: one rank,
            ``"shards"`` (it only divides the shards among DataLoader workers, and refuses at
            the start of an epoch a world of several ranks found then); several ranks,
            ``"equal"`` when the sample counts are known cheaply (local shards, or an
            ``_info.json`` beside them), else a :class:`ConfigurationError` saying what to
            choose. With a mode name, ``batch_size=``, ``epoch_size=``, ``granularity=``,
            ``index=`` and ``count_cache=`` fill the :class:`SplitPolicy`.
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
            scheme registry; the cache still wraps it). Its URLs are not checked here.
    """

    def __init__(
        self,
        urls: Spec,
        *,
        split: SplitPolicy | str | None | Unset = UNSET,
        shuffle_shards: bool | Unset = UNSET,
        seed: int | None = None,
        world: World | None = None,
        format: ShardFormat | None | Unset = UNSET,  # noqa: A002
        handler: Handler = reraise_exception,
        empty_check: bool = True,
        cache: CachePolicy | None | Unset = UNSET,
        storage_options: Mapping[str, Any] | None = None,
        allow_pipe: bool = False,
        source: Source | None = None,
        log_shards: bool | Unset = UNSET,
        read_ahead: bool = True,
        telemetry: bool | None = None,
        batch_size: int | None | Unset = UNSET,
        epoch_size: int | None | Unset = UNSET,
        granularity: str | Unset = UNSET,
        index: str | Mapping[str, int] | None | Unset = UNSET,
        count_cache: str | None | Unset = UNSET,
        shardshuffle: bool | int | None | Unset = UNSET,
        cache_dir: str | Sequence[str] | None | Unset = UNSET,
        cache_size: int | str | None | Unset = UNSET,
        url_to_name: Callable[[str], str] | None | Unset = UNSET,
        nodesplitter: Callable[..., Any] | None | Unset = UNSET,
        workersplitter: Callable[..., Any] | None | Unset = UNSET,
        resampled: bool | Unset = UNSET,
        verbose: bool | Unset = UNSET,
        select_files: Callable[[str], bool] | None | Unset = UNSET,
        rename_files: Callable[[str], str] | None | Unset = UNSET,
    ) -> None:
        super().__init__(seed=seed, world=world, telemetry=telemetry)
        options = translate(
            split=split,
            shuffle_shards=shuffle_shards,
            cache=cache,
            log_shards=log_shards,
            format=format,
            batch_size=batch_size,
            epoch_size=epoch_size,
            granularity=granularity,
            index=index,
            count_cache=count_cache,
            nodesplitter=nodesplitter,
            workersplitter=workersplitter,
            resampled=resampled,
            shardshuffle=shardshuffle,
            cache_dir=cache_dir,
            cache_size=cache_size,
            url_to_name=url_to_name,
            verbose=verbose,
            select_files=select_files,
            rename_files=rename_files,
        )
        storage = dict(storage_options or {})
        self.urls = resolve_shards(urls, storage_options=storage, check=False)
        self._shards_digest: str | None = None  # see fingerprint()
        allow_pipe = allow_pipe or read_settings().allow_pipe  # SHARDSTREAM_ALLOW_PIPE=1
        if source is None and not allow_pipe:
            for url in self.urls:  # refuse pipe: now, not at the first read inside a worker
                if url[:5].lower() == "pipe:":
                    check_pipe(url, False)
        # Missing shards fail here, before the first sample (a source of one's own decides
        # what its URLs name: not checked).
        counts_known = source is None and check_shards(self.urls, urls, storage_options=storage)
        if options.split is None:
            ranks = World.current(override=world).world_size
            self.split = default_split(ranks, counts_known, self.urls[0].rpartition("/")[0] + "/")
        else:
            self.split = options.split
        shuffle_shards = options.shuffle_shards if options.shuffle_shards is not None else True
        fmt = options.format
        policy = CachePolicy.from_env() if isinstance(options.cache, Unset) else options.cache
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
                format=fmt,
                source=self.source,
                handler=handler,
                index=self.split.index,
                count_cache=self.split.count_cache,
                storage_options=storage,
                read_ahead=read_ahead,
            )
            self.append(self.planned)
            return
        split_policy = self.split
        if split_policy.mode == "resampled":  # endless: each rank and worker draws its own shards
            self.append(ResampledShards(self.urls))
        else:
            self.append(SimpleShardList(self.urls))
            if shuffle_shards:
                self.append(ShardShuffle())
            if split_policy.node_splitter is not None:
                self.append(split_policy.node_splitter)
        if split_policy.worker_splitter is not None:
            self.append(split_policy.worker_splitter)
        self.append(
            ReadShards(fmt, self.source, handler, log_shards=options.log_shards, read_ahead=read_ahead)
        )
        if empty_check:
            self.append(CheckEmpty(len(self.urls)))

    def compose(self, *stages: Any) -> Any:
        return DataPipeline.compose(self, *stages)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(iterable, shards={len(self.urls)}, split={self.split.mode!r}, "
            f"stages={len(self.pipeline)})"
        )

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
        if self.size is None:
            raise TypeError(
                f"this dataset's length is unknown: split={self.split.mode!r} reads whole shards without "
                "counting their samples. Pass split='equal' for a known length, the same on every rank "
                "(the counts come from the _info.json beside the shards, else from a pass over each), "
                "or use .with_epoch(n) for epochs of n items (an endless stream: split='resampled')"
            )
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
