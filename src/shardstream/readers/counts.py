"""Samples per shard: from the ``_info.json`` index, or from a one-time counting pass that is cached.

Lookup order for each shard URL:

1. an explicit mapping ``{basename or url: samples}`` passed as ``index``;
2. the index file named by ``index`` (a directory, prefix URL or ``.json`` URL), else the
   ``_info.json`` next to the shards (written by :class:`~shardstream.tar.ShardWriter`; the format reads
   and writes it);
3. the process-wide cache of earlier counting passes;
4. a counting pass that reads the shard (bytes only, nothing is decoded). Its results are kept in
   the process cache and, when ``cache`` names a location, written there in the same index format
   so the next run (and every other rank) skips the pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError, ShardNotFoundError
from ..forks import GatedExecutor
from ..sources import SchemeRouter, Source
from ..tar.samples import TarFormat
from .read_shards import ShardFormat

__all__ = ["CountSource", "count_samples", "shard_counts"]

log = logging.getLogger(__name__)

#: An index location, or counts keyed by shard basename (or full URL).
CountSource = str | Mapping[str, int] | None

_COUNTED: dict[str, int] = {}


def _basename(url: str) -> str:
    return url.rstrip("/").rpartition("/")[2]


def _dirname(url: str) -> str:
    return url.rpartition("/")[0]


def count_samples(
    url: str,
    *,
    format: ShardFormat | None = None,  # noqa: A002
    source: Source | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
) -> int:
    """Read one shard and count its samples (consecutive members sharing a key)."""
    fmt = format if format is not None else TarFormat()
    src = source if source is not None else SchemeRouter(storage_options, allow_pipe)
    return fmt.count(src, url)


def _from_index(location: str, fmt: Any, storage_options: Mapping[str, Any] | None) -> dict[str, int]:
    try:
        return fmt.read_counts(location, storage_options)  # type: ignore[no-any-return]
    except ShardNotFoundError:
        return {}
    except ConfigurationError as exc:
        log.warning("ignoring unreadable shard index at %s: %s", location, exc)
        return {}


def shard_counts(
    urls: Sequence[str],
    *,
    index: CountSource = None,
    cache: str | None = None,
    format: ShardFormat | None = None,  # noqa: A002
    source: Source | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
    max_threads: int = 4,
) -> list[int]:
    """Sample count of every shard in ``urls`` (see the module docstring for the lookup order).

    Args:
        urls: shard URLs.
        index: counts mapping or index location; default: ``_info.json`` next to the shards.
        cache: index location where counts from a counting pass are written (default: none,
            the counts are kept in this process only).
        format: the shard format that counts and reads/writes the index (default tar).
        source: where shards are opened (default: every scheme with ``storage_options``).
        storage_options / allow_pipe: how shards (without ``source``) and indexes are opened.
        max_threads: shards counted concurrently during a counting pass. Default 4.
    """
    fmt: Any = format if format is not None else TarFormat()
    src = source if source is not None else SchemeRouter(storage_options, allow_pipe)
    known: dict[str, int] = {}
    if isinstance(index, Mapping):
        known.update(index)
    else:
        locations = [index] if index is not None else sorted({_dirname(u) for u in urls if "/" in u})
        if cache is not None:
            locations.append(cache)
        for location in locations:
            known.update(_from_index(location, fmt, storage_options))

    def lookup(url: str) -> int | None:
        for key in (url, _basename(url)):
            if key in known:
                return known[key]
        return _COUNTED.get(url)

    missing = sorted({u for u in urls if lookup(u) is None})
    if missing:
        start = time.perf_counter()
        with GatedExecutor(max_workers=max(1, min(max_threads, len(missing)))) as pool:
            counted = list(
                pool.map(
                    lambda u: fmt.count(src, u),
                    missing,
                )
            )
        _COUNTED.update(zip(missing, counted, strict=True))
        log.info(
            "counted %d samples in %d shards in %.2fs (no index entry for them); write shards with "
            "ShardWriter (it writes _info.json) or pass cache= to skip this pass next time",
            sum(counted),
            len(missing),
            time.perf_counter() - start,
        )
        if cache is not None:
            fmt.write_counts(
                cache, {_basename(u): n for u, n in zip(missing, counted, strict=True)}, storage_options
            )
    result = []
    for url in urls:
        n = lookup(url)
        if n is None:
            raise ConfigurationError(f"no sample count for shard {url}; pass index={{...}} with its count")
        result.append(n)
    return result


def clear_cache() -> None:
    """Forget the counts of earlier counting passes in this process (tests, changed shards)."""
    _COUNTED.clear()
