"""The sizes shards have now, found cheaply: what ``ls`` checks an index's figures against.

A local shard costs a ``stat``. The shards under one prefix of a store that lists (``s3://``,
``gs://``, ``az://``, ``hf://``) cost one listing of that prefix (a page per 1,000 objects or
more, not a request per shard); where listing is refused or impossible (``http(s)://``), a
``HEAD`` per shard, ``jobs`` at a time. Reading the shards (``verify``) is what checks more.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ShardNotFoundError, ShardStreamError, SourceError
from ..forks import GatedExecutor
from ..sources import get_source, scheme_of, stat_url, with_defaults

__all__ = ["Size", "shard_sizes"]

log = logging.getLogger(__name__)

#: A shard's size in bytes, or why it is not known (ShardNotFoundError: there is no such shard).
Size = int | SourceError


def shard_sizes(urls: Sequence[str], *, storage_options: Mapping[str, Any], jobs: int = 8) -> dict[str, Size]:
    """The size of every shard in ``urls`` now (see the module doc for what each costs)."""
    sizes: dict[str, Size] = {}
    by_prefix: dict[str, list[str]] = {}
    for url in urls:
        by_prefix.setdefault(url.rpartition("/")[0], []).append(url)
    unlisted: list[str] = []
    for prefix, members in by_prefix.items():
        listed = _listed_sizes(prefix, storage_options) if scheme_of(members[0]) != "file" else None
        if listed is None:
            unlisted.extend(members)
            continue
        for url in members:
            size = listed.get(url.rpartition("/")[2])
            if size is None or size < 0:
                unlisted.append(url)  # not listed (or without a size): ask for it alone
            else:
                sizes[url] = size

    def one(url: str) -> Size:
        try:
            size = stat_url(url, storage_options=storage_options).size
        except SourceError as exc:
            return exc
        if size is None:
            return SourceError(f"{url}: the source does not tell its size", url=url)
        return int(size)

    with GatedExecutor(max(1, min(jobs, len(unlisted))), "shardstream-sizes") as pool:
        sizes.update(zip(unlisted, pool.map(one, unlisted), strict=True))
    return sizes


def _listed_sizes(prefix: str, storage_options: Mapping[str, Any]) -> dict[str, int] | None:
    """``{name: size}`` of the objects directly under ``prefix`` (``None``: the store does not
    list, or refused; each shard is then asked for alone)."""
    try:
        source = with_defaults(get_source(prefix, storage_options)).route(prefix)
        if not source.can_list:
            return None
        base = prefix.rstrip("/") + "/"
        return {item.key: item.size for item in source.list_objects(base) if "/" not in item.key}
    except ShardNotFoundError:
        return {}  # no bucket or container: every shard is missing
    except (ShardStreamError, OSError) as exc:
        log.debug("cannot list %s (%s): sizes by one request per shard", prefix, exc)
        return None
