"""The shard index ``_info.json``: per-shard sample counts, and where each sample lies, next to the shards.

Format (version 1)::

    {"format": "shardstream-index", "version": 1,
     "shards": [{"url": "train-000000.tar", "samples": 1000, "bytes": 52428800,
                 "offsets": [0, 52736, ...], "sizes": [52736, 40448, ...]}, ...]}

``url`` is the shard's basename, so a directory of shards and its index can be moved or copied
(to S3, say) together. Splitting code uses the counts to compute ``len()`` and equal batch counts
per rank without opening the shards.

Optional keys (readers of version 1 ignore keys they do not know, so older readers still read
indexes that have them):

* ``offsets``: the byte offset where each sample starts (its first member's first header), in
  the uncompressed tar stream; resume and ``TarFormat.sample_at`` seek there.
* ``sizes``: each sample's bytes from its offset: all its members, headers and padding
  included, so bytes ``[offset, offset + size)`` parsed as tar give exactly that sample (the
  random access of ``ShardDataset``). Written for uncompressed shards only (a range of a
  compressed stream cannot be read alone). A sample's range may also hold members that belong
  to no sample (``__meta__``), and the last sample's range may end with the end-of-archive
  blocks (shards written by other tools may pad them); parsing skips both.
* ``extensions``: samples per extension.

Every writer records ``offsets`` and ``sizes`` as it writes (``ShardWriter``, ``pack``, the Ray
writer); ``shardstream index`` writes the same keys for shards written elsewhere.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from ..errors import ConfigurationError, ShardNotFoundError
from ..sources import create_url, open_url

__all__ = [
    "INDEX_FORMAT",
    "INDEX_NAME",
    "IndexEntry",
    "index_url",
    "sample_sizes",
    "read_index",
    "read_index_entries",
    "write_index",
]

log = logging.getLogger(__name__)

INDEX_NAME = "_info.json"
INDEX_FORMAT = "shardstream-index"
_VERSION = 1


class _RequiredEntry(TypedDict):
    url: str
    samples: int
    bytes: int


class IndexEntry(_RequiredEntry, total=False):
    """One shard in the index: ``url``, ``samples``, ``bytes`` (``-1``: unknown); optionally
    ``offsets`` (the byte offset where each sample starts), ``sizes`` (each sample's bytes from
    there) and ``extensions`` (samples per extension); see the module doc."""

    offsets: list[int]
    sizes: list[int]
    extensions: dict[str, int]


def sample_sizes(offsets: list[int], end: int) -> list[int]:
    """Each sample's size from the offsets where samples start and ``end``, the offset of the
    shard's end-of-archive blocks (its uncompressed size less 1024 for shards we write)."""
    return [b - a for a, b in zip(offsets, [*offsets[1:], end], strict=True)]


def index_url(url_or_dir: str) -> str:
    """The index URL for a directory/prefix URL, or ``url_or_dir`` itself if it ends in ``.json``."""
    if url_or_dir.endswith(".json"):
        return url_or_dir
    return url_or_dir.rstrip("/") + "/" + INDEX_NAME if url_or_dir else INDEX_NAME


def read_index_entries(
    url_or_dir: str, *, storage_options: Mapping[str, Any] | None = None
) -> list[IndexEntry]:
    """The index's shard entries, sorted by shard name.

    Args:
        url_or_dir: the directory (or URL prefix) holding the shards, or the index file's URL.
        storage_options: passed to the URL's source.

    Raises:
        ShardNotFoundError: no index there.
        ConfigurationError: the file is not a shardstream index of a known version.
    """
    url = index_url(url_or_dir)
    with open_url(url, storage_options=storage_options) as stream:
        raw = stream.read()
    return _entries(url, raw)


