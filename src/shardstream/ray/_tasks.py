"""The work done inside Ray tasks: encode sample rows into tar bytes, write one planned shard.

Both functions take and return ``pyarrow.Table`` batches (``batch_format="pyarrow"``). Encoding
reuses :class:`~shardstream.tar.writer.TarWriter` (default encoders by extension, mtime 0, sorted
fields), so a shard written here is byte-identical to one written by ``ShardWriter`` with the
same samples. Shards are written through :func:`~shardstream.sources.create_url`: local paths,
``file://`` and ``s3://`` (an all-or-nothing multipart upload).
"""

from __future__ import annotations

import collections
import io
import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import redact_url
from ..sources import create_url
from ..tar.index import IndexEntry
from ..tar.writer import END_OF_ARCHIVE, TarWriter
from ._plan import shard_of

__all__ = [
    "KEY",
    "assign_shards",
    "encode_rows",
    "index_entry",
    "select_key_sizes",
    "shard_url",
    "write_shard",
]

log = logging.getLogger(__name__)

KEY = "__key__"
#: Columns of an encoded batch: key, tar size, tar bytes, and the fields as "cls,jpg".
_NBYTES, _TAR, _FIELDS, _SHARD = "nbytes", "tar", "fields", "shard"


def shard_url(dst: str, prefix: str, number: int) -> str:
    """``{dst}/{prefix}-{number:06d}.tar``."""
    return f"{dst.rstrip('/')}/{prefix}-{number:06d}.tar"


def _missing(value: Any) -> bool:
    """A field a sample does not have: null, or the NaN that Ray's WebDataset reader puts there
    (its blocks go through pandas, which fills a field missing from some samples with NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def encode_rows(batch: Any, *, encoder: Any = True) -> Any:
    """Encode each row (a sample dict) into its tar members; null and NaN fields are left out.

    Returns a table of ``__key__``, ``nbytes`` (tar bytes), ``tar`` (the bytes) and ``fields``.
    """
    import pyarrow as pa

    buffer = io.BytesIO()
    writer = TarWriter(buffer, encoder=encoder)
    keys: list[str] = []
    sizes: list[int] = []
    blobs: list[bytes] = []
    fields: list[str] = []
    for row in batch.to_pylist():
        sample = {name: value for name, value in row.items() if not _missing(value)}
        encoded = writer.encode(sample)
        writer.write_encoded(encoded)
        blobs.append(buffer.getvalue())
        buffer.seek(0)
        buffer.truncate()
        keys.append(encoded.key)
        sizes.append(encoded.nbytes)
        fields.append(",".join(sorted(n.lower() for n in sample if not n.startswith("_"))))
    return pa.table(
        {
            KEY: pa.array(keys, pa.string()),
            _NBYTES: pa.array(sizes, pa.int64()),
            _TAR: pa.array(blobs, pa.large_binary()),
            _FIELDS: pa.array(fields, pa.string()),
        }
    )


def select_key_sizes(block: Any) -> Any:
    """The ``__key__`` and ``nbytes`` columns of an encoded block (what the plan needs)."""
    return block.select([KEY, _NBYTES])


def assign_shards(batch: Any, *, first_keys: Sequence[str]) -> Any:
    """Add the ``shard`` column: the planned shard of each row's key."""
    import pyarrow as pa

    numbers = [shard_of(key, first_keys) for key in batch.column(KEY).to_pylist()]
    return batch.append_column(_SHARD, pa.array(numbers, pa.int64()))


def _runs(column: Any) -> Iterator[memoryview]:
    """The bytes of a binary column as a few contiguous views (one per chunk, no copy)."""
    import numpy as np
    import pyarrow as pa

    for chunk in column.chunks:
        if not len(chunk):
            continue
        _validity, offsets, data = chunk.buffers()
        width = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
        ends = np.frombuffer(offsets, dtype=width)[chunk.offset : chunk.offset + len(chunk) + 1]
        yield memoryview(data)[int(ends[0]) : int(ends[-1])]


def write_shard(
    batch: Any, *, dst: str, prefix: str, storage_options: Mapping[str, Any] | None = None
) -> Any:
    """Write the rows of one planned shard (one group) in key order; returns its index entry.

    The returned one-row table has ``shard``, ``url`` (basename), ``samples``, ``bytes``,
    ``offsets`` (where each sample starts) and ``extensions`` (samples per extension, as JSON).
    """
    import pyarrow as pa

    batch = batch.sort_by(KEY).combine_chunks()
    number = int(batch.column(_SHARD)[0].as_py())
    url = shard_url(dst, prefix, number)
    sizes = batch.column(_NBYTES).to_pylist()
    offsets: list[int] = []
    position = 0
    for nbytes in sizes:
        offsets.append(position)
        position += nbytes
    with create_url(url, storage_options=storage_options) as stream:
        for run in _runs(batch.column(_TAR)):
            stream.write(run)
        stream.write(bytes(END_OF_ARCHIVE))
    counts: collections.Counter[str] = collections.Counter()
    for names in batch.column(_FIELDS).to_pylist():
        counts.update(n for n in names.split(",") if n)
    log.info("wrote shard %s (%d samples, %d bytes)", redact_url(url), len(sizes), position + END_OF_ARCHIVE)
    return pa.table(
        {
            _SHARD: [number],
            "url": [url.rpartition("/")[2]],
            "samples": [len(sizes)],
            "bytes": [position + END_OF_ARCHIVE],
            "offsets": pa.array([offsets], pa.list_(pa.int64())),
            "extensions": [json.dumps(dict(sorted(counts.items())))],
        }
    )


def index_entry(row: Mapping[str, Any]) -> IndexEntry:
    """The ``_info.json`` entry of a row returned by :func:`write_shard`."""
    entry = IndexEntry(url=str(row["url"]), samples=int(row["samples"]), bytes=int(row["bytes"]))
    entry["offsets"] = [int(o) for o in row["offsets"]]
    entry["extensions"] = {str(name): int(count) for name, count in json.loads(row["extensions"]).items()}
    return entry
