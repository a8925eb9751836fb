"""The tar format as a shard reader: a shard URL (and a byte offset) in, samples out.

:class:`TarFormat` is what the pipeline's reading stage and the epoch planner plug in (another
format, such as the single-object dataset, provides the same four methods). It opens shards
through any :class:`~shardstream.sources.Source` (a cached one included), starts at a sample
boundary given as a byte offset (resume), and reports where it is through a :class:`Cursor`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from typing import Any, BinaryIO

from ..sources import Source, local_path_of, scheme_of
from ..sources.file import local_path
from .grouping import Cursor, group_samples
from .index import IndexEntry, read_index, write_index
from .reader import DEFAULT_BLOCKSIZE, iter_members

__all__ = ["Cursor", "TarFormat"]

log = logging.getLogger(__name__)

_COMPRESSED = (".gz", ".tgz")


class TarFormat:
    """WebDataset tar shards: members grouped into samples by key.

    Args:
        select_files: keep only member names for which this returns True.
        rename_files: map member names before they are split into key and extension.
        blocksize: bytes per read from the stream.
    """

    name = "tar"

    def __init__(
        self,
        select_files: Callable[[str], bool] | None = None,
        rename_files: Callable[[str], str] | None = None,
        *,
        blocksize: int = DEFAULT_BLOCKSIZE,
    ) -> None:
        self.select_files = select_files
        self.rename_files = rename_files
        self.blocksize = blocksize

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
            members = iter_members(stream, url, blocksize=self.blocksize, offset=start)
            if start < offset:
                members = (m for m in members if m[2] >= offset)
            yield from group_samples(
                members,
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
        """Samples in shard ``url`` (reads its bytes; decodes nothing)."""
        return sum(1 for _ in self.samples(source, url))

    def read_counts(self, location: str, storage_options: Mapping[str, Any] | None) -> dict[str, int]:
        """Counts from the ``_info.json`` index at ``location`` (a directory, prefix or file)."""
        return read_index(location, storage_options=storage_options)

    def write_counts(
        self, location: str, counts: Mapping[str, int], storage_options: Mapping[str, Any] | None
    ) -> None:
        """Merge ``counts`` (keyed by shard basename) into the index at ``location``."""
        entries = [IndexEntry(url=name, samples=n, bytes=-1) for name, n in counts.items()]
        write_index(location, entries, storage_options=storage_options)

    def __repr__(self) -> str:
        return f"TarFormat(select_files={self.select_files!r}, rename_files={self.rename_files!r})"
