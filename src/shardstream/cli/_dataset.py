"""A command's URLSPEC -> the shard URLs it names, and the ``_info.json`` indexes beside them.

A URLSPEC is what every front door accepts (:mod:`shardstream.datasets.specs`: brace ranges,
``${VAR}`` variables, ``::``-joined parts, a local directory or glob, a store prefix ending in
``/``, an ``_info.json``), resolved by the same function as ``ss.ShardStream``'s, so a spec that
works here works there. Unlike a dataset, a command does not refuse missing shards up front: it
reports them itself (``ls`` and ``stat`` show an index's rows for shards that are not there,
``verify`` counts each missing shard as a problem).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..datasets.specs import SHARD_SUFFIXES, resolve_shards
from ..errors import ShardNotFoundError
from ..sources import scheme_of
from ..tar.index import IndexEntry, read_index_entries

__all__ = ["SHARD_SUFFIXES", "directory_of", "read_indexes", "resolve", "resolve_each", "split_url"]


def split_url(url: str) -> tuple[str, str]:
    """``(directory, basename)`` of a shard URL (the directory is ``""`` for a bare name)."""
    head, _, tail = url.rpartition("/")
    return head, tail


def directory_of(url: str) -> str:
    """Where the index of shard ``url`` lives (its directory or prefix)."""
    return split_url(url)[0]


def resolve(spec: str | Sequence[str], *, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The shard URLs ``spec`` names, in order, without duplicates (see the module docstring).

    Raises:
        ConfigurationError: the spec names nothing (an empty directory, a glob without matches,
            a remote prefix without index or shards).
    """
    return list(dict.fromkeys(resolve_shards(spec, storage_options=storage_options, check=False)))


def resolve_each(specs: Sequence[str], *, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The shard URLs of several specs (the commands that take ``SPEC...``), each resolved on its
    own as :func:`resolve` does, in order, without duplicates across them."""
    return list(dict.fromkeys(u for spec in specs for u in resolve(spec, storage_options=storage_options)))


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
