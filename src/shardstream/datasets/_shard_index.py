"""Where every sample of a shard list lies: the global sample numbers, byte offsets and sizes.

Read from the ``_info.json`` of each directory (``offsets`` and ``sizes``, which every
shardstream writer records, see :mod:`shardstream.tar.index`); a shard whose entry lacks them is
read once, in parallel threads, with the streaming reader, and a warning says how to avoid that
pass next time. Sample ``g`` of the list is sample ``g - starts[s]`` of shard ``s``, shards in
the order given and samples in shard order. The arrays are compact (``array('q')``: 16 bytes per
sample), as the index travels to every DataLoader worker.
"""

from __future__ import annotations

import bisect
import logging
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, ShardNotFoundError, redact_url
from ..forks import GatedExecutor
from ..sources import Source
from ..tar.grouping import Cursor, group_samples
from ..tar.index import IndexEntry, index_url, read_index_entries, sample_sizes
from ..tar.reader import iter_members
from ..tar.writer import END_OF_ARCHIVE

__all__ = ["SampleIndex", "build_index"]

log = logging.getLogger(__name__)

_COMPRESSED = (".gz", ".tgz", ".bz2", ".xz", ".zst")
#: Shards read at once when an index has to be built.
_SCAN_THREADS = 8


@dataclass
class SampleIndex:
    """Sample numbers, offsets and sizes of a shard list.

    Attributes:
        urls: the shards, in order.
        starts: the global number of each shard's first sample, then the total (``len(urls) + 1``).
        offsets: each sample's byte offset in its shard, by global number.
        sizes: each sample's bytes from there, by global number.
        sources: where each shard's offsets came from (its ``_info.json``, or ``None``: a pass).
    """

    urls: list[str]
    starts: list[int]
    offsets: array[int]
    sizes: array[int]
    sources: list[str | None]

    def __len__(self) -> int:
        return self.starts[-1]

    def locate(self, g: int) -> tuple[int, int]:
        """``(shard number, sample number within the shard)`` of global sample ``g``."""
        shard = bisect.bisect_right(self.starts, g) - 1
        return shard, g - self.starts[shard]

    def shard_lengths(self) -> list[int]:
        """Samples per shard."""
        return [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]


def _directory(url: str) -> str:
    return url.rpartition("/")[0]


def _entries(directory: str, storage_options: Mapping[str, Any] | None) -> dict[str, IndexEntry]:
    try:
        return {e["url"]: e for e in read_index_entries(directory, storage_options=storage_options)}
    except ShardNotFoundError:
        return {}
    except ConfigurationError as exc:
        log.warning("ignoring the shard index of %s: %s", redact_url(directory or "."), exc)
        return {}


def _usable(entry: IndexEntry | None) -> bool:
    """Whether ``entry`` has offsets and sizes that tile its samples (each sample runs to the next)."""
    if entry is None or "sizes" not in entry or "offsets" not in entry:
        return False
    offsets, sizes = entry["offsets"], entry["sizes"]
    if not len(offsets) == len(sizes) == entry["samples"]:
        return False
    return all(a + n == b for a, n, b in zip(offsets, sizes, offsets[1:], strict=False))


class _Counting:
    """Passes reads through and counts the bytes (the shard's size, once read to its end)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.nread = 0

    def read(self, n: int = -1, /) -> bytes:
        data: bytes = self.stream.read(n)
        self.nread += len(data)
        return data


def scan_offsets(source: Source, url: str) -> tuple[list[int], list[int]]:
    """Offsets and sizes of every sample of shard ``url``, read once from its start."""
    if url.endswith(_COMPRESSED):
        raise ConfigurationError(_compressed(url))
    stream = source.open(url)
    try:
        counting = _Counting(stream)
        head = stream.read(2)
        counting.nread = len(head)
        if head == b"\x1f\x8b":
            raise ConfigurationError(_compressed(url))
        members = iter_members(_Prefixed(head, counting), url)
        cursor = Cursor()
        offsets = [cursor.start for _ in group_samples(members, url, cursor=cursor)]
        while counting.read(1 << 16):  # the end-of-archive blocks and any padding after them
            pass
    finally:
        stream.close()
    return offsets, sample_sizes(offsets, counting.nread - END_OF_ARCHIVE)


class _Prefixed:
    """A stream whose first bytes were already read (to check for gzip)."""

    def __init__(self, head: bytes, rest: _Counting) -> None:
        self.head = head
        self.rest = rest

    def read(self, n: int = -1, /) -> bytes:
        if not self.head:
            return self.rest.read(n)
        if 0 <= n <= len(self.head):
            data, self.head = self.head[:n], self.head[n:]
            return data
        head, self.head = self.head, b""
        return head + self.rest.read(n - len(head) if n >= 0 else -1)


def _compressed(url: str) -> str:
    return (
        f"{redact_url(url)} is compressed; random access reads a sample's byte range, which a "
        "compressed stream does not allow. Write uncompressed shards (ShardWriter(compress=False), "
        "the default for names ending in .tar) or stream this dataset with ss.Dataset instead"
    )


def build_index(
    urls: Sequence[str], source: Source, *, storage_options: Mapping[str, Any] | None = None
) -> SampleIndex:
    """The :class:`SampleIndex` of ``urls``: from their ``_info.json`` files, else one pass.

    Raises:
        ConfigurationError: a compressed shard; an empty shard list.
        SourceError: a shard that had to be read could not be.
    """
    if not urls:
        raise ConfigurationError("ShardDataset needs at least one shard URL")
    by_directory: dict[str, dict[str, IndexEntry]] = {}
    found: list[IndexEntry | None] = []
    for url in urls:
        directory = _directory(url)
        if directory not in by_directory:
            by_directory[directory] = _entries(directory, storage_options)
        found.append(by_directory[directory].get(url.rpartition("/")[2]))
    missing = [i for i, entry in enumerate(found) if not _usable(entry)]
    scanned: dict[int, tuple[list[int], list[int]]] = {}
    if missing:
        first = urls[missing[0]]
        log.warning(
            "%d of %d shards have no per-sample offsets and sizes in their _info.json (first: %s); "
            "reading each of them once to index its samples. Run `shardstream index %s` once to "
            "write them (ShardWriter, `shardstream pack` and the Ray writer record them as they write)",
            len(missing),
            len(urls),
            redact_url(first),
            redact_url(_directory(first) or "."),
        )
        with GatedExecutor(min(_SCAN_THREADS, len(missing)), "shardstream-index") as pool:
            for i, result in zip(
                missing, pool.map(lambda i: scan_offsets(source, urls[i]), missing), strict=True
            ):
                scanned[i] = result
    starts = [0]
    offsets: array[int] = array("q")
    sizes: array[int] = array("q")
    sources: list[str | None] = []
    for i, url in enumerate(urls):
        entry = found[i]
        if i in scanned:
            o, s = scanned[i]
            sources.append(None)
        else:
            assert entry is not None  # _usable
            if url.endswith(_COMPRESSED):
                raise ConfigurationError(_compressed(url))
            o, s = entry["offsets"], entry["sizes"]
            sources.append(index_url(_directory(url)))
        offsets.extend(o)
        sizes.extend(s)
        starts.append(starts[-1] + len(o))
    return SampleIndex(list(urls), starts, offsets, sizes, sources)
