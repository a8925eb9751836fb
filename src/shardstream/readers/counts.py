"""Samples per shard: from the ``_info.json`` index, or from a one-time counting pass that is cached.

Lookup order for each shard URL:

1. an explicit mapping ``{basename or url: samples}`` passed as ``index``;
2. the index file named by ``index`` (a directory, prefix URL or ``.json`` URL), else the
   ``_info.json`` next to the shards (written by :class:`~shardstream.tar.ShardWriter`; the format reads
   and writes it);
3. the process-wide cache of earlier counting passes;
4. a counting pass over the shard (the format's ``count``; nothing is decoded): for a local,
   uncompressed tar shard a walk over its headers that skips the members' data
   (:mod:`shardstream.tar.walk`), for the others a read of its bytes. Its results are kept in the
   process cache and, when ``cache`` names a location, written there in the same index format so
   the next run (and every other rank) skips the pass.

Scale: every rank and DataLoader worker reads the counts at the start of a run. When the URLs
are a run of consecutive shards of one index (a brace spec over a directory: the usual case),
:func:`shard_count_array` reads only the index's counts table and returns a slice of it, with no
per-URL Python work and no second copy of the names (``CountTable.counts_for``): a fraction of
the time and memory of reading the index's entries (``benchmarks/results/bench_plan.md``, counts
of 1,000,000 shards). Other URL lists are looked up one by one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..errors import ConfigurationError, IndexFormatError, ShardNotFoundError, redact_url
from ..forks import GatedExecutor
from ..sources import SchemeRouter, Source
from ..tar.index import CountTable
from ..tar.samples import TarFormat
from .read_shards import ShardFormat

__all__ = ["CountSource", "count_samples", "shard_count_array", "shard_counts"]

log = logging.getLogger(__name__)

#: An index location, or counts keyed by shard basename (or full URL).
CountSource = str | Mapping[str, int] | None

_COUNTED: dict[str, int] = {}


def _basename(url: str) -> str:
    return url.rstrip("/").rpartition("/")[2]


def count_samples(
    url: str,
    *,
    format: ShardFormat | None = None,  # noqa: A002
    source: Source | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
) -> int:
    """Count the samples of one shard (consecutive members sharing a key): from its headers when it
    is a local, uncompressed tar file, else by reading it (see ``TarFormat.count``)."""
    fmt = format if format is not None else TarFormat()
    src = source if source is not None else SchemeRouter(storage_options, allow_pipe)
    return fmt.count(src, url)


def _from_index(location: str, fmt: Any, storage_options: Mapping[str, Any] | None) -> Mapping[str, int]:
    try:
        return fmt.read_counts(location, storage_options)  # type: ignore[no-any-return]
    except ShardNotFoundError:
        return {}
    except IndexFormatError:
        raise  # truncated or corrupt: counting a million shards instead would hide it for hours
    except ConfigurationError as exc:
        log.warning("ignoring unreadable shard index at %s: %s", redact_url(location), exc)
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

    Raises:
        IndexFormatError: an index is truncated or corrupt (the message names it and the fix).
        ConfigurationError: a shard has no count and cannot be counted.
    """
    counts = _counts(urls, index, cache, format, source, storage_options, allow_pipe, max_threads)
    return counts.tolist() if isinstance(counts, np.ndarray) else counts


def shard_count_array(
    urls: Sequence[str],
    *,
    index: CountSource = None,
    cache: str | None = None,
    format: ShardFormat | None = None,  # noqa: A002
    source: Source | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
    max_threads: int = 4,
) -> npt.NDArray[np.int64]:
    """:func:`shard_counts` as an ``int64`` array (8 bytes per shard, against about 40 for a list
    of ints; possibly a read-only view of the index's table). Same arguments."""
    counts = _counts(urls, index, cache, format, source, storage_options, allow_pipe, max_threads)
    return counts if isinstance(counts, np.ndarray) else np.array(counts, dtype=np.int64)


def _counts(
    urls: Sequence[str],
    index: CountSource,
    cache: str | None,
    format: ShardFormat | None,  # noqa: A002
    source: Source | None,
    storage_options: Mapping[str, Any] | None,
    allow_pipe: bool,
    max_threads: int,
) -> npt.NDArray[np.int64] | list[int]:
    fmt: Any = format if format is not None else TarFormat()
    known: Mapping[str, int] = {}
    read: dict[str, Mapping[str, int]] = {}
    if isinstance(index, Mapping):
        known = index
    elif urls and cache is None and (index is not None or "/" in urls[0]):
        # The usual case first: one index, the URLs a run of its shards (a slice of its table).
        location = index if index is not None else urls[0].rpartition("/")[0]
        table = read[location] = _from_index(location, fmt, storage_options)
        if isinstance(table, CountTable):
            aligned = table.counts_for(urls)
            if aligned is not None:
                return aligned
    if not isinstance(index, Mapping):
        # One read per index location (a dataset-level _info.json is read once, whatever the
        # number of shards), and no copy of a lone index's mapping.
        locations = [index] if index is not None else sorted({u.rpartition("/")[0] for u in urls if "/" in u})
        if cache is not None:
            locations.append(cache)
        for location in locations:
            if location not in read:
                read[location] = _from_index(location, fmt, storage_options)
        if len(locations) == 1:
            known = read[locations[0]]
        else:
            merged: dict[str, int] = {}
            for location in locations:
                merged.update(read[location])
            known = merged
    counts = _lookup(urls, known)
    missing = sorted({u for u, n in zip(urls, counts, strict=True) if n is None}) if None in counts else []
    if missing:
        src = source if source is not None else SchemeRouter(storage_options, allow_pipe)
        start = time.perf_counter()
        with GatedExecutor(max_workers=max(1, min(max_threads, len(missing)))) as pool:
            counted = list(pool.map(lambda u: fmt.count(src, u), missing))
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
    if not missing:
        return cast(list[int], counts)
    result: list[int] = []
    for url, n in zip(urls, counts, strict=True):
        if n is None:
            n = _COUNTED.get(url)
        if n is None:
            raise ConfigurationError(f"no sample count for shard {url}; pass index={{...}} with its count")
        result.append(n)
    return result


def _lookup(urls: Sequence[str], known: Mapping[str, int]) -> list[int | None]:
    """Each URL's count: by full URL, else by basename, else from an earlier counting pass
    (``None`` where none has it). One pass, ``O(1)`` per URL."""
    if isinstance(known, CountTable):  # a dict's lookups are faster than the table's
        known = dict(zip(known.names.tolist(), known.samples.tolist(), strict=True))
    get = known.get
    # An index keys shards by basename; only a mapping may hold full URLs. (Comprehensions, and
    # no full-URL pass when no key could match one: this runs for a million URLs per dataset.)
    if any("/" in key for key in known):
        result: list[int | None] = [get(u) for u in urls]
    else:
        result = [None] * len(urls)
    if None in result:
        result = [
            get(u.rstrip("/").rpartition("/")[2]) if n is None else n
            for u, n in zip(urls, result, strict=True)
        ]
    if None in result and _COUNTED:
        result = [_COUNTED.get(u) if n is None else n for u, n in zip(urls, result, strict=True)]
    return result


def clear_cache() -> None:
    """Forget the counts of earlier counting passes in this process (tests, changed shards)."""
    _COUNTED.clear()
