"""The shard index ``_info.json``: per-shard sample counts next to the shards, and where each sample lies.

Format (version 1)::

    {"format": "shardstream-index", "version": 1, "head": 412,
     "table": {"shards": 2, "brace": "train-{000000..000001}.tar", "dtype": "<u4", "samples": "6AMAAOgDAAA=",
               "sidecars": true},
     "shards": [
      {"url": "train-000000.tar", "samples": 1000, "bytes": 52428800, "sidecar": true},
      {"url": "train-000001.tar", "samples": 1000, "bytes": 52428800, "sidecar": true}
    ]}

``url`` is the shard's basename, so a directory of shards and its index can be moved or copied
(to S3, say) together. Splitting code uses the counts to compute ``len()`` and equal batch counts
per rank without opening the shards.

Three parts, for three kinds of reader:

* the *head* (``head``, ``table``): every shard's count in a compact form that a rank or worker
  reads without the rest of the file (:mod:`._table`); at a million shards about 5 MB, read
  and parsed in a few tens of milliseconds;
* ``shards``: one entry per shard, the source of truth (tools, ``ls``, ``verify``, merges);
* per-sample ``offsets`` and ``sizes`` in one small binary *sidecar* per shard,
  ``_offsets/{url}.bin`` beside the index (:mod:`.offsets`), named by ``"sidecar": true``:
  ``ShardDataset`` reads the sidecars of the shards it touches, one request each, and nothing
  else reads them.

Entry keys: ``url``, ``samples``, ``bytes`` (``-1``: unknown); optionally ``extensions`` (samples
per extension) and ``sidecar``. In memory (:class:`IndexEntry`, as writers make them and as
``read_index_entries(..., offsets=True)`` returns them) an entry carries its ``offsets`` (where
each sample starts, its first member's first header, in the uncompressed tar stream: resume and
``TarFormat.sample_at`` seek there) and ``sizes`` (each sample's bytes from its offset, all its
members, headers and padding included, so bytes ``[offset, offset + size)`` parsed as tar give
exactly that sample: ``ShardDataset``'s random access; written for uncompressed shards only). A
sample's range may also hold members that belong to no sample (``__meta__``), and the last
sample's range may end with the end-of-archive blocks (shards written by other tools may pad
them); parsing skips both. :func:`write_index` moves in-memory offsets to sidecars.

Compatibility: readers of version 1 ignore keys they do not know, so older shardstream reads
these indexes (it finds no inline offsets and indexes a shard when ``ShardDataset`` needs it),
and this one reads older indexes: without a head the counts come from the entries, and inline
``offsets``/``sizes`` are still read (rewriting such an index moves them to sidecars).
Every writer records offsets and sizes as it writes (``ShardWriter``, ``pack``, the Ray writer),
and ``TarWriter``-based ones (``ShardWriter``, ``pack``) the samples per extension too; an index
without ``extensions`` still reads (``shardstream ls --scan`` counts them from the shards), and
``shardstream index`` writes everything for shards written elsewhere.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from ..errors import ConfigurationError, IndexFormatError, ShardNotFoundError, redact_url
from ..forks import GatedExecutor
from ..sources import create_url, read_url
from ._table import CountTable, encode_table, index_text, read_head
from .offsets import read_sidecar, sidecar_url, write_sidecars

__all__ = [
    "INDEX_FORMAT",
    "INDEX_NAME",
    "CountTable",
    "IndexEntry",
    "index_url",
    "read_count_table",
    "read_counts",
    "read_index",
    "read_index_entries",
    "sample_sizes",
    "write_index",
]

log = logging.getLogger(__name__)

INDEX_NAME = "_info.json"
INDEX_FORMAT = "shardstream-index"
_VERSION = 1
#: Sidecars read at once by ``read_index_entries(..., offsets=True)``.
_READ_THREADS = 8


class _RequiredEntry(TypedDict):
    url: str
    samples: int
    bytes: int


class IndexEntry(_RequiredEntry, total=False):
    """One shard in the index: ``url``, ``samples``, ``bytes`` (``-1``: unknown); optionally
    ``offsets`` (the byte offset where each sample starts), ``sizes`` (each sample's bytes from
    there), ``extensions`` (samples per extension) and ``sidecar`` (its offsets are in its
    sidecar file, not loaded); see the module doc."""

    offsets: list[int]
    sizes: list[int]
    extensions: dict[str, int]
    sidecar: bool


def sample_sizes(offsets: list[int], end: int) -> list[int]:
    """Each sample's size from the offsets where samples start and ``end``, the offset of the
    shard's end-of-archive blocks (its uncompressed size less 1024 for shards we write)."""
    return [b - a for a, b in zip(offsets, [*offsets[1:], end], strict=True)]


