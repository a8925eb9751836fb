"""Offsets sidecars: where each sample of one shard lies, in a small binary file beside the index.

``{index directory}/_offsets/{shard name}.bin`` holds, for shard ``{shard name}``::

    b"SSOFFS01"   8 bytes, the magic and format version
    n             int64, little-endian: the shard's samples
    offsets       n x int64: where each sample starts (its first member's first header) in the
                  uncompressed tar stream
    sizes         n x int64: each sample's bytes from there (all -1: unknown, a compressed shard)

so the file is exactly ``16 + 16 * n`` bytes, and ``n`` comes from the dataset-level index's
counts: a reader asks for that range and knows at once whether it got the whole file. NumPy
reads it as ``np.fromfile(path, "<i8", offset=16).reshape(2, -1)``.

Why per shard and not in ``_info.json``: a million-shard dataset of about a thousand samples
per shard has 16 GB of offsets. In the dataset-level index every rank and worker that needs
only the counts would read them; per shard, ``ShardDataset`` reads (one GET each) only the
sidecars of the shards it touches, and a writer that adds shards (``ShardWriter`` with
``val-%06d.tar`` beside ``train-%06d.tar``, ``pack`` resuming) writes only theirs.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import IndexFormatError, ShardNotFoundError, redact_url
from ..forks import GatedExecutor
from ..paths import check_relative_path
from ..sources import create_url, read_url

__all__ = [
    "SIDECAR_DIR",
    "decode_sidecar",
    "encode_sidecar",
    "missing_sidecar",
    "read_sidecar",
    "sidecar_length",
    "sidecar_url",
    "write_sidecars",
]

log = logging.getLogger(__name__)

SIDECAR_DIR = "_offsets"
_MAGIC = b"SSOFFS01"
_HEAD = struct.Struct("<8sq")
#: Sidecars written at once (an S3 prefix of thousands of shards is thousands of PUTs).
_WRITE_THREADS = 8

Offsets = npt.NDArray[np.int64]


def sidecar_url(directory: str, name: str) -> str:
    """The sidecar of shard ``name`` whose index lies in ``directory`` (``""``: the current one).

    Raises:
        UnsafePathError: ``name`` (an index entry, which is data) is empty or absolute, has a
            ``..`` or empty component, or holds NUL: its sidecar would lie outside ``_offsets/``.
    """
    check_relative_path(
        name,
        what="index entry",
        url=directory or ".",
        fix=(
            "Its offsets sidecar would lie outside _offsets/; an entry names a shard beside the index "
            f"(its basename): rewrite the index with `shardstream index {redact_url(directory or '.')}`"
        ),
    )
    return f"{directory.rstrip('/')}/{SIDECAR_DIR}/{name}.bin" if directory else f"{SIDECAR_DIR}/{name}.bin"


def sidecar_length(samples: int) -> int:
    """The size in bytes of the sidecar of a shard of ``samples`` samples."""
    return _HEAD.size + 16 * samples


def encode_sidecar(offsets: Sequence[int], sizes: Sequence[int] | None) -> bytes:
    """A sidecar's bytes (``sizes=None``: unknown, stored as -1)."""
    n = len(offsets)
    if sizes is not None and len(sizes) != n:
        raise IndexFormatError(f"{len(sizes)} sizes for {n} offsets; every sample needs one of each")
    table = np.empty((2, n), dtype="<i8")
    table[0] = offsets
    table[1] = sizes if sizes is not None else -1
    return _HEAD.pack(_MAGIC, n) + table.tobytes()


def decode_sidecar(url: str, data: bytes, samples: int | None = None) -> tuple[Offsets, Offsets | None]:
    """``(offsets, sizes)`` from a sidecar's bytes (``sizes`` ``None``: not recorded).

    Args:
        url: the sidecar's URL, for messages.
        data: its bytes.
        samples: the shard's sample count from the index, when known: the sidecar must agree.

    Raises:
        IndexFormatError: not a sidecar, truncated, another shard's, or ranges that do not follow
            one another (each sample starts where the one before it ends).
    """
    fix = _fix(url)
    if len(data) < _HEAD.size or data[:8] != _MAGIC:
        raise IndexFormatError(
            f"{redact_url(url)} is not a shardstream offsets sidecar (it starts {data[:8]!r}, not "
            f"{_MAGIC!r}); {fix}"
        )
    _, n = _HEAD.unpack_from(data)
    if len(data) != sidecar_length(n):
        raise IndexFormatError(
            f"{redact_url(url)} is truncated or has trailing bytes: {len(data)} bytes for {n} samples "
            f"({sidecar_length(n)} expected); {fix}"
        )
    if samples is not None and n != samples:
        raise IndexFormatError(
            f"{redact_url(url)} lists {n} samples but the index counts {samples} for its shard: the "
            f"two were written at different times; {fix}"
        )
    table = np.frombuffer(data, dtype="<i8", offset=_HEAD.size).reshape(2, n).astype(np.int64)
    offsets, sizes = table[0], table[1]
    if n and (offsets[0] < 0 or np.any(np.diff(offsets) < 0)):
        raise IndexFormatError(f"{redact_url(url)} has offsets out of order (corrupt); {fix}")
    if n and sizes[0] == -1:
        return offsets, None
    if n and (np.any(sizes < 0) or np.any(offsets[:-1] + sizes[:-1] != offsets[1:])):
        raise IndexFormatError(
            f"{redact_url(url)} has sample sizes that do not reach the next sample's offset (corrupt); {fix}"
        )
    return offsets, sizes


def read_sidecar(
    url: str, samples: int | None = None, *, storage_options: Mapping[str, Any] | None = None
) -> tuple[Offsets, Offsets | None]:
    """Read and decode one sidecar (see :func:`decode_sidecar`).

    Raises:
        IndexFormatError: missing (the index says it exists), truncated or corrupt.
    """
    try:
        data = read_url(url, storage_options=storage_options)  # bounded by max_body
    except ShardNotFoundError as exc:
        raise missing_sidecar(url) from exc
    return decode_sidecar(url, data, samples)


def missing_sidecar(url: str) -> IndexFormatError:
    """The error for a sidecar the index lists that is not there."""
    return IndexFormatError(
        f"the shard index lists per-sample offsets in {redact_url(url)}, which does not exist: the "
        f"shards and _info.json were copied without their {SIDECAR_DIR}/ folder. Copy it too, or "
        f"{_fix(url)}"
    )


def write_sidecars(
    directory: str, entries: Sequence[Mapping[str, Any]], *, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Write the sidecar of every entry (``url``, ``offsets``, optionally ``sizes``) under ``directory``."""

    def write(entry: Mapping[str, Any]) -> None:
        data = encode_sidecar(entry["offsets"], entry.get("sizes"))
        with create_url(sidecar_url(directory, entry["url"]), storage_options=storage_options) as out:
            out.write(data)

    if not entries:
        return
    write(entries[0])  # alone: a store that needs the folder made (FTP, say) makes it once
    if len(entries) > 1:
        with GatedExecutor(min(_WRITE_THREADS, len(entries) - 1), "shardstream-sidecars") as pool:
            for _ in pool.map(write, entries[1:]):
                pass
    log.debug("wrote %d offsets sidecars under %s", len(entries), redact_url(directory or "."))


def _fix(url: str) -> str:
    index_dir = url.rpartition("/")[0].rpartition("/")[0] or "."
    return f"run `shardstream index {redact_url(index_dir)}` to rewrite the index and its sidecars"
