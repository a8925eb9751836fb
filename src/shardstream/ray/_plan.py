"""The shard plan: which samples go to which shard, from sample keys and encoded sizes alone.

The plan is a pure function of the set of ``(key, size)`` pairs: samples are ordered by key and
cut greedily into shards of at most ``target`` bytes, the rule of
:class:`~shardstream.tar.sharded_writer.ShardWriter` (a shard exceeds the target only when one
sample alone does). Ray's block boundaries, task order and worker count never enter it, so the
same dataset always gives the same shard names and bytes. A shard then holds a contiguous range
of keys, so the plan is carried to the workers as the first key of each shard (O(shards), not
O(samples)) and a sample's shard is found by bisection.

Greedy filling leaves each shard but the last within one sample of the target: with samples at
most 10% of the target, every shard but the last is within 10% of it.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError
from ..tar.writer import END_OF_ARCHIVE

__all__ = ["PlannedShard", "plan_shards", "shard_of"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlannedShard:
    """One shard of the plan: its first key, sample count and size in bytes (end blocks included)."""

    first_key: str
    samples: int
    bytes: int


def plan_shards(keys: Sequence[str], sizes: Sequence[int], target: int) -> list[PlannedShard]:
    """Cut samples, sorted by key, into shards of at most ``target`` bytes.

    Args:
        keys: sample keys in ascending order (Python string order, the same as Arrow's).
        sizes: each sample's encoded tar size (headers, data and padding).
        target: most bytes per shard, counting the 1024-byte end of the archive.

    Raises:
        ConfigurationError: a key occurs twice, keys are not sorted, or ``target`` is too small.
    """
    if target <= END_OF_ARCHIVE:
        raise ConfigurationError(
            f"shard_size={target} is too small; a tar shard needs more than {END_OF_ARCHIVE} bytes"
        )
    if len(keys) != len(sizes):
        raise ConfigurationError(f"{len(keys)} keys but {len(sizes)} sizes; pass one size per key")
    shards: list[PlannedShard] = []
    first = ""
    count = 0
    size = END_OF_ARCHIVE
    previous: str | None = None
    for key, nbytes in zip(keys, sizes, strict=True):
        if previous is not None and key <= previous:
            if key == previous:
                raise ConfigurationError(
                    f"sample key {key!r} occurs more than once; a shard set needs unique keys "
                    "(readers would merge or reject the duplicates). Deduplicate the rows or make "
                    "the keys unique, e.g. by prefixing the source file or partition name."
                )
            raise ConfigurationError(f"keys are not sorted: {key!r} comes after {previous!r}")
        previous = key
        if count and size + nbytes > target:
            shards.append(PlannedShard(first, count, size))
            count, size = 0, END_OF_ARCHIVE
        if not count:
            first = key
            if size + nbytes > target:
                log.warning(
                    "sample %r alone takes %d bytes, more than shard_size=%d; its shard will exceed it",
                    key,
                    nbytes + END_OF_ARCHIVE,
                    target,
                )
        count += 1
        size += int(nbytes)
    if count:
        shards.append(PlannedShard(first, count, size))
    return shards


def shard_of(key: str, first_keys: Sequence[str]) -> int:
    """The number of the shard whose key range holds ``key`` (``first_keys`` ascending)."""
    return max(bisect.bisect_right(first_keys, key) - 1, 0)
