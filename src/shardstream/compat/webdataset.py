"""WebDataset's ``WebDataset`` class: its 1.0.2 arguments translated onto the native ShardStream."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..config import UNSET, Unset
from ..datasets.options import WARNED, warn_unused
from ..datasets.shard_stream import ShardStream
from ..errors import ConfigurationError
from ..handlers import Handler, reraise_exception
from ..pipeline.cached import Cached
from ..pipeline.shuffle import detshuffle as DetShuffle  # noqa: N812
from ..readers.empty import CheckEmpty
from ..readers.read_shards import ReadShards
from ..readers.shardlists import (
    ResampledShards,
    SimpleShardList,
    single_node_only,
    split_by_worker,
)
from ..shards.world import World
from ._xdecode import xdecode

__all__ = ["WARNED", "WebDataset", "check_empty", "warn_unused"]

log = logging.getLogger(__name__)

Splitter = Callable[..., Iterator[Any]]


class WebDataset(ShardStream):
    """An iterable dataset over WebDataset shards, with WebDataset 1.0.2's constructor.

    The arguments go through the same translation as :class:`shardstream.ShardStream`'s own
    (:mod:`shardstream.datasets.options`; ``ss.ShardStream`` accepts these spellings too), with
    WebDataset's defaults for what is not given (``docs/migrating-from-webdataset.md`` lists where the
    behaviour deliberately differs). None is silently ignored: one that has no effect in the given
    configuration (``url_to_name=`` or ``cache_size=`` without a cache directory,
    ``detshuffle=True`` without ``shardshuffle``) is accepted, as WebDataset accepts it, with a
    warning naming it (logged once per process and argument).

    ``pipe:`` URLs are refused here, when the dataset is built, unless ``allow_pipe=True`` or
    ``SHARDSTREAM_ALLOW_PIPE=1`` (for trusted legacy code); ``${NAME}`` in ``urls`` is replaced by
    the environment variable ``WDS_NAME``, as in WebDataset.

    shardstream's additions are keyword-only: ``storage_options``, ``allow_pipe``, ``source``,
    ``split``, ``batch_size``, ``epoch_size``, ``granularity``, ``index``, ``count_cache``,
    ``world``, ``read_ahead``; see :class:`shardstream.ShardStream` and
    :class:`shardstream.SplitPolicy`.

    Args:
        urls: a spec as every front door takes it (``"data-{000000..000099}.tar"``, ``::``-joined
            specs, a list, a directory, a glob, a store prefix, an ``_info.json``:
            :mod:`shardstream.datasets.specs`). Unlike WebDataset, missing local or indexed
            shards raise here, before the first sample, saying how many are missing.
        handler: policy for shard-level errors (default: raise).
        mode: ``"resampled"`` draws shards with replacement, endlessly (as ``resampled=True``).
        resampled: True draws shards with replacement, endlessly.
        repeat: iterate the shard list endlessly.
        shardshuffle: True or a number shuffles the shard order every epoch (a full
            permutation, the same on every rank, before splitting). None/False/0: no shuffle.
        cache_size: the local shard cache's size limit (explicit arguments win over the
            environment).
        cache_dir: the local shard cache's directory (explicit arguments win over the
            environment).
        url_to_name: cache entry name for a URL.
        detshuffle: WebDataset's shard shuffle: a buffer of ``shardshuffle`` shards after
            splitting, seeded per epoch (default False: the full permutation above).
        nodesplitter: how ranks share shards (default ``single_node_only``, as WebDataset).
        workersplitter: how DataLoader workers share shards (default ``split_by_worker``, as
            WebDataset).
        select_files: member-name hook: keep a member when it returns True.
        rename_files: member-name hook: maps a member's name before it is split into key and
            extension.
        empty_check: raise a clear error when an epoch yields no sample (default True).
        verbose: log every shard as it is opened (INFO, logger ``shardstream.readers.read_shards``).
        seed: base seed for shard and sample shuffles (default from SHARDSTREAM_SEED, else 0).
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
        cache_dir: str | Sequence[str] | None | Unset = UNSET,
        url_to_name: Callable[[str], str] | None = None,
        detshuffle: bool = False,
        nodesplitter: Splitter | None = single_node_only,
        workersplitter: Splitter | None = split_by_worker,
        select_files: Callable[[str], bool] | None = None,
        rename_files: Callable[[str], str] | None = None,
        empty_check: bool = True,
        verbose: bool = False,
        seed: int | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        allow_pipe: bool = False,
        source: Any = None,
        split: str | None = None,
        batch_size: int | None = None,
        epoch_size: int | None = None,
        granularity: str = "shard",
        index: str | Mapping[str, int] | None = None,
        count_cache: str | None = None,
        world: World | None = None,
        read_ahead: bool = True,
    ) -> None:
        if mode not in (None, "resampled"):
            raise ConfigurationError(f"mode={mode!r} is unknown; WebDataset knows only mode='resampled'")
        resampled = resampled or mode == "resampled"
        if isinstance(urls, (SimpleShardList, ResampledShards)):
            urls = urls.urls
        shuffled = shardshuffle not in (None, False, 0)
        if split is not None:
            if resampled or repeat:
                raise ConfigurationError(
                    f"split={split!r} defines the epoch itself; drop resampled=/repeat= (use "
                    "split='resampled' with epoch_size= for endless random shards)"
                )
            if split == "resampled" and epoch_size is None:
                raise ConfigurationError(
                    "split='resampled' needs epoch_size (samples per rank per epoch), so that every "
                    "rank yields the same number of batches; for an endless stream use resampled=True"
                )
            # WebDataset's splitters configure split='shards' when given (its default
            # single_node_only would refuse the ranks that split='shards' deals shards to); a
            # planned split ignores them. Evaluation reads in order unless told otherwise.
            splitters: dict[str, Any] = {}
            if split == "shards" and nodesplitter is not single_node_only:
                splitters["nodesplitter"] = nodesplitter
            if split == "shards" and workersplitter is not split_by_worker:
                splitters["workersplitter"] = workersplitter
            shuffle: bool | int | None = shardshuffle if shardshuffle is not None else split != "exact"
        else:
            # WebDataset's default: the shards of one node, split over workers (with its
            # splitters), endless random shards with resampled=True.
            splitters = {"nodesplitter": nodesplitter, "workersplitter": workersplitter}
            shuffle = shuffled and not detshuffle
            if detshuffle and not shuffled:
                warn_unused("WebDataset(detshuffle=True)", "it shuffles shards only with shardshuffle= set")
        super().__init__(
            urls,
            split=split,
            shardshuffle=shuffle,
            seed=seed,
            world=world,
            select_files=select_files,
            rename_files=rename_files,
            handler=handler,
            empty_check=empty_check,
            cache_dir=cache_dir,
            cache_size=cache_size,
            url_to_name=url_to_name,
            storage_options=storage_options,
            allow_pipe=allow_pipe,
            source=source,
            verbose=verbose,
            read_ahead=read_ahead,
            resampled=resampled,
            batch_size=batch_size,
            epoch_size=epoch_size,
            granularity=granularity,
            index=index,
            count_cache=count_cache,
            **splitters,
        )
        if detshuffle and shuffled and split is None and not resampled:
            # WebDataset's detshuffle: a seeded buffer shuffle of the shards after splitting.
            size = 100 if shardshuffle is True else int(shardshuffle)  # type: ignore[arg-type]
            reader = next(i for i, stage in enumerate(self.pipeline) if isinstance(stage, ReadShards))
            self.pipeline.insert(reader, DetShuffle(size, min(size, 100), seed=seed or 0))
        if repeat and not resampled:
            self.repeat()

    # WebDataset's fluent methods that the shared FluidInterface does not have.
    def xdecode(self, *args: Any, **kw: Any) -> WebDataset:
        """Decode fields by glob pattern, decoders reading streams (``compat.filters.xdecode``)."""
        result: WebDataset = self.compose(xdecode(*args, **kw))
        return result

    def mcached(self) -> WebDataset:
        """Keep the first pass's samples in memory and replay them on later passes."""
        result: WebDataset = self.compose(Cached())
        return result


def check_empty(src: Any) -> Iterator[Any]:
    """Raise if the stream is empty (WebDataset's ``check_empty``)."""
    return CheckEmpty(None)(src)
