"""The fluent surface: ``WebDataset(urls).shuffle(1000).decode("rgb8").to_tuple("jpg", "cls")``.

Every method only composes a stage from the functional API onto a copy of the pipeline, so the
fluent and explicit (:class:`DataPipeline`) surfaces share one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..config import UNSET, Unset, parse_size, read_settings
from ..errors import ConfigurationError
from ..shards.balance import PlannedSamples
from ..shards.counts import CountSource
from ..shards.plan import epoch_order
from ..shards.spec import ResampledShards, SimpleShardList, expand_urls
from ..shards.split import single_node_only, split_by_worker
from ..shards.world import World
from ..tar.samples import Opener, TarSamples
from . import batch, extra, fields
from . import mapping as map_stages
from .base import Stage
from .decode import Decode
from ..handlers import Handler, reraise_exception
from .pipeline import DataPipeline
from .shuffle import Shuffle

__all__ = ["FluidInterface", "FluidWrapper", "ShardShuffle", "WebDataset", "check_empty"]


class FluidInterface:
    """Chainable methods shared by WebDataset, FluidWrapper and the WebLoader pipeline."""

    def compose(self, *stages: Any) -> Any:
        raise NotImplementedError

    def batched(
        self,
        batchsize: int,
        collation_fn: Callable[[list[Any]], Any] | None = batch.default_collation_fn,
        partial: bool = True,
    ) -> Any:
        return self.compose(batch.batched(batchsize, collation_fn=collation_fn, partial=partial))

    def unbatched(self) -> Any:
        return self.compose(batch.unbatched())

    def listed(self, batchsize: int, partial: bool = True) -> Any:
        return self.compose(batch.listed(batchsize, partial=partial))

    def unlisted(self) -> Any:
        return self.compose(batch.unlisted())

    def shuffle(self, size: int, **kw: Any) -> Any:
        if size < 1:
            return self
        return self.compose(Shuffle(size, **kw))

    def map(self, f: Callable[[Any], Any], handler: Handler = reraise_exception) -> Any:
        return self.compose(map_stages.map(f, handler=handler))

    def decode(
        self,
        *args: Any,
        pre: Any = None,
        post: Any = None,
        only: Any = None,
        partial: bool = False,
        handler: Handler = reraise_exception,
        **kw: Any,
    ) -> Any:
        return self.compose(
            Decode(*args, pre=pre, post=post, only=only, partial=partial, handler=handler, **kw)
        )

    def map_dict(self, handler: Handler = reraise_exception, **kw: Callable[[Any], Any]) -> Any:
        return self.compose(map_stages.map_dict(handler=handler, **kw))

    def select(self, predicate: Callable[[Any], bool], **kw: Any) -> Any:
        return self.compose(map_stages.select(predicate))

    def to_tuple(self, *args: str, **kw: Any) -> Any:
        return self.compose(fields.to_tuple(*args, **kw))

    def map_tuple(self, *args: Callable[[Any], Any] | None, handler: Handler = reraise_exception) -> Any:
        return self.compose(map_stages.map_tuple(*args, handler=handler))

    def slice(self, *args: int | None) -> Any:
        return self.compose(extra.slice(*args))

    def rename(self, **kw: Any) -> Any:
        return self.compose(fields.rename(**kw))

    def rsample(self, p: float = 0.5) -> Any:
        return self.compose(extra.rsample(p))

    def rename_keys(self, *args: Any, **kw: Any) -> Any:
        return self.compose(fields.rename_keys(*args, **kw))

    def extract_keys(self, *args: str, **kw: Any) -> Any:
        return self.compose(fields.extract_keys(*args, **kw))


class ShardShuffle(Stage):
    """Permute the shard list every epoch, identically on every rank and worker.

    The permutation depends only on ``(seed, epoch)``, so it runs before splitting: ranks and
    workers then take disjoint slices of the same order, and the slices change every epoch.
    (WebDataset shuffles after splitting, with a buffer, and repeats its order every epoch.)
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def run(self, src: Iterator[Any]) -> Iterator[Any]:

        shards = list(src)
        return iter([shards[i] for i in epoch_order(len(shards), self.epoch, self.seed, shuffle=True)])


_END = object()


