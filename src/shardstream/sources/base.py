"""The Source seam: one object per URL scheme that opens a URL (or a byte range of it) as a stream.

:class:`Source` is the Protocol of what every source must do (``open``, ``stat``, ``close``).
:class:`SourceBase` adds the optional capabilities with defaults built from those, as fsspec's
``AsyncFileSystem._cat`` is built from ``_cat_file``; a source overrides what it does better:

- ``open_ahead(url)``: start opening before the stream is needed. A source whose open waits for
  a round trip declares ``opens_ahead = True`` (``s3://``, ``gs://``, ``az://``, ``hf://``,
  ``http(s)://``) and the open runs on a thread; otherwise ``None``: not worth it.
- ``size(url)``: the object's length (default: from ``stat``).
- ``get_into(url, sink, offset=, length=, size=)``: a whole object or a byte range appended to a
  buffer (default: from the ranged ``open``); the class attribute ``retries_in_get_into`` says
  whether it retries on its own. Bounded by what the caller expects (the range's length, the
  object's ``size``) or, where it expects nothing, by ``max_body`` (:func:`read_bounded`).
- ``get_many(window=)``: many whole objects or byte ranges in flight for one consumer, with
  typed outcomes (:mod:`.many`; default: ``get_into`` on threads; S3: one thread on ``epoll``).
- ``list_objects(prefix)``: every object under a prefix, recursively (``can_list`` says whether a
  source lists; default: it does not, and ``list_objects`` raises ConfigurationError naming the
  fix). ``s3://``, ``gs://``, ``az://``, ``hf://``, local directories and fsspec's stores list.
- ``route(url)``: the source whose capabilities serve ``url`` (default: itself; a
  :class:`~._router.SchemeRouter`: its scheme's source), so that a consumer holding a router
  gets S3's ``get_many`` for ``s3://`` URLs, not the default built on the router's ``open``.

Every built-in source derives from :class:`SourceBase`; a user's source that only satisfies
:class:`Source` gets the defaults through :func:`with_defaults`. Nothing probes a source with
``hasattr``.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar, Protocol, runtime_checkable

from ..config import read_settings
from ..errors import ConfigurationError, redact_url
from ._status import too_large
from .many import ManyGets, ThreadedGets

if TYPE_CHECKING:
    from ._ahead import PendingOpen

__all__ = [
    "Listed",
    "ObjectInfo",
    "Source",
    "SourceBase",
    "WritableSource",
    "check_range",
    "local_path_of",
    "read_bounded",
    "with_defaults",
]


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


@dataclass(frozen=True)
class Listed:
    """One object found by :meth:`SourceBase.list_objects`.

    Attributes:
        key: the object's path relative to the listed prefix (``"sub/000017.jpg"``).
        size: length in bytes (``-1`` when the store does not say).
        etag: an opaque version tag, or ``""``.
    """

    key: str
    size: int = -1
    etag: str = ""


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


class SourceBase:
    """A :class:`Source` with the optional capabilities declared, and defaults for them.

    Subclasses implement ``open`` and ``stat`` (and ``close`` when they hold resources) and
    override a capability when they can do better than its default (see the module doc).
    """

    #: Whether ``get_into`` retries transient faults itself (the default, built on ``open``,
    #: does when ``open`` does). ``False``: it makes one attempt and leaves retries to the
    #: caller, so that a fetcher can lower its requests in flight on throttling (S3).
    retries_in_get_into: ClassVar[bool] = True
    #: Whether a forked child may use this instance (its pools forget the parent's connections
    #: at the fork and it rebuilds what else it holds on first use); ``get_source`` then adopts
    #: the parent's instance instead of building one per process.
    fork_safe: ClassVar[bool] = False
    #: Whether :meth:`list_objects` lists a prefix (object stores, local directories).
    can_list: ClassVar[bool] = False
    #: Whether an open waits for a round trip, so that :meth:`open_ahead` starts it on a thread.
    opens_ahead: ClassVar[bool] = False
    #: The most bytes a whole read of an object of unknown size takes (``get_into``, a manifest,
    #: an index). ``None``: the ``SHARDSTREAM_MAX_BODY`` setting, read at each use; the network
    #: sources set it from their ``max_body=`` option.
    max_body: int | None = None

    def body_limit(self) -> int:
        """:attr:`max_body`, or the ``SHARDSTREAM_MAX_BODY`` setting when it is ``None``."""
        return self.max_body if self.max_body is not None else read_settings().max_body

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``url`` (see :class:`Source`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement open()")

    def stat(self, url: str) -> ObjectInfo:
        """Size and version of ``url`` (see :class:`Source`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement stat()")

    def close(self) -> None:
        """Release pools and clients (default: nothing to release)."""

    def open_ahead(self, url: str, *, offset: int = 0, length: int | None = None) -> PendingOpen | None:
        """Start opening ``url`` now on a thread (see :mod:`._ahead`), for a stream needed later,
        when the source ``opens_ahead``; else ``None`` (the open is cheap): the caller then opens
        when it needs the stream."""
        if not self.opens_ahead:
            return None
        from ._ahead import PendingOpen

        return PendingOpen(functools.partial(self.open, url, offset=offset, length=length))

    def size(self, url: str) -> int | None:
        """Length of ``url`` in bytes (``None`` when the source cannot tell)."""
        return self.stat(url).size

    def get_into(
        self,
        url: str,
        sink: bytearray,
        *,
        etag: str | None = None,
        offset: int = 0,
        length: int | None = None,
        size: int | None = None,
    ) -> str | None:
        """Append bytes ``[offset, offset + length)`` of ``url`` (the whole object by default; to
        its end when ``length`` is ``None``) to ``sink``, after the bytes of that range already
        there (a resume starts at ``offset + len(sink)``); fewer only where the object ends
        first. Returns the object's version tag when known. Raises a SourceError naming ``url``.

        ``size``: the object's size when the caller knows it (a manifest's): an object that turns
        out larger raises ResponseTooLargeError. Without it (and without ``length``), the read is
        bounded by :meth:`body_limit`; a local file is read whole (its size is its own)."""
        have = len(sink)
        if length is not None and have and have >= length:
            return etag
        rest = None if length is None else length - have
        with self.open(url, offset=offset + have, length=rest) as stream:
            if local_path_of(stream) is not None:
                sink += stream.read()
            elif rest is not None:
                read_bounded(stream, sink, url, rest, expected=True)
            elif size is not None:
                read_bounded(stream, sink, url, max(0, size - offset - have), expected=True)
            else:
                read_bounded(stream, sink, url, max(0, self.body_limit() - have), expected=False)
        return etag

    def get_many(self, *, window: int) -> ManyGets:
        """A session of up to ``window`` GETs in flight, of whole objects or byte ranges (see
        :mod:`.many`)."""
        return ThreadedGets(self.get_into, window=window, retries_itself=self.retries_in_get_into)

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """Every object under ``prefix`` (a URL ending with ``/``), recursively, in any order;
        keys are relative to the prefix, and objects whose key ends with ``/`` (folder markers)
        are left out. Raises ShardNotFoundError for a prefix that cannot exist (a missing bucket
        or container, a directory that is not there), and ConfigurationError where the source
        cannot list (``can_list`` is false)."""
        raise ConfigurationError(
            f"cannot list {redact_url(prefix)}: {type(self).__name__} has no listing. Name the objects "
            "(a brace spec, or manifest= for object prefixes), or put an _info.json index there "
            "(`shardstream index`)"
        )

    def route(self, url: str) -> SourceBase:
        """The source whose capabilities serve ``url``: this one (a router: its scheme's)."""
        return self


class _WithDefaults(SourceBase):
    """A :class:`Source` that does not derive from :class:`SourceBase`, with the defaults added."""

    def __init__(self, inner: Source) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"with_defaults({self.inner!r})"

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        if length is None:  # sources registered by users may predate ranged reads
            return self.inner.open(url, offset=offset)
        return self.inner.open(url, offset=offset, length=length)

    def stat(self, url: str) -> ObjectInfo:
        return self.inner.stat(url)

    def close(self) -> None:
        self.inner.close()


def with_defaults(source: Source) -> SourceBase:
    """``source`` with every optional capability: itself when it derives from :class:`SourceBase`,
    else a wrapper that adds the defaults."""
    return source if isinstance(source, SourceBase) else _WithDefaults(source)


@runtime_checkable
class WritableSource(Source, Protocol):
    """A source that can also create objects (used by TarWriter/ShardWriter)."""

    def create(self, url: str) -> BinaryIO:
        """Open ``url`` for writing; the object becomes visible when the stream is closed."""
        ...


class PublishingWriter(io.RawIOBase):
    """The base of the writers ``create`` returns: the object becomes visible on ``close()``
    only. :meth:`abort` discards what was written; an exception leaving a ``with`` block, or a
    writer collected without ``close()``, aborts (its data may be incomplete, so it is never
    published)."""

    def abort(self) -> None:
        """Discard what was written; nothing becomes visible."""
        raise NotImplementedError(f"{type(self).__name__} must implement abort()")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __del__(self) -> None:
        if not self.closed:
            self.abort()


class PartedWriter(PublishingWriter):
    """A :class:`PublishingWriter` that buffers what is written and uploads it in parts as they
    fill (S3 multipart parts, GCS resumable chunks, Azure blocks); ``close()`` uploads the rest
    and publishes. A subclass sets ``url``, ``size = 0`` and ``_buffer = bytearray()``, and gives
    :meth:`_part_size`, :meth:`_send_part` and :meth:`_finish`; a failure in any of them aborts
    before it propagates, so nothing half-written is ever published."""

    url: str
    size: int  # bytes written so far
    _buffer: bytearray  # bytes written and not yet uploaded

    def writable(self) -> bool:
        return True

    def _part_size(self) -> int:
        """Bytes per part (read at every write: the source's current setting)."""
        raise NotImplementedError

    def _send_part(self, size: int) -> None:
        """Upload the first ``size`` bytes of ``_buffer`` as a part and take them off it."""
        raise NotImplementedError

    def _finish(self) -> None:
        """Upload what ``_buffer`` holds and publish the object."""
        raise NotImplementedError

    def write(self, data: Any) -> int:
        if self.closed:
            raise ValueError(f"write to a closed stream ({redact_url(self.url)})")
        view = memoryview(data).cast("B")
        self._buffer += view
        self.size += len(view)
        part = self._part_size()
        if len(self._buffer) >= part:
            try:
                while len(self._buffer) >= part:
                    self._send_part(part)
            except BaseException:
                self.abort()
                raise
        return len(view)

    def close(self) -> None:
        """Upload what is buffered and publish; the object is visible afterwards."""
        if self.closed:
            return
        try:
            self._finish()
        except BaseException:
            self.abort()
            raise
        finally:
            self._buffer = bytearray()
            super().close()

    def _close_unpublished(self) -> None:
        """Mark the stream closed without publishing (for :meth:`abort`: ``close()`` publishes)."""
        super().close()


def check_range(url: str, offset: int, length: int | None) -> int | None:
    """Validate a requested range; returns its exclusive end (``None``: to the end of the object)."""
    if offset < 0 or (length is not None and length < 0):
        raise ConfigurationError(
            f"cannot open {redact_url(url)} with offset={offset}, length={length}: both must be >= 0 "
            "(length=None reads to the end of the object)"
        )
    return None if length is None else offset + length


#: The first read of :func:`read_bounded`; each later one doubles, up to :data:`_LAST_READ`.
_FIRST_READ = 1 << 16
_LAST_READ = 1 << 24


def read_bounded(stream: BinaryIO, sink: bytearray, url: str, limit: int, *, expected: bool) -> None:
    """Append what is left of ``stream`` to ``sink``, at most ``limit`` bytes: a stream with more
    raises ResponseTooLargeError (``expected``: ``limit`` is the size the caller expects, else
    ``max_body``). Reads grow from 64 KiB, so a small object costs no large buffer, and no more
    than ``limit`` bytes are ever appended."""
    got = 0
    want = _FIRST_READ
    while True:
        data = stream.read(min(want, limit + 1 - got))
        if not data:
            return
        got += len(data)
        if got > limit:
            raise too_large(url, got, limit, announced=False, expected=expected)
        sink += data
        want = min(want * 2, _LAST_READ)


def local_path_of(stream: object) -> str | None:
    """The local file a stream reads in place (a local shard or a cache entry), else ``None``.

    Streams from the file source, and cache hits and fills, carry a ``local_path`` attribute;
    network and pipe streams do not. For a cache fill the path is where the entry is published
    once complete.
    """
    path = getattr(stream, "local_path", None)
    return path if isinstance(path, str) else None