def _entries(url: str, raw: bytes) -> list[IndexEntry]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ConfigurationError(
            f"index {url} is not valid JSON ({exc}); delete it or rewrite the shards"
        ) from exc
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
        raise ConfigurationError(f'{url} is not a shardstream index (no "format": "{INDEX_FORMAT}")')
    if data.get("version") != _VERSION:
        raise ConfigurationError(
            f"index {url} has version {data.get('version')!r}; this shardstream reads version {_VERSION}. "
            "Upgrade shardstream or rewrite the index."
        )
    entries: list[IndexEntry] = []
    for item in data.get("shards", []):
        try:
            entry = IndexEntry(url=str(item["url"]), samples=int(item["samples"]), bytes=int(item["bytes"]))
            if "offsets" in item:
                entry["offsets"] = [int(o) for o in item["offsets"]]
            if "sizes" in item:
                entry["sizes"] = [int(n) for n in item["sizes"]]
                if len(entry["sizes"]) != len(entry.get("offsets", ())):
                    raise ValueError(
                        f"{len(entry['sizes'])} sizes for {len(entry.get('offsets', ()))} offsets"
                    )
            if "extensions" in item:
                entry["extensions"] = {str(k): int(v) for k, v in dict(item["extensions"]).items()}
            entries.append(entry)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"index {url} has a malformed shard entry {str(item)[:200]} ({exc}); rewrite it with "
                "`shardstream index`"
            ) from exc
    return entries


#: An entry as :func:`write_index` writes it: ``{"url": "<name>", "samples": <n>, ...``.
_COUNT = re.compile(rb'\{"url": "([^"\\]*)", "samples": (\d+)')


def read_index(url_or_dir: str, *, storage_options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Map each shard's basename to its sample count (see :func:`read_index_entries`).

    Every rank and worker of a job reads the counts, so an index written by :func:`write_index`
    takes a scan for its ``url``/``samples`` pairs instead of a full JSON parse, which builds a
    dict per entry: the counts of a million shards from one index in 1.5 s and +174 MB of peak
    memory, against 3.7 s and +528 MB (``benchmarks/results/bench_plan.md``). Anything else
    (another writer's layout, names with escapes) is parsed in full.
    """
    url = index_url(url_or_dir)
    with open_url(url, storage_options=storage_options) as stream:
        raw = stream.read()
    head = raw[:200]
    if f'"format": "{INDEX_FORMAT}", "version": {_VERSION}'.encode() in head:
        found = {m.group(1).decode(): int(m.group(2)) for m in _COUNT.finditer(raw)}
        if len(found) == raw.count(b'"url":'):  # every entry matched (and no name twice)
            return found
    return {e["url"]: e["samples"] for e in _entries(url, raw)}


def write_index(
    url_or_dir: str,
    entries: Iterable[IndexEntry],
    *,
    merge: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Write (or update) an index; returns its URL.

    Args:
        url_or_dir: directory/prefix URL of the shards, or the index file's URL.
        entries: shard entries; ``url`` should be the shard's basename.
        merge: keep entries of an existing index for shards not in ``entries``, so writers with
            different patterns (``train-%06d.tar``, ``val-%06d.tar``) can share a directory. Two
            processes updating one index at the same moment can still lose an update.
        storage_options: passed to the URL's source.
    """
    url = index_url(url_or_dir)
    new = list(entries)
    merged: dict[str, IndexEntry] = {}
    if merge:
        try:
            merged = {e["url"]: e for e in read_index_entries(url, storage_options=storage_options)}
        except ShardNotFoundError:
            pass
        except ConfigurationError as exc:
            log.warning("replacing unreadable index %s: %s", url, exc)
    for entry in new:
        merged[entry["url"]] = entry
    shards = sorted(merged.values(), key=lambda e: e["url"])
    # One shard per line: readable, and diffs stay small when shards are added.
    lines = ",\n  ".join(json.dumps(dict(e)) for e in shards)
    text = f'{{"format": "{INDEX_FORMAT}", "version": {_VERSION}, "shards": [\n  {lines}\n]}}\n'
    with create_url(url, storage_options=storage_options) as stream:
        stream.write(text.encode("utf-8"))
    log.info("wrote index %s (%d shards)", url, len(merged))
    return url