class _CheckEmpty(Stage):
    def __init__(self, nshards: int | None) -> None:
        self.nshards = nshards

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        # Peek at the first sample, then delegate with ``yield from`` (a C-level loop) instead
        # of counting every sample in Python.
        first = next(src, _END)
        if first is not _END:
            yield first
            yield from src
            return
        world = World.current()
        raise ConfigurationError(
            f"no samples in this epoch for rank {world.rank}/{world.world_size}, worker "
            f"{world.worker}/{world.num_workers} ({self.nshards} shards in the spec). Check that "
            "the shards are non-empty tar files with dotted member names (key.ext), and that "
            "there are at least as many shards as ranks x workers. Pass empty_check=False if an "
            "empty epoch is expected."
        )


def check_empty(src: Iterator[Any]) -> Iterator[Any]:
    """Raise if the stream is empty (WebDataset's ``check_empty``)."""
    return _CheckEmpty(None)(src)


class WebDataset(DataPipeline, FluidInterface):
    """Stream samples from WebDataset shards: shard list, splitting, shuffle, read, group.

    Args:
        urls: a spec (``"data-{000000..000099}.tar"``, ``::``-joined specs) or a list of URLs.

        Error handling:
            handler: policy for shard-level errors (default: raise).
            empty_check: raise a clear error when an epoch yields no sample (default True).

        Shards and order:
            resampled / mode="resampled": draw shards with replacement, endlessly.
            repeat: iterate the shard list endlessly.
            shardshuffle: True or a number shuffles the shard order every epoch (a full
                permutation, the same on every rank, before splitting). None/False/0: no shuffle.
            seed: base seed for shard and sample shuffles (default from SHARDSTREAM_SEED, else 0).
            nodesplitter: how ranks share shards (default ``single_node_only``, as WebDataset;
                ignored when resampled).
            workersplitter: how DataLoader workers share shards (default ``split_by_worker``).
            select_files / rename_files: member-name hooks.

        Sources and cache:
            storage_options: options for the sources (endpoint, credentials, anon, ...).
            allow_pipe: allow ``pipe:`` URLs (they run shell commands).
            cache_dir / cache_size: local shard cache (explicit arguments win over the environment).
            opener: custom shard opener (replaces the cache/source logic).

        Equal batches per rank (keyword-only; see docs/design.md, "Splitting and epochs"):
            split: ``None`` (default: WebDataset's nodesplitter/workersplitter behaviour),
                ``"equal"`` (recommended for training: every rank yields the same number of
                batches, whatever the shard sizes and num_workers), ``"exact"`` (evaluation: every
                sample once over all ranks, padding marked ``__pad__``) or ``"resampled"``
                (shards drawn with replacement, ``epoch_size`` samples per rank). With a split
                mode, ``nodesplitter``/``workersplitter`` are not used and ``len()`` is known.
            batch_size: quotas are whole batches of this size (pass the batch size you use).
            epoch_size: samples per rank per epoch (``split="resampled"``).
            granularity: ``"shard"`` (default) or ``"sample"`` (cuts inside shards; needed when
                there are fewer shards than ranks x workers).
            index / count_cache: sample counts or index location (default ``_info.json`` next to
                the shards, else a counting pass), and where to save counts from that pass.
            world: explicit ``World(rank=..., world_size=...)`` instead of detection.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        handler: Handler = reraise_exception,
        mode: str | None = None,
        resampled: bool = False,
        repeat: bool = False,
        shardshuffle: bool | int | None = None,
        cache_size: int | str | None | Unset = UNSET,
        cache_dir: str | None | Unset = UNSET,
        url_to_name: Callable[[str], str] | None = None,
        detshuffle: bool = False,
        nodesplitter: Callable[..., Iterator[Any]] | None = single_node_only,
        workersplitter: Callable[..., Iterator[Any]] | None = split_by_worker,
        select_files: Callable[[str], bool] | None = None,
        rename_files: Callable[[str], str] | None = None,
        empty_check: bool = True,
        verbose: bool = False,
        seed: int | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        allow_pipe: bool = False,
        opener: Opener | None = None,
        split: str | None = None,
        batch_size: int | None = None,
        epoch_size: int | None = None,
        granularity: str = "shard",
        index: CountSource = None,
        count_cache: str | None = None,
        world: World | None = None,
    ) -> None:
        super().__init__()
        resampled = resampled or mode == "resampled"
        self.seed = seed
        self.urls = (
            expand_urls(urls) if not isinstance(urls, (SimpleShardList, ResampledShards)) else urls.urls
        )
        self._planned: PlannedSamples | None = None
        self._len_batching: tuple[tuple[int, bool], ...] = ()

        def make_reader() -> TarSamples:
            shard_opener = opener
            if shard_opener is None:
                shard_opener = _cache_opener(cache_dir, cache_size, url_to_name, storage_options, allow_pipe)
            return TarSamples(
                handler,
                select_files,
                rename_files,
                storage_options=storage_options,
                allow_pipe=allow_pipe,
                opener=shard_opener,
            )

        if split is not None:
            if resampled or repeat:
                raise ConfigurationError(
                    f"split={split!r} defines the epoch itself; drop resampled=/repeat= (use "
                    "split='resampled' with epoch_size= for endless random shards)"
                )
            reader = make_reader()
            shuffle = bool(shardshuffle) if shardshuffle is not None else split != "exact"
            self._planned = PlannedSamples(
                self.urls,
                mode=split,
                batch_size=batch_size or 1,
                epoch_size=epoch_size,
                granularity=granularity,
                seed=seed,
                shuffle=shuffle,
                index=index,
                count_cache=count_cache,
                world=world,
                reader=reader,
            )
            self.append(self._planned)
            return
        if resampled:
            self.append(ResampledShards(self.urls, seed=seed))
        else:
            self.append(SimpleShardList(self.urls))
            if shardshuffle not in (None, False, 0):
                self.append(ShardShuffle(seed))
            if nodesplitter is not None:
                self.append(nodesplitter)
        if workersplitter is not None:
            self.append(workersplitter)
        self.append(make_reader())
        if empty_check:
            self.append(_CheckEmpty(len(self.urls)))
        if repeat and not resampled:
            self.repeat()

    def compose(self, *stages: Any) -> Any:
        result = DataPipeline.compose(self, *stages)
        if isinstance(result, WebDataset) and self._planned is not None:
            # len() follows batching so that len(DataLoader(ds.batched(b), batch_size=None)) works.
            added = tuple((s.batchsize, s.partial) for s in stages if isinstance(s, batch.Batched))
            result._len_batching = self._len_batching + added
        return result

    def set_epoch(self, epoch: int) -> None:
        DataPipeline.set_epoch(self, epoch)
        if self._planned is not None:
            self._planned.remember_world()

    def __len__(self) -> int:
        """Items per rank per epoch: known with a split mode (or after ``with_length``)."""
        if self.size is None and self._planned is not None:
            n = len(self._planned)
            for size, partial in self._len_batching:
                n = -(-n // size) if partial else n // size
            return n
        return DataPipeline.__len__(self)


def _cache_opener(
    cache_dir: str | None | Unset,
    cache_size: int | str | None | Unset,
    url_to_name: Any,
    storage_options: Mapping[str, Any] | None,
    allow_pipe: bool,
) -> Opener | None:
    """The shard cache opener, or ``None`` for no cache (no directory, or ``cache_size=0``).

    Explicit arguments win; unset ones come from SHARDSTREAM_CACHE_DIR/SIZE (or WDS_CACHE/SIZE).
    """
    from ..cache import make_cache_opener

    settings = read_settings()
    directory = settings.cache_dir if isinstance(cache_dir, Unset) else cache_dir
    size = settings.cache_size if isinstance(cache_size, Unset) else cache_size
    if isinstance(size, str):
        size = parse_size(size, name="cache_size")
    if size is not None and size < 0:
        size = None  # WebDataset's -1: unlimited
    return make_cache_opener(
        cache_dir=directory,
        cache_size=size,
        url_to_name=url_to_name,
        storage_options=storage_options,
        allow_pipe=allow_pipe,
    )


class FluidWrapper(DataPipeline, FluidInterface):
    """Fluent methods over any iterable (a DataLoader, a list, another pipeline)."""

    def __init__(self, initial: Any) -> None:
        super().__init__()
        self.append(initial)

    def compose(self, *stages: Any) -> Any:
        return DataPipeline.compose(self, *stages)