def index_url(url_or_dir: str) -> str:
    """The index URL for a directory/prefix URL, or ``url_or_dir`` itself if it ends in ``.json``."""
    if url_or_dir.endswith(".json"):
        return url_or_dir
    return url_or_dir.rstrip("/") + "/" + INDEX_NAME if url_or_dir else INDEX_NAME


def _directory(url: str) -> str:
    return url.rpartition("/")[0]


def _whole(url: str, storage_options: Mapping[str, Any] | None) -> bytes:
    """The index file: its head, then the rest when the head was not all of it."""
    _, data, whole = read_head(url, storage_options)
    if not whole:  # (the rest, bounded by max_body)
        data += read_url(url, offset=len(data), storage_options=storage_options)
    return data


def read_index_entries(
    url_or_dir: str, *, storage_options: Mapping[str, Any] | None = None, offsets: bool = False
) -> list[IndexEntry]:
    """The index's shard entries, sorted by shard name.

    Args:
        url_or_dir: the directory (or URL prefix) holding the shards, or the index file's URL.
        storage_options: passed to the URL's source.
        offsets: also read each entry's offsets and sizes from its sidecar (one request per
            shard); default False: entries with a sidecar say ``"sidecar": True`` instead.

    Raises:
        ShardNotFoundError: no index there.
        ConfigurationError: the file is not a shardstream index of a known version.
        IndexFormatError: it (or, with ``offsets``, a sidecar) is truncated or corrupt.
    """
    url = index_url(url_or_dir)
    entries = _entries(url, _whole(url, storage_options))
    if offsets:
        _load_sidecars(url, entries, storage_options)
    return entries


def _load_sidecars(url: str, entries: list[IndexEntry], storage_options: Mapping[str, Any] | None) -> None:
    listed = [e for e in entries if e.get("sidecar")]

    def load(entry: IndexEntry) -> None:
        where = sidecar_url(_directory(url), entry["url"])
        found, sizes = read_sidecar(where, entry["samples"], storage_options=storage_options)
        entry["offsets"] = found.tolist()
        if sizes is not None:
            entry["sizes"] = sizes.tolist()
        del entry["sidecar"]

    with GatedExecutor(max(1, min(_READ_THREADS, len(listed))), "shardstream-index") as pool:
        for _ in pool.map(load, listed):
            pass


def _entries(url: str, raw: bytes) -> list[IndexEntry]:
    data = _parse(url, raw)
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
            if item.get("sidecar") and "offsets" not in entry:
                entry["sidecar"] = True
            entries.append(entry)
        except (KeyError, TypeError, ValueError) as exc:
            raise IndexFormatError(
                f"index {redact_url(url)} has a malformed shard entry {redact_url(item, limit=200)} "
                f"({exc}); rewrite it with `shardstream index {redact_url(_directory(url) or '.')}`"
            ) from exc
    return entries


