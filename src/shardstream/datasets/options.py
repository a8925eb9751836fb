"""One set of option names for the two front doors: ``ss.ShardStream``'s spellings and WebDataset's.

``ss.ShardStream(urls, shuffle_shards=False, cache=ss.CachePolicy(d, "500G"), split=ss.SplitPolicy(
"equal", batch_size=64))`` and ``ss.ShardStream(urls, shardshuffle=False, cache_dir=d, cache_size=
"500G", split="equal", batch_size=64)`` are the same dataset, and ``WebDataset`` passes its
arguments through the same translation (:func:`translate`), so the two doors cannot drift apart.
Each pair of spellings is one option: giving both raises, naming them.

=============================  ==========================================================
shardstream                    WebDataset's spelling (also accepted by ``ss.ShardStream``)
=============================  ==========================================================
``shuffle_shards=``            ``shardshuffle=`` (True or a number: shuffle; None/False/0: not)
``cache=CachePolicy(...)``     ``cache_dir=``, ``cache_size=``, ``url_to_name=``
``split=SplitPolicy(m, ...)``  ``split=m`` with ``batch_size=``, ``epoch_size=``, ``granularity=``,
                               ``index=``, ``count_cache=``; ``nodesplitter=``/``workersplitter=``
                               (WebDataset's ``split="shards"`` splitters); ``resampled=True``
``log_shards=``                ``verbose=``
``format=TarFormat(...)``      ``select_files=``, ``rename_files=``
=============================  ==========================================================

What stays each door's own: its defaults for what is not given (``WebDataset`` keeps WebDataset
1.0.2's: one node, no shard shuffle; ``ss.ShardStream`` chooses its split from the world,
:func:`~shardstream.datasets.policy.default_split`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import UNSET, Unset
from ..errors import ConfigurationError
from ..readers.read_shards import ShardFormat
from ..readers.shardlists import split_by_node, split_by_worker
from ..tar.samples import TarFormat
from .policy import CachePolicy, SplitPolicy

__all__ = ["WARNED", "Options", "translate", "warn_unused"]

log = logging.getLogger(__name__)

#: The arguments already warned about in this process (:func:`warn_unused`).
WARNED: set[str] = set()

#: The fields of a split given by name (``split="equal", batch_size=64``).
_PLANNED = ("batch_size", "epoch_size", "granularity", "index", "count_cache")


def warn_unused(argument: str, why: str) -> None:
    """Log once per process that ``argument`` has no effect here, and why."""
    if argument not in WARNED:
        WARNED.add(argument)
        log.warning("%s has no effect: %s; it is ignored", argument, why)


@dataclass(frozen=True)
class Options:
    """What a front door's arguments mean, in one spelling.

    Attributes:
        split: the split (``None``: none given, the door's default applies).
        shuffle_shards: permute the shards every epoch (``None``: not given).
        cache: the cache policy (``UNSET``: not given, the environment's applies).
        log_shards: log every shard opened.
        format: the shard format (``None``: tar).
    """

    split: SplitPolicy | None
    shuffle_shards: bool | None
    cache: CachePolicy | None | Unset
    log_shards: bool
    format: ShardFormat | None


def _given(**values: Any) -> list[str]:
    return [name for name, value in values.items() if not isinstance(value, Unset)]


def _one_of(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> None:
    """Raise when both spellings of one option are given."""
    a, b = _given(**ours), _given(**theirs)
    if a and b:
        raise ConfigurationError(
            f"{' and '.join(f'{n}=' for n in a)} and {' and '.join(f'{n}=' for n in b)} spell the same "
            "option (shardstream's and WebDataset's names); pass one of them"
        )


def translate(
    *,
    split: SplitPolicy | str | None | Unset = UNSET,
    shuffle_shards: bool | Unset = UNSET,
    cache: CachePolicy | None | Unset = UNSET,
    log_shards: bool | Unset = UNSET,
    format: ShardFormat | None | Unset = UNSET,  # noqa: A002
    batch_size: int | None | Unset = UNSET,
    epoch_size: int | None | Unset = UNSET,
    granularity: str | Unset = UNSET,
    index: str | Mapping[str, int] | None | Unset = UNSET,
    count_cache: str | None | Unset = UNSET,
    nodesplitter: Callable[..., Any] | None | Unset = UNSET,
    workersplitter: Callable[..., Any] | None | Unset = UNSET,
    resampled: bool | Unset = UNSET,
    shardshuffle: bool | int | None | Unset = UNSET,
    cache_dir: str | Sequence[str] | None | Unset = UNSET,
    cache_size: int | str | None | Unset = UNSET,
    url_to_name: Callable[[str], str] | None | Unset = UNSET,
    verbose: bool | Unset = UNSET,
    select_files: Callable[[str], bool] | None | Unset = UNSET,
    rename_files: Callable[[str], str] | None | Unset = UNSET,
) -> Options:
    """Map both spellings of the front doors' options to one :class:`Options` (see the module doc).

    ``UNSET`` marks an argument that was not given; ``None`` for ``split``, ``batch_size``,
    ``epoch_size``, ``index``, ``count_cache`` and ``url_to_name``, and ``False`` for
    ``resampled``, also mean "not given" (WebDataset's defaults).

    Raises:
        ConfigurationError: both spellings of one option, or a field of a split given without
            a split it could configure (``batch_size=`` alone: what it is for, and the fix).
    """
    planned = {
        name: value
        for name, value in zip(
            _PLANNED, (batch_size, epoch_size, granularity, index, count_cache), strict=True
        )
        if not isinstance(value, Unset) and value is not None and (name, value) != ("granularity", "shard")
    }
    splitters = {
        name: value
        for name, value in (("nodesplitter", nodesplitter), ("workersplitter", workersplitter))
        if not isinstance(value, Unset)
    }
    _one_of({"shuffle_shards": shuffle_shards}, {"shardshuffle": shardshuffle})
    _one_of({"cache": cache}, {"cache_dir": cache_dir, "cache_size": cache_size, "url_to_name": url_to_name})
    _one_of({"log_shards": log_shards}, {"verbose": verbose})
    _one_of({"format": format}, {"select_files": select_files, "rename_files": rename_files})
    if isinstance(split, SplitPolicy):
        _one_of({"split": split}, {**planned, **splitters})
    policy = _split(None if isinstance(split, Unset) else split, planned, splitters, resampled is True)
    if not isinstance(shuffle_shards, Unset):
        shuffle: bool | None = bool(shuffle_shards)
    elif not isinstance(shardshuffle, Unset):
        shuffle = shardshuffle not in (None, False, 0)
    else:
        shuffle = None
    chosen: CachePolicy | None | Unset = cache
    if _given(cache_dir=cache_dir, cache_size=cache_size) or url_to_name not in (UNSET, None):
        chosen = _cache_policy(cache_dir, cache_size, None if isinstance(url_to_name, Unset) else url_to_name)
    if isinstance(format, Unset):
        pick = None if isinstance(select_files, Unset) else select_files
        rename = None if isinstance(rename_files, Unset) else rename_files
        fmt: ShardFormat | None = TarFormat(pick, rename) if pick is not None or rename is not None else None
    else:
        fmt = format
    return Options(
        split=policy,
        shuffle_shards=shuffle,
        cache=chosen,
        log_shards=bool(log_shards if not isinstance(log_shards, Unset) else verbose is True),
        format=fmt,
    )


def _split(
    split: SplitPolicy | str | None,
    planned: dict[str, Any],
    splitters: dict[str, Any],
    resampled: bool,
) -> SplitPolicy | None:
    if isinstance(split, SplitPolicy):
        return split
    if split is not None and resampled:
        raise ConfigurationError(
            f"split={split!r} defines the epoch itself; drop resampled=True (split='resampled' draws "
            "shards at random: with epoch_size=, a planned epoch of that many samples per rank)"
        )
    node = splitters.get("nodesplitter", split_by_node)
    worker = splitters.get("workersplitter", split_by_worker)
    if split is None:
        if planned:
            given = ", ".join(f"{n}={v!r}" for n, v in planned.items())
            verb = "configures" if len(planned) == 1 else "configure"
            raise ConfigurationError(
                f"{given} {verb} a planned split, and no split= was given: with split='equal' every "
                "rank reads whole batches of batch_size= samples (the same number on every rank), "
                "with 'exact' every sample once, with 'resampled' epoch_size= samples drawn at "
                "random. Pass split= too (e.g. split='equal', batch_size=64); to batch the samples, "
                "use .batched(64)"
            )
        if resampled:
            return SplitPolicy("resampled", node_splitter=node, worker_splitter=worker)
        if splitters:
            return SplitPolicy("shards", node_splitter=node, worker_splitter=worker)
        return None
    if split == "shards" or (split == "resampled" and "epoch_size" not in planned):
        if planned:
            raise ConfigurationError(
                f"{', '.join(f'{n}=' for n in planned)} configure the planned splits ('equal', 'exact', "
                f"'resampled' with epoch_size=); with split={split!r} they would be ignored"
            )
        return SplitPolicy(split, node_splitter=node, worker_splitter=worker)
    if splitters:
        raise ConfigurationError(
            f"{' and '.join(f'{n}=' for n in splitters)} choose how split='shards' deals whole shards; "
            f"split={split!r} plans the epoch from the sample counts and takes no splitter"
        )
    return SplitPolicy(split, **{"batch_size": 1, **planned})


def _cache_policy(
    cache_dir: str | Sequence[str] | None | Unset, cache_size: int | str | None | Unset, url_to_name: Any
) -> CachePolicy | None:
    """Explicit arguments win; unset ones come from SHARDSTREAM_CACHE_DIR/SIZE (or WDS_CACHE/SIZE)."""
    env = CachePolicy.from_env()
    directory = env.dir if isinstance(cache_dir, Unset) else cache_dir
    size = env.size if isinstance(cache_size, Unset) else cache_size
    if directory is None:
        if url_to_name is not None:
            warn_unused("url_to_name=", "it names cache entries, and there is no cache (pass cache_dir=)")
        if not isinstance(cache_size, Unset) and cache_size is not None:
            warn_unused("cache_size=", "it limits the cache, and there is no cache (pass cache_dir=)")
        return None
    return CachePolicy(directory, size, url_to_name)
