"""The tar format as a shard reader: a shard URL (and a byte offset) in, samples out.

:class:`TarFormat` is what the reading stages (``ReadShards``, ``PlannedSamples``) plug in; another
shard format would provide the same four methods (single objects are read by their own stage,
``ObjectSamples``, which needs no per-shard format). It opens shards
through any :class:`~shardstream.sources.Source` (a cached one included), starts at a sample
boundary given as a byte offset (resume), and reports where it is through a :class:`Cursor`.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Generator, Mapping
from typing import Any, BinaryIO

from ..errors import ConfigurationError
from ..sources import Source, local_path_of, scheme_of
from ..sources.file import local_path
from .grouping import Cursor, group_runs, group_samples
from .index import IndexEntry, read_counts, write_index
from .reader import DEFAULT_BLOCKSIZE, DEFAULT_MAX_MEMBER_SIZE, member_runs
from .walk import walk_members, walkable

__all__ = ["Cursor", "TarFormat"]

log = logging.getLogger(__name__)

_COMPRESSED = (".gz", ".tgz")


class TarFormat:
    """WebDataset tar shards: members grouped into samples by key.

    End-of-shard checks: a shard that ends without its end-of-archive marker (cut at a member
    boundary, or 0 bytes) raises :class:`~shardstream.errors.ShardFormatError`, which the
    reading stage hands to its error policy (a skip is counted). Where the shard's size is known
    without a request (a local file or cache entry, the ``size`` an HTTP/S3 stream got from
    Content-Length), a member declaring more bytes than remain is refused before it is read.

    Args:
        select_files: keep only member names for which this returns True.
        rename_files: map member names before they are split into key and extension.
        blocksize: bytes per read from the stream.
        max_member_size: the largest member accepted, in bytes (default 4 GiB); a larger
            declared size is a ShardFormatError (a corrupt or hostile header). ``None``: no limit.
    """

    name = "tar"

    def __init__(
        self,
        select_files: Callable[[str], bool] | None = None,
        rename_files: Callable[[str], str] | None = None,
        *,
        blocksize: int = DEFAULT_BLOCKSIZE,
        max_member_size: int | None = DEFAULT_MAX_MEMBER_SIZE,
    ) -> None:
        if max_member_size is not None and max_member_size < 0:
            raise ConfigurationError(
                f"max_member_size={max_member_size} must be >= 0 bytes (None for no limit)"
            )
        self.select_files = select_files
        self.rename_files = rename_files
        self.blocksize = blocksize
        self.max_member_size = max_member_size

    def open(self, source: Source, url: str, offset: int = 0) -> tuple[BinaryIO, int]:
        """Open ``url`` at sample boundary ``offset``: a ranged read, except for compressed
        shards, whose offsets count uncompressed bytes (those are read from the start and the
        members before ``offset`` skipped). Returns the stream and the offset it starts at."""
        if offset and url.endswith(_COMPRESSED):
            return source.open(url), 0
        return source.open(url, offset=offset), offset

    def samples(
        self,
        source: Source,
        url: str,
        *,
        offset: int = 0,
        cursor: Cursor | None = None,
        stream: BinaryIO | None = None,
    ) -> Generator[dict[str, Any], None, None]:
        """The samples of shard ``url`` from byte ``offset`` (a sample boundary).

        ``cursor`` (when given) is updated before each sample is yielded. ``stream`` reads from
        an already opened stream instead of opening ``url``. The stream is closed when the
        generator ends or is closed.
        """
        start = 0
        if stream is None:
            stream, start = self.open(source, url, offset)
        path = local_path_of(stream)
        if path is None and scheme_of(url) == "file":
            path = local_path(url)
        try:
            runs = member_runs(
                stream,
                url,
                blocksize=self.blocksize,
                offset=start,
                shard_size=_free_size(stream),
                max_member_size=self.max_member_size,
            )
            if start < offset:
                runs = ([m for m in run if m[2] >= offset] for run in runs)
            yield from group_runs(
                runs,
                url,
                local_path=path,
                select_files=self.select_files,
                rename_files=self.rename_files,
                cursor=cursor,
            )
        finally:
            # Closed here, not in __del__: an early stop (break, slice, worker shutdown) closes
            # this generator, which releases the stream at once.
            stream.close()

    def sample_at(self, source: Source, url: str, offset: int) -> dict[str, Any]:
        """The one sample that starts at byte ``offset`` of ``url``."""
        samples = self.samples(source, url, offset=offset)
        try:
            return next(samples)
        finally:
            samples.close()

    def count(self, source: Source, url: str) -> int:
        """Samples in shard ``url``; decodes nothing.

        A local, uncompressed shard (a plain path or ``file://`` URL that ``source`` opens as a
        file) is counted from its headers (:func:`.walk.walk_members`: a small read per header
        past a large member's data; small members are read through in windows), with the same
        grouping and the same errors as a full read.
        The others are read whole: compressed shards (a ``.gz``/``.tgz`` name or gzip content:
        their headers are only found by inflating), formats with ``select_files`` or
        ``rename_files``, and remote shards, through the cache or not (their headers would be a
        request each).
        """
        stream, _ = self.open(source, url)
        fd = None
        if self.select_files is None and self.rename_files is None:
            fd = walkable(stream, url)
        if fd is None:
            return sum(1 for _ in self.samples(source, url, stream=stream))
        try:
            members = walk_members(fd, url, max_member_size=self.max_member_size)
            return sum(1 for _ in group_samples(members, url))
        finally:
            stream.close()

    def read_counts(self, location: str, storage_options: Mapping[str, Any] | None) -> Mapping[str, int]:
        """Counts from the ``_info.json`` index at ``location`` (a directory, prefix or file): a
        ``{basename: samples}`` mapping (the index's ``CountTable`` when it has one, which also
        matches a URL list in bulk, see ``CountTable.counts_for``)."""
        return read_counts(location, storage_options=storage_options)

    def write_counts(
        self, location: str, counts: Mapping[str, int], storage_options: Mapping[str, Any] | None
    ) -> None:
        """Merge ``counts`` (keyed by shard basename) into the index at ``location``."""
        entries = [IndexEntry(url=name, samples=n, bytes=-1) for name, n in counts.items()]
        write_index(location, entries, storage_options=storage_options)

    def __repr__(self) -> str:
        return f"TarFormat(select_files={self.select_files!r}, rename_files={self.rename_files!r})"


def _free_size(stream: object) -> int | None:
    """The whole shard's size in bytes when the open stream knows it without a request, else ``None``.

    Network streams carry ``size`` (the object's size from Content-Length/Content-Range, also on
    ranged streams); a local file is ``fstat``-ed, a cache entry ``stat``-ed by its
    ``local_path`` (a system call, no I/O). Pipes and cache fills in progress have none.
    """
    size = getattr(stream, "size", None)
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        return size
    info: os.stat_result | None
    try:
        info = os.fstat(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # no descriptor (io.UnsupportedOperation included)
        path = local_path_of(stream)
        try:
            info = os.stat(path) if path is not None else None
        except OSError:  # a fill's entry is published only once complete
            info = None
    return info.st_size if info is not None and stat.S_ISREG(info.st_mode) else None