def _parse(url: str, raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise IndexFormatError(
            f"index {redact_url(url)} is not valid JSON ({exc}): truncated or corrupt. Copy it again, "
            f"rewrite it with `shardstream index {redact_url(_directory(url) or '.')}`, or delete it"
        ) from exc
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
        raise ConfigurationError(
            f'{redact_url(url)} is not a shardstream index (no "format": "{INDEX_FORMAT}")'
        )
    if data.get("version") != _VERSION:
        raise ConfigurationError(
            f"index {redact_url(url)} has version {data.get('version')!r}; this shardstream reads version "
            f"{_VERSION}. Upgrade shardstream or rewrite the index."
        )
    return data


#: An entry as :func:`write_index` writes it: ``{"url": "<name>", "samples": <n>, ...``.
_COUNT = re.compile(rb'\{"url": "([^"\\]*)", "samples": (\d+)')


def _counts(url: str, raw: bytes) -> dict[str, int]:
    """Counts of an index without a head: a scan of the entries' ``url``/``samples`` pairs when the
    layout is :func:`write_index`'s (a full parse builds a dict per entry, several times the time
    and memory of the scan at a million shards: ``benchmarks/results/bench_plan.md``), else a
    full parse."""
    if f'"format": "{INDEX_FORMAT}", "version": {_VERSION}'.encode() in raw[:200]:
        found = {m.group(1).decode(): int(m.group(2)) for m in _COUNT.finditer(raw)}
        if len(found) == raw.count(b'"url":'):  # every entry matched (and no name twice)
            return found
    return {e["url"]: e["samples"] for e in _entries(url, raw)}


def read_counts(url_or_dir: str, *, storage_options: Mapping[str, Any] | None = None) -> Mapping[str, int]:
    """Every shard's sample count, ``{name: samples}``: the index's :class:`CountTable` when it has
    one, else a dict (an index written before the table, read whole as before).

    Every rank and worker of a job reads the counts, so an index with a head is read only up to
    the end of its counts table (one or two ranged requests; the bytes read at a million shards
    are in ``benchmarks/results/bench_plan.md``).

    Raises:
        ShardNotFoundError: no index there.
        ConfigurationError / IndexFormatError: as :func:`read_index_entries`.
    """
    url = index_url(url_or_dir)
    table, data, whole = read_head(url, storage_options)
    if table is not None:
        return table
    if not whole:
        data += read_url(url, offset=len(data), storage_options=storage_options)
    return _counts(url, data)


def read_count_table(url_or_dir: str, *, storage_options: Mapping[str, Any] | None = None) -> CountTable:
    """:func:`read_counts` as a :class:`CountTable` (made from the entries for an older index)."""
    counts = read_counts(url_or_dir, storage_options=storage_options)
    return counts if isinstance(counts, CountTable) else CountTable.from_counts(index_url(url_or_dir), counts)


def read_index(url_or_dir: str, *, storage_options: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Map each shard's basename to its sample count (see :func:`read_counts`, which keeps the
    counts compact and matches a URL list against them without a dict)."""
    counts = read_counts(url_or_dir, storage_options=storage_options)
    if isinstance(counts, CountTable):
        return dict(zip(counts.names.tolist(), counts.samples.tolist(), strict=True))
    return dict(counts)


def write_index(
    url_or_dir: str,
    entries: Iterable[IndexEntry],
    *,
    merge: bool = True,
    storage_options: Mapping[str, Any] | None = None,
) -> str:
    """Write (or update) an index and the sidecars of the entries that carry offsets; returns its URL.

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
            log.warning("replacing unreadable index %s: %s", redact_url(url), exc)
    for entry in new:
        merged[entry["url"]] = entry
    shards = sorted(merged.values(), key=lambda e: e["url"])
    # Sidecars first: a reader that finds the index finds the sidecars it names.
    moving = [e for e in shards if "offsets" in e]
    write_sidecars(_directory(url), moving, storage_options=storage_options)
    table = encode_table(shards)
    # One shard per line: readable, and diffs stay small when shards are added.
    lines = [json.dumps(_persisted(e)) for e in shards]
    text = index_text(table, lines, _VERSION, INDEX_FORMAT)
    with create_url(url, storage_options=storage_options) as stream:
        stream.write(text)
    log.info("wrote index %s (%d shards, %d offsets sidecars)", redact_url(url), len(merged), len(moving))
    return url


def _persisted(entry: IndexEntry) -> dict[str, Any]:
    """The entry as the file holds it: offsets and sizes go to the sidecar."""
    out: dict[str, Any] = {k: v for k, v in entry.items() if k not in ("offsets", "sizes", "sidecar")}
    if "offsets" in entry or entry.get("sidecar"):
        out["sidecar"] = True
    return out
