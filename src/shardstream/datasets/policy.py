"""Small value objects that configure a :class:`~shardstream.datasets.shard_stream.ShardStream`.

:class:`SplitPolicy` says how shards are divided among ranks and DataLoader workers;
:class:`CachePolicy` whether and where remote shards are cached. Both are frozen, validate
their fields at construction and have a readable ``repr``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import parse_size, read_settings
from ..errors import ConfigurationError
from ..readers.shardlists import Splitter, split_by_node, split_by_worker
from ..shards.plan import GRANULARITIES

__all__ = ["CachePolicy", "SplitPolicy", "default_split"]

_MODES = ("shards", "equal", "exact", "resampled")

#: Why a ShardStream built for one rank without ``split=`` refuses to run on several (``{ranks}``).
_BUILT_FOR_ONE_RANK = (
    "this ShardStream was built for one rank (no split= given, and no process group, RANK/WORLD_SIZE "
    "or world= when it was built) and now runs on {ranks} ranks: whole shards per rank would give "
    "the ranks different numbers of batches (a hang at the next all-reduce). Build the dataset "
    "after init_process_group() (the default then gives every rank the same number of batches), "
    "or pass split='equal' (the same number of batches on every rank, from the shards' sample "
    "counts) or split='shards' (whole shards per rank, when every rank gets as many samples)"
)


@dataclass(frozen=True)
class SplitPolicy:
    """How the epoch is divided among ranks and workers.

    Attributes:
        mode: ``"shards"`` (each rank and worker reads every n-th shard: WebDataset's
            ``split_by_node``/``split_by_worker``; counts per rank may differ), ``"equal"``
            (training: every rank yields the same number of batches, from an epoch plan over
            the shards' sample counts), ``"exact"`` (evaluation: every sample once, padding
            marked ``__pad__``) or ``"resampled"`` (shards drawn with replacement: with
            ``epoch_size``, a planned epoch of that many samples per rank; without, endless).
        batch_size: with ``equal``/``exact``/``resampled``, quotas are whole batches of this size.
        epoch_size: samples per rank per epoch (``resampled``; ``None``: an endless stream).
        granularity: ``"shard"`` or ``"sample"`` (``equal``: whether slots may start inside shards).
        index: sample counts (``{basename: count}``) or the index location (default
            ``_info.json`` next to the shards, else a counting pass).
        count_cache: where a counting pass saves its counts for the next run.
        node_splitter / worker_splitter: with ``"shards"``, the stages (or WebDataset-style
            functions) that give each rank / DataLoader worker its shards (default
            ``split_by_node`` / ``split_by_worker``; ``None``: every rank/worker reads all).
            With ``"resampled"`` and no ``epoch_size`` (an endless stream of random shards,
            seeded per rank and worker) only ``worker_splitter`` applies.
    """

    mode: str = "shards"
    batch_size: int = 1
    epoch_size: int | None = None
    granularity: str = "shard"
    index: str | Mapping[str, int] | None = None
    count_cache: str | None = None
    node_splitter: Callable[..., Any] | None = split_by_node
    worker_splitter: Callable[..., Any] | None = split_by_worker

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ConfigurationError(f"SplitPolicy(mode={self.mode!r}) is unknown; use one of {_MODES}")
        if self.granularity not in GRANULARITIES:
            raise ConfigurationError(
                f"granularity={self.granularity!r} is unknown; use one of {GRANULARITIES}"
            )
        if self.batch_size < 1:
            raise ConfigurationError(f"batch_size={self.batch_size} must be at least 1")
        if self.mode == "resampled" and self.epoch_size is not None and self.epoch_size < self.batch_size:
            raise ConfigurationError(
                "SplitPolicy('resampled', epoch_size=...) needs at least one batch per rank per epoch; "
                f"got epoch_size={self.epoch_size}, batch_size={self.batch_size}"
            )
        if self.mode == "shards" and (self.epoch_size is not None or self.granularity != "shard"):
            raise ConfigurationError(
                "epoch_size= and granularity= apply to the planned modes ('equal', 'exact', "
                "'resampled'); with mode='shards' they would be ignored"
            )

    @property
    def planned(self) -> bool:
        """True for the modes that read from an epoch plan (equal counts per rank)."""
        return self.mode in ("equal", "exact") or (self.mode == "resampled" and self.epoch_size is not None)


@dataclass(frozen=True)
class CachePolicy:
    """A local shard cache shared by every process on the host (or a shared filesystem).

    Attributes:
        dir: the cache directory; ``None`` disables caching. A list makes cache *tiers*, fastest
            first (``["/local_nvme/cache", "/shared/cache"]``): a miss in a tier is served from
            the next one, which fills itself from the one after it, and only a miss in the last
            tier reaches the store. Each tier is a cache of its own (locks, eviction, counters),
            so a tier on a shared filesystem is filled once across all nodes and jobs.
        size: the size limit in bytes or as text (``"500G"``); ``None`` or negative: unlimited;
            ``0`` disables caching (as in WebDataset). With tiers, one value for every tier or a
            list with one per tier.
        url_to_name: maps a URL to the entry's file name (default: a readable, collision-free
            name derived from the URL).
        options: further :class:`~shardstream.cache.ShardCache` options (``lock_timeout``,
            ``verify_etag``, ...).
    """

    dir: str | Sequence[str] | None = None
    size: int | str | Sequence[int | str | None] | None = None
    url_to_name: Callable[[str], str] | None = None
    options: Mapping[str, Any] | None = None

    @classmethod
    def from_env(cls) -> CachePolicy:
        """``SHARDSTREAM_CACHE_DIR``/``SHARDSTREAM_CACHE_SIZE`` (or WebDataset's names), if set;
        a directory list separated by ``os.pathsep`` (``/nvme/cache:/shared/cache``) makes tiers."""
        settings = read_settings()
        directory = settings.cache_dir
        if directory is not None and os.pathsep in directory:  # tiers, fastest first: "/nvme:/shared"
            return cls([d for d in directory.split(os.pathsep) if d], settings.cache_size)
        return cls(directory, settings.cache_size)

    def __post_init__(self) -> None:
        tiers = self.tiers
        if not isinstance(self.size, str | int | type(None)) and len(list(self.size)) != len(tiers):
            raise ConfigurationError(
                f"cache_size has {len(list(self.size))} values for {len(tiers)} cache directories; "
                "give one size per directory, or one for all"
            )

    @property
    def tiers(self) -> tuple[str, ...]:
        """The cache directories, fastest first (one for a plain cache, none when off)."""
        if self.dir is None:
            return ()
        return (self.dir,) if isinstance(self.dir, str) else tuple(str(d) for d in self.dir)

    @property
    def tier_sizes(self) -> tuple[int | None, ...]:
        """Each tier's size limit in bytes (``None``: unlimited)."""
        raw = self.size
        sizes = [raw] * len(self.tiers) if isinstance(raw, str | int | type(None)) else list(raw)
        return tuple(_bytes(s) for s in sizes)

    @property
    def size_bytes(self) -> int | None:
        """The size limit of the first (or only) tier."""
        sizes = self.tier_sizes
        if sizes:
            return sizes[0]
        return _bytes(self.size) if isinstance(self.size, str | int | type(None)) else None

    @property
    def enabled(self) -> bool:
        return bool(self.tiers) and self.size_bytes != 0


def _bytes(size: int | str | None) -> int | None:
    value = parse_size(size, name="cache_size") if isinstance(size, str) else size
    return None if value is not None and value < 0 else value


def default_split(world_size: int, counts_known: bool, where: str = "") -> SplitPolicy:
    """The native ``ShardStream``'s split when none is given, for a world of ``world_size`` ranks.

    One rank: ``"shards"`` (with one rank it only divides the shards among DataLoader workers),
    whose rank splitter refuses, at the start of an epoch, a world of several ranks found then
    (a process group initialised after the dataset was built). Several ranks: ``"equal"``, the
    same number of batches on every rank, when the shards' sample counts are known cheaply
    (``counts_known``: local shards, counted from their headers when no ``_info.json`` lists them,
    or an index beside them); otherwise no default is safe, and the error says which to choose.

    Args:
        world_size: the ranks the dataset is built for.
        counts_known: whether every shard is local or listed in an index.
        where: the shards' directory, for the ``shardstream index`` command the error suggests.

    Raises:
        ConfigurationError: several ranks and counts that would take a read of every remote shard.
    """
    if world_size <= 1:
        return SplitPolicy("shards", node_splitter=Splitter("node", _BUILT_FOR_ONE_RANK))
    if counts_known:
        return SplitPolicy("equal")
    raise ConfigurationError(
        f"ShardStream runs on {world_size} ranks without split=, and the sample counts of its shards are "
        "unknown (remote shards, and no _info.json beside them lists them), so the default, the same "
        "number of batches on every rank, would need every rank to read every shard first. Pass "
        "split='equal' to count the samples first (one read of every shard; count_cache= keeps the "
        "counts for the next run), split='shards' if every rank gets the same number of samples, or "
        f"write an index with `shardstream index {where or 'PREFIX'}` (the default then plans from it)"
    )
