"""A command's URLSPEC -> the shard URLs it names, and the ``_info.json`` indexes beside them.

A URLSPEC is what ``Dataset`` accepts (``${VAR}`` variables, brace ranges, ``::``-joined parts),
plus two forms a shell user reaches for: a local directory (its ``*.tar``, ``*.tar.gz`` and
``*.tgz`` files, sorted) or a local glob, and a remote prefix ending in ``/`` (the shards its
``_info.json`` lists, else, on a store that lists (``s3://``, ``gs://``, ``az://``, ``hf://``,
fsspec's), the shards directly under it; ``http(s)://`` needs the index).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError, ShardNotFoundError
from ..shards.spec import expand_urls
from ..sources import get_source, scheme_of, with_defaults
from ..sources.file import local_path
from ..tar.index import INDEX_NAME, IndexEntry, read_index_entries

__all__ = ["SHARD_SUFFIXES", "directory_of", "read_indexes", "resolve", "split_url"]

SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_GLOB = frozenset("*?[")


def split_url(url: str) -> tuple[str, str]:
    """``(directory, basename)`` of a shard URL (the directory is ``""`` for a bare name)."""
    head, _, tail = url.rpartition("/")
    return head, tail


def directory_of(url: str) -> str:
    """Where the index of shard ``url`` lives (its directory or prefix)."""
    return split_url(url)[0]


def _local_shards(path: str) -> list[str]:
    names = sorted(n for n in os.listdir(path) if n.endswith(SHARD_SUFFIXES) and not n.startswith("."))
    return [os.path.join(path, n) for n in names]


def _from_index(prefix: str, storage_options: Mapping[str, Any]) -> list[str]:
    try:
        entries = read_index_entries(prefix, storage_options=storage_options)
    except ShardNotFoundError:
        listed = _listed_shards(prefix, storage_options)
        if listed is not None:
            return listed
        raise ConfigurationError(
            f"{prefix} holds no {INDEX_NAME} index, and {scheme_of(prefix)}:// is not listed; name the "
            f"shards with a brace spec (e.g. '{prefix}train-{{000000..000099}}.tar'), then `shardstream "
            "index` it to make the prefix listable"
        ) from None
    return [prefix.rstrip("/") + "/" + e["url"] for e in entries]


def _listed_shards(prefix: str, storage_options: Mapping[str, Any]) -> list[str] | None:
    """The shards directly under ``prefix`` of a store that lists (``None``: it does not)."""
    source = with_defaults(get_source(prefix, storage_options)).route(prefix)
    if not source.can_list:
        return None
    base = prefix.rstrip("/") + "/"
    names = sorted(
        item.key
        for item in source.list_objects(base)
        if "/" not in item.key and item.key.endswith(SHARD_SUFFIXES) and not item.key.startswith(".")
    )
    if not names:
        raise ConfigurationError(
            f"{prefix} holds no shards (objects ending in {', '.join(SHARD_SUFFIXES)} directly under it)"
        )
    return [base + name for name in names]


def resolve(spec: str | Sequence[str], *, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The shard URLs ``spec`` names, in order, without duplicates.

    Raises:
        ConfigurationError: the spec names nothing (an empty directory, a glob without matches,
            a remote prefix without index).
    """
    options = dict(storage_options or {})
    urls: list[str] = []
    for url in expand_urls(spec):
        if scheme_of(url) == "file":
            path = local_path(url)
            if os.path.isdir(path):
                found = _local_shards(path)
                if not found and os.path.exists(os.path.join(path, INDEX_NAME)):
                    found = _from_index(path, options)
                if not found:
                    raise ConfigurationError(
                        f"directory {path!r} holds no shards (files ending in {', '.join(SHARD_SUFFIXES)})"
                    )
                urls.extend(found)
                continue
            if _GLOB & set(path) and not os.path.exists(path):
                found = sorted(p for p in glob.glob(path) if os.path.isfile(p))
                if not found:
                    raise ConfigurationError(f"the pattern {path!r} matches no files")
                urls.extend(found)
                continue
        elif url.endswith("/"):
            urls.extend(_from_index(url, options))
            continue
        urls.append(url)
    return list(dict.fromkeys(urls))


def read_indexes(
    urls: Sequence[str], *, storage_options: Mapping[str, Any] | None = None, offsets: bool = False
) -> dict[str, dict[str, IndexEntry] | None]:
    """For each directory of ``urls``: its index as ``{basename: entry}``, or ``None`` if it has none
    (``offsets``: with each entry's offsets and sizes, read from the sidecars).

    Raises:
        ConfigurationError: an index exists but is unreadable.
    """
    result: dict[str, dict[str, IndexEntry] | None] = {}
    for directory in dict.fromkeys(directory_of(u) for u in urls):
        if scheme_of(directory or ".") == "pipe":
            result[directory] = None
            continue
        try:
            entries = read_index_entries(directory, storage_options=storage_options, offsets=offsets)
        except ShardNotFoundError:
            result[directory] = None
            continue
        result[directory] = {e["url"]: e for e in entries}
    return result
