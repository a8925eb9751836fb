"""The Source seam: one object per URL scheme that opens a URL (or a byte range of it) as a stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable

from ..errors import ConfigurationError, redact_url

__all__ = ["ObjectInfo", "Source", "WritableSource", "check_range", "local_path_of"]


@dataclass(frozen=True)
class ObjectInfo:
    """What a source knows about an object without reading it.

    Attributes:
        size: length in bytes, or ``None`` when the source cannot tell (pipes).
        etag: an opaque version tag (S3 ETag, HTTP ETag), or ``None``.
        local_path: a path the object can be read from in place (local files and complete
            cache entries only).
    """

    size: int | None
    etag: str | None = None
    local_path: str | None = None


@runtime_checkable
class Source(Protocol):
    """Opens URLs for reading: whole objects or byte ranges.

    Implementations are cheap to construct, hold their connection pools, are used from one
    process (a DataLoader worker builds its own after fork) and are safe to share between
    threads. ``open`` returns a binary stream with ``read``, ``readinto`` and ``close``; closing
    it releases the file descriptor, connection or child process at once. A stream whose bytes
    are in a local file carries ``local_path`` (see :func:`local_path_of`).

    Range contract: ``open(url, offset=o, length=n)`` yields exactly bytes ``[o, o + n)`` of the
    object, fewer only when the object ends first (an ``offset`` at or past the end yields no
    bytes); ``length=None`` reads to the end. A missing object raises at ``open`` (pipes: when
    the command's output ends, see :mod:`.pipe`).
    """

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``url`` (to the end when ``length`` is
        ``None``). Raises a SourceError subclass."""
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


def check_range(url: str, offset: int, length: int | None) -> int | None:
    """Validate a requested range; returns its exclusive end (``None``: to the end of the object)."""
    if offset < 0 or (length is not None and length < 0):
        raise ConfigurationError(
            f"cannot open {redact_url(url)} with offset={offset}, length={length}: both must be >= 0 "
            "(length=None reads to the end of the object)"
        )
    return None if length is None else offset + length


def local_path_of(stream: object) -> str | None:
    """The local file a stream reads in place (a local shard or a cache entry), else ``None``.

    Streams from the file source, and cache hits and fills, carry a ``local_path`` attribute;
    network and pipe streams do not. For a cache fill the path is where the entry is published
    once complete.
    """
    path = getattr(stream, "local_path", None)
    return path if isinstance(path, str) else None
