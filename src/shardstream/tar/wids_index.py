"""The ``wids`` shard index: the JSON file ``wids.ShardListDataset`` takes in place of a shard list.

Format (``wids_version`` 1, as the ``wids`` package of WebDataset reads and writes it)::

    {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "train",
     "shardlist": [{"url": "train-000000.tar", "nsamples": 1000, "filesize": 52428800}, ...]}

A relative ``url`` is resolved against ``base`` when the file has one, else against the
directory of the index file itself. ``shardstream index --wids`` writes it;
``shardstream.wids.ShardListDataset`` reads it (and the sub-``datasets`` form of the format, one
level deep). Only ``url`` and ``nsamples`` are required in each entry.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError, redact_url
from ..sources import create_url, read_url

__all__ = [
    "WIDS_KIND",
    "make_wids_index",
    "read_wids_index",
    "resolve_url",
    "resolve_wids_index",
    "write_wids_index",
]

WIDS_KIND = "wids-shard-index-v1"


def make_wids_index(shards: Iterable[Mapping[str, Any]], *, name: str | None = None) -> dict[str, Any]:
    """The index's JSON object for ``shards`` (dicts with ``url``, ``nsamples``, optionally
    ``filesize``), in the order given."""
    index: dict[str, Any] = {"__kind__": WIDS_KIND, "wids_version": 1, "shardlist": [dict(s) for s in shards]}
    if name:
        index["name"] = name
    return index


def write_wids_index(
    url: str, index: Mapping[str, Any], *, storage_options: Mapping[str, Any] | None = None
) -> str:
    """Write ``index`` (from :func:`make_wids_index`) to ``url``, a path or a writable URL."""
    with create_url(url, storage_options=storage_options) as stream:
        stream.write((json.dumps(index, indent=1) + "\n").encode("utf-8"))
    return url


def resolve_url(base: str, url: str) -> str:
    """``url`` made absolute against ``base`` (a directory path or URL prefix): kept as is when
    it has a scheme or is an absolute path."""
    if "://" in url or url.startswith("/") or not base:
        return url
    return base.rstrip("/") + "/" + url


def _shardlist(data: Mapping[str, Any], base: str, where: str) -> list[dict[str, Any]]:
    shards: list[dict[str, Any]] = []
    base = str(data.get("base", base))
    for item in data.get("shardlist", []):
        if not isinstance(item, Mapping) or "url" not in item or "nsamples" not in item:
            raise ConfigurationError(
                f"wids index {where} has a shard entry {redact_url(item, limit=200)} without 'url' and "
                "'nsamples'; every entry needs both (rewrite it with `shardstream index --wids`)"
            )
        shard = dict(item)
        shard["url"] = resolve_url(base, str(item["url"]))
        if "name" in data:
            shard.setdefault("dataset", data["name"])
        shards.append(shard)
    return shards


def read_wids_index(
    url: str,
    *,
    base: str | None = None,
    options: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Read a wids index: the JSON object, with ``shardlist`` resolved to absolute URLs (those of
    its ``datasets`` appended after its own).

    Args:
        url: the index file (a path or URL).
        base: resolve relative shard URLs against this instead of ``url``'s directory.
        options: keys that override the file's top-level keys.
        storage_options: passed to the URL's source.

    Raises:
        ConfigurationError: not JSON, not ``wids_version`` 1, an entry without ``url`` or
            ``nsamples``, or no shard at all.
    """
    raw = read_url(url, storage_options=storage_options)  # bounded by max_body
    where = redact_url(url)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError(f"wids index {where} is not valid JSON ({exc})") from exc
    root = base if base is not None else url.rpartition("/")[0]
    return resolve_wids_index(data, base=root, options=options, where=where, storage_options=storage_options)


def resolve_wids_index(
    data: Any,
    *,
    base: str,
    options: Mapping[str, Any] | None = None,
    where: str = "<index>",
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A loaded wids index (see :func:`read_wids_index`) with its ``shardlist`` resolved
    against ``base`` and its ``datasets`` appended; ``where`` names it in errors."""
    if not isinstance(data, dict):
        raise ConfigurationError(f"wids index {where} holds a {type(data).__name__}, not a JSON object")
    data.update(options or {})
    if data.get("wids_version") != 1:
        raise ConfigurationError(
            f"{where} is not a wids index of version 1 (wids_version={data.get('wids_version')!r}); "
            "write one with `shardstream index --wids`"
        )
    shards = _shardlist(data, base, where)
    for part in data.get("datasets", []):
        if "source_url" in part:
            source = str(part["source_url"])
            sub = read_wids_index(resolve_url(base, source), storage_options=storage_options)
            weight = {"weight": part["weight"]} if "weight" in part else {}
            shards += [{**shard, **weight} for shard in sub["shardlist"]]
        else:
            shards += _shardlist(part, base, where)
    if not shards:
        raise ConfigurationError(f"wids index {where} lists no shards")
    data["shardlist"] = shards
    return data
