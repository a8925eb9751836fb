"""The Source seam: one object per URL scheme that opens a URL as a byte stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable

__all__ = ["ObjectInfo", "Source", "WritableSource"]


@dataclass(frozen=True)
class ObjectInfo:
    """What a source knows about an object without reading it.

    Attributes:
        size: length in bytes, or ``None`` when the source cannot tell (pipes).
        etag: an opaque version tag (S3 ETag, HTTP ETag), or ``None``.
        local_path: a path the object can be read from in place (local files only).
    """

    size: int | None
    etag: str | None = None
    local_path: str | None = None


@runtime_checkable
class Source(Protocol):
    """Opens URLs of one scheme for reading.

    Implementations are cheap to construct, hold their connection pools, are used from one
    process (a DataLoader worker builds its own after fork) and are safe to share between
    threads. ``open`` returns a binary stream with ``read``, ``readinto`` and ``close``; closing
    it releases the connection or child process at once.
    """

    def open(self, url: str, *, offset: int = 0) -> BinaryIO:
        """Open ``url`` for reading from byte ``offset``. Raises a SourceError subclass."""
        ...

    def stat(self, url: str) -> ObjectInfo:
        """Size and version of ``url``. Raises a SourceError subclass."""
        ...

    def close(self) -> None:
        """Release pools and clients. The source may not be used afterwards."""
        ...


@runtime_checkable
class WritableSource(Source, Protocol):
    """A source that can also create objects (used by TarWriter/ShardWriter)."""

    def create(self, url: str) -> BinaryIO:
        """Open ``url`` for writing; the object becomes visible when the stream is closed."""
        ...
