"""write_shards: a Ray Data dataset of sample rows -> byte-bounded, deterministically named shards.

Three steps, each a Ray Data operation:

1. *Encode* (``map_batches``): every row becomes its tar members (``TarWriter.encode``); the
   encoded dataset is materialized, so the source is read once (a Parquet column of URLs is
   fetched once) even though the plan needs every size before anything is written.
2. *Plan* (driver): keys and sizes only (about 100 bytes per sample) come to the driver, which
   cuts the key-sorted samples into shards of at most ``shard_size`` (:mod:`._plan`).
3. *Write* (``groupby("shard").map_groups``): each group is one shard, written in key order
   by one task straight to its final URL; the driver then writes ``_info.json`` and each
   shard's offsets sidecar, every sample's offset and size (so ``ShardDataset`` reads the shards
   at random with no extra pass).

Rejected: Ray's ``write_webdataset`` (bounds shards by rows, names them by UUID and task, writes
no index); cutting shards per block as blocks arrive (sizes and names would depend on block
boundaries and scheduling); a second read of the source for the size pass (fetches every URL
twice, and the source may change between the passes).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from ..config import parse_size
from ..errors import ConfigurationError, ShardNotFoundError, ShardStreamError, redact_url
from ..sources import check_storage_options, scheme_of
from ..tar.index import IndexEntry, index_url, read_index_entries, sample_sizes, write_index
from ..tar.writer import END_OF_ARCHIVE
from ._info import ShardSetInfo
from ._plan import PlannedShard, plan_shards
from ._tasks import KEY, assign_shards, encode_rows, index_entry, select_key_sizes, write_shard

__all__ = ["absolute", "entry_with_sizes", "require_ray", "write_dataset", "write_shards"]

log = logging.getLogger(__name__)

_INSTALL = "pip install 'shardstream[ray]'"
_PARTITION_BYTES = 1 << 30


def require_ray() -> Any:
    """The ``ray`` module with Ray Data loaded; ImportError saying what to install otherwise."""
    try:
        import ray
        import ray.data  # noqa: F401  (Ray Data is the [data] extra of ray)
    except ImportError as exc:
        raise ImportError(f"writing shards on Ray needs Ray Data ({exc}): {_INSTALL}") from exc
    return ray


def write_shards(
    ds: Any,
    dst: str,
    *,
    shard_size: int | str = "256MB",
    prefix: str = "shard",
    storage_options: Mapping[str, Any] | None = None,
    encoder: Any = True,
) -> ShardSetInfo:
    """Write a Ray dataset of samples as ``{dst}/{prefix}-000000.tar``, ... and ``_info.json``.

    Rows are sample dicts as Ray Data's WebDataset reader makes them: ``__key__`` (a unique str)
    and one column per extension (bytes, str, or a value the default encoders know by extension:
    ``cls`` int, ``json`` dict, ``npy`` array, ...); a null value, or the NaN that Ray's reader
    puts in a field some samples lack, leaves the field out of that sample.

    Samples are ordered by key and cut into shards of at most ``shard_size`` tar bytes (one sample
    larger than that gets a shard of its own), so every shard but the last is within one sample of
    the target. Names and bytes depend only on the rows, never on Ray's partitioning or
    scheduling: writing the same rows twice gives identical files.

    Args:
        ds: a ``ray.data.Dataset`` of sample rows.
        dst: directory or URL prefix: a local path, ``file://`` or ``s3://bucket/prefix``.
        shard_size: most bytes per shard, an int or ``"256MB"``/``"1G"`` (binary units).
            Default ``"256MB"``.
        prefix: shard basename prefix. Default ``"shard"``.
        storage_options: options for ``dst``'s source (S3 endpoint, credentials, part size), as
            for the readers; sent to the Ray workers with each task.
        encoder: as ``TarWriter(encoder=)``: ``True`` (default encoders by extension) or
            ``False`` (every value must already be bytes or str).

    Returns:
        The shards written and the index's URL (``.spec`` is a brace spec for the readers).

    Raises:
        ConfigurationError: a duplicate or invalid key, an unknown storage option, a bad
            ``prefix`` or ``shard_size``.
        SourceError: a shard or the index could not be written (names the URL).
        ImportError: Ray Data is not installed.
    """
    options = dict(storage_options or {})
    check_storage_options(options, [dst])  # an option that dst's scheme does not take fails here
    return write_dataset(ds, dst, shard_size=shard_size, prefix=prefix, options=options, encoder=encoder)


def absolute(url: str) -> str:
    """``url`` with a local path made absolute: Ray tasks run in other directories (and hosts)."""
    if scheme_of(url) != "file":
        return url
    return os.path.abspath(url.removeprefix("file://"))


def write_dataset(
    ds: Any, dst: str, *, shard_size: int | str, prefix: str, options: dict[str, Any], encoder: Any
) -> ShardSetInfo:
    """:func:`write_shards` once ``options`` are checked (``pack`` checks them against its source too)."""
    ray = require_ray()
    import pyarrow as pa

    target = parse_size(shard_size, name="shard_size")
    if not prefix or "/" in prefix or prefix.startswith("."):
        raise ConfigurationError(
            f"prefix={prefix!r} must be a plain file-name prefix such as 'train' (no '/', not empty, "
            "no leading dot); put directories in dst"
        )
    dst = absolute(dst)
    encoded = ds.map_batches(
        encode_rows, batch_format="pyarrow", fn_kwargs={"encoder": encoder}
    ).materialize()
    # One plain task per materialized block sends back its keys and sizes only: cheaper than
    # another Dataset execution, and the encoded bytes never travel to the driver.
    key_sizes = ray.remote(select_key_sizes)
    sizes = pa.concat_tables(ray.get([key_sizes.remote(block) for block in encoded.to_arrow_refs()]))
    sizes = sizes.sort_by(KEY)
    plan = plan_shards(sizes.column(KEY).to_pylist(), sizes.column("nbytes").to_pylist(), target)
    if not plan:
        log.warning("the dataset has no rows; no shards written under %s", redact_url(dst))
        return ShardSetInfo(dst, index_url(dst), ())
    log.info(
        "writing %d samples as %d shards of at most %d bytes under %s",
        len(sizes),
        len(plan),
        target,
        redact_url(dst),
    )
    written = (
        encoded.map_batches(
            assign_shards, batch_format="pyarrow", fn_kwargs={"first_keys": [s.first_key for s in plan]}
        )
        .groupby("shard", num_partitions=_partitions(ray, plan))
        .map_groups(
            write_shard,
            batch_format="pyarrow",
            fn_kwargs={"dst": dst, "prefix": prefix, "storage_options": options},
        )
        .take_all()
    )
    rows = sorted(written, key=lambda row: int(row["shard"]))
    got = [(int(r["shard"]), int(r["samples"]), int(r["bytes"])) for r in rows]
    want = [(number, s.samples, s.bytes) for number, s in enumerate(plan)]
    if got != want:  # a bug, not a user error: say exactly what differs
        raise ShardStreamError(f"shards written differ from the plan: wrote {got}, planned {want}")
    entries = [entry_with_sizes(row) for row in rows]
    url = _write_index(dst, prefix, entries, options)
    return ShardSetInfo(dst, url, tuple(entries))


def entry_with_sizes(row: Mapping[str, Any]) -> IndexEntry:
    """The ``_info.json`` entry of a shard written by ``write_shard``, with each sample's size: a
    shard is its samples back to back, then the end-of-archive blocks."""
    entry = index_entry(row)
    entry["sizes"] = sample_sizes(entry["offsets"], entry["bytes"] - END_OF_ARCHIVE)
    return entry


def _partitions(ray: Any, plan: list[PlannedShard]) -> int:
    """Shuffle partitions: one per CPU, more when that would put over 1 GiB in one partition
    (a partition is held in memory while its shards are written), never more than shards."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    total = sum(shard.bytes for shard in plan)
    return max(1, min(len(plan), max(cpus, total // _PARTITION_BYTES + 1)))


def _write_index(dst: str, prefix: str, entries: list[IndexEntry], options: Mapping[str, Any]) -> str:
    """Replace this prefix's entries in ``dst``'s index, keeping other prefixes' (``val-...``)."""
    ours = re.compile(re.escape(prefix) + r"-\d{6}\.tar")
    try:
        old = read_index_entries(dst, storage_options=options)
    except ShardNotFoundError:
        old = []
    except ConfigurationError as exc:
        log.warning("replacing unreadable index under %s: %s", redact_url(dst), exc)
        old = []
    names = {e["url"] for e in entries}
    stale = sorted(e["url"] for e in old if ours.fullmatch(e["url"]) and e["url"] not in names)
    if stale:
        log.warning(
            "%d shards of an earlier write remain under %s (%s ...) and are no longer indexed; "
            "delete them so that globs over %s-*.tar do not read them",
            len(stale),
            redact_url(dst),
            redact_url(stale[0]),
            redact_url(prefix),
        )
    keep = [e for e in old if not ours.fullmatch(e["url"])]
    return write_index(dst, keep + entries, merge=False, storage_options=options)
