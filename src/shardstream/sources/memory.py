"""An in-memory source (``memory://name``) for tests, docs and users' own tests."""

from __future__ import annotations

import io
from typing import BinaryIO

from ..errors import ShardNotFoundError
from ..forks import ForkSafeLock
from .base import ObjectInfo, SourceBase, check_range

__all__ = ["MemorySource", "memory_store"]

#: Process-wide store shared by every MemorySource: url -> bytes.
memory_store: dict[str, bytes] = {}
_lock = ForkSafeLock()


class _MemoryWriter(io.BytesIO):
    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url

    def close(self) -> None:
        if not self.closed:
            with _lock:
                memory_store[self._url] = self.getvalue()
        super().close()


class MemorySource(SourceBase):
    """Serves ``memory://`` URLs from :data:`memory_store`. Counts opens for tests."""

    def __init__(self) -> None:
        self.opens = 0

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """A stream over the stored bytes ``[offset, offset + length)`` (to the end by default)."""
        end = check_range(url, offset, length)
        with _lock:
            data = memory_store.get(url)
        if data is None:
            raise ShardNotFoundError(f"cannot open {url}: no such object in the memory store", url=url)
        self.opens += 1
        if end is not None:
            return io.BytesIO(data[offset:end])
        stream = io.BytesIO(data)
        stream.seek(offset)
        return stream

    def stat(self, url: str) -> ObjectInfo:
        with _lock:
            data = memory_store.get(url)
        if data is None:
            raise ShardNotFoundError(f"cannot stat {url}: no such object in the memory store", url=url)
        return ObjectInfo(size=len(data))

    def create(self, url: str) -> BinaryIO:
        return _MemoryWriter(url)

    def close(self) -> None:
        pass
