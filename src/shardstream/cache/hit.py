"""Opening a published entry: its size is checked against its metadata record on every hit.

A hit is returned as a :class:`LeasedFile`, held open under a reader lease so that eviction
leaves it alone. A file whose size does not match its record (truncated, overwritten) is
reported as :class:`Corrupt`, and :func:`remove_corrupt` removes it (with a warning naming it)
so that it is fetched again.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
from typing import Any

from ..errors import redact_url
from .layout import Layout
from .lease import Lease
from .owner import remove_quietly
from .stats import CacheStats

__all__ = ["Corrupt", "LeasedFile", "open_hit", "read_meta", "remove_corrupt"]

log = logging.getLogger("shardstream.cache")


class Corrupt:
    def __init__(self, reason: str) -> None:
        self.reason = reason


class LeasedFile(io.RawIOBase):
    """A cached file held open under a reader lease (released on close).

    ``local_path`` is the published entry's path, which may be read in place.
    """

    def __init__(self, file: io.FileIO, lease: Lease) -> None:
        super().__init__()
        self._file = file
        self._lease: Lease | None = lease
        self.name = file.name
        self.local_path: str = os.fsdecode(file.name)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:  # direct, without RawIOBase's extra copy
        return self._file.read(size) or b""

    def readinto(self, buffer: Any) -> int:
        return self._file.readinto(buffer) or 0

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0, /) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        if not self.closed:
            self._file.close()
            lease, self._lease = self._lease, None
            if lease is not None:
                lease.release()
        super().close()


def read_meta(layout: Layout, name: str) -> dict[str, Any] | None:
    try:
        with open(layout.meta(name), "rb") as f:
            meta: dict[str, Any] = json.load(f)
        return meta
    except (FileNotFoundError, ValueError):
        return None


def open_hit(layout: Layout, name: str) -> io.FileIO | Corrupt | None:
    """The published file of ``name`` opened for reading, ``Corrupt``, or ``None`` (not cached)."""
    path = layout.data(name)
    try:
        file = io.FileIO(path, "rb")
    except FileNotFoundError:
        return None
    size = os.fstat(file.fileno()).st_size
    meta = read_meta(layout, name)
    expected = meta.get("size") if meta else None
    if isinstance(expected, int) and size != expected:
        file.close()
        return Corrupt(f"size {size} bytes, expected {expected}")
    with contextlib.suppress(OSError):
        os.utime(path)  # last use, for LRU eviction
    return file


def remove_corrupt(layout: Layout, name: str, url: str, corrupt: Corrupt, stats: CacheStats) -> None:
    """Remove a corrupt entry (with the entry's lock held), so that it is fetched again."""
    path = layout.data(name)
    log.warning(
        "cached shard %s for %s is corrupt (%s): removing it and fetching it again",
        path,
        redact_url(url),
        corrupt.reason,
    )
    remove_quietly(path)
    remove_quietly(layout.meta(name))
    stats.add(corrupt=1)
