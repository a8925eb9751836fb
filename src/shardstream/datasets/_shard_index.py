"""Where every sample of a shard list lies: global sample numbers, and byte ranges loaded per shard.

Counts come from the ``_info.json`` of each directory; when the shard list is a run of one
index's shards, only its counts table is read (:class:`~shardstream.tar.index.CountTable`), so a
million-shard dataset is set up in a fraction of a second. Each shard's per-sample offsets and
sizes are in its *sidecar* (``_offsets/{shard}.bin``, see :mod:`shardstream.tar.index`), read the
first time a sample of that shard is asked for: one request per shard touched, the sidecars a
batch needs fetched together. The loaded ones are kept (least recently used dropped beyond
:data:`_KEEP_SAMPLES` samples), so a process holds 8 bytes per shard plus what it touched, not
16 bytes per sample of the dataset. Older indexes with inline ``offsets``/``sizes`` are read as
they are; a shard without either is read once at construction, in parallel threads, with the
streaming reader (a local, uncompressed shard: its headers only, :mod:`shardstream.tar.walk`),
and a warning says how to avoid that pass next time.

Sample ``g`` of the list is sample ``g - starts[s]`` of shard ``s``, shards in the order given and
samples in shard order.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigurationError, IndexFormatError, ShardNotFoundError, redact_url
from ..forks import ForkSafeLock, GatedExecutor
from ..sources import Source
from ..tar.grouping import Cursor, group_runs, group_samples
from ..tar.index import CountTable, IndexEntry, index_url, read_counts, read_index_entries, sample_sizes
from ..tar.offsets import decode_sidecar, missing_sidecar, sidecar_length, sidecar_url
from ..tar.reader import member_runs
from ..tar.walk import walk_members, walkable
from ..tar.writer import END_OF_ARCHIVE

__all__ = ["SampleIndex", "build_index"]

log = logging.getLogger(__name__)

_COMPRESSED = (".gz", ".tgz", ".bz2", ".xz", ".zst")
#: Shards read at once when an index has to be built.
_SCAN_THREADS = 8
#: Samples whose ranges a process keeps from sidecars (16 bytes each: 64 MiB).
_KEEP_SAMPLES = 1 << 22

Ranges = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]
#: Reads ``(url, offset, length)`` requests together; each result is bytes or the exception.
Fetch = Callable[[list[tuple[str, int, int]]], list[bytes | BaseException]]


class SampleIndex:
    """Sample numbers of a shard list, and each sample's byte range.

    Args:
        urls: the shards, in order.
        counts: samples per shard.
        lazy: which shards' ranges are in their sidecar, read when first needed.
        pinned: ``{shard number: (offsets, sizes)}`` of the other shards (inline in an older
            index, or found by reading the shard).
        scanned: the shard numbers whose ranges come from reading them.

    Attributes:
        starts: the global number of each shard's first sample, then the total (``len(urls) + 1``).
    """

    def __init__(
        self,
        urls: Sequence[str],
        counts: npt.NDArray[np.int64],
        lazy: npt.NDArray[np.bool_],
        pinned: dict[int, Ranges],
        scanned: set[int],
    ) -> None:
        self.urls, self.lazy, self.pinned, self.scanned = urls, lazy, pinned, scanned
        self.starts = np.zeros(len(urls) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.starts[1:])
        self._reset()

    def _reset(self) -> None:
        self._lock = ForkSafeLock()
        self._loaded: collections.OrderedDict[int, Ranges] = collections.OrderedDict()
        self._held = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_loaded", "_held")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def locate(self, g: int) -> tuple[int, int]:
        """``(shard number, sample number within the shard)`` of global sample ``g``."""
        shard = int(self.starts.searchsorted(g, side="right")) - 1
        return shard, g - int(self.starts[shard])

    def shard_lengths(self) -> list[int]:
        """Samples per shard."""
        return np.diff(self.starts).tolist()  # type: ignore[no-any-return]

    def sidecar(self, shard: int) -> str:
        """The URL of shard ``shard``'s sidecar."""
        directory, _, name = self.urls[shard].rpartition("/")
        return sidecar_url(directory, name)

    def source(self, shard: int) -> str | None:
        """Where shard ``shard``'s ranges come from: its sidecar, its index, or ``None`` (a pass)."""
        if self.lazy[shard]:
            return self.sidecar(shard)
        return None if shard in self.scanned else index_url(self.urls[shard].rpartition("/")[0])

    def ranges(self, numbers: Sequence[int], fetch: Fetch) -> list[tuple[int, int, int] | BaseException]:
        """``(shard number, byte offset, size)`` of each global sample number, reading the sidecars
        of the shards not loaded yet with ``fetch`` (together); in place of a sample whose sidecar
        could not be read, the exception (an :class:`IndexFormatError` when it is missing or corrupt)."""
        shards = (
            np.searchsorted(self.starts, np.asarray(numbers, dtype=np.int64), side="right") - 1
        ).tolist()
        tables: dict[int, Ranges] = {}
        with self._lock:  # what is loaded now (another thread may evict it later: kept here)
            for s in set(shards):
                table = self.pinned.get(s)
                if table is None:
                    table = self._loaded.get(s)
                    if table is not None:
                        self._loaded.move_to_end(s)
                if table is not None:
                    tables[s] = table
        need = sorted({s for s in shards if s not in tables})
        failed = self._load(need, fetch, tables) if need else {}
        out: list[tuple[int, int, int] | BaseException] = []
        for g, s in zip(numbers, shards, strict=True):
            if s in failed:
                out.append(failed[s])
                continue
            offsets, sizes = tables[s]
            local = g - int(self.starts[s])
            out.append((s, int(offsets[local]), int(sizes[local])))
        return out

    def _load(self, shards: list[int], fetch: Fetch, tables: dict[int, Ranges]) -> dict[int, BaseException]:
        """Read the sidecars of ``shards`` into ``tables`` (and keep them); the shards that failed,
        with their error."""
        counts = [int(self.starts[s + 1] - self.starts[s]) for s in shards]
        urls = [self.sidecar(s) for s in shards]
        got = fetch([(u, 0, sidecar_length(n)) for u, n in zip(urls, counts, strict=True)])
        failed: dict[int, BaseException] = {}
        for s, url, n, data in zip(shards, urls, counts, got, strict=True):
            try:
                if isinstance(data, ShardNotFoundError):
                    raise missing_sidecar(url) from data
                if isinstance(data, BaseException):
                    raise data
                offsets, sizes = decode_sidecar(url, data, n)
                if sizes is None:
                    raise ConfigurationError(_compressed(self.urls[s]))
            except Exception as exc:  # delivered in the samples' place
                failed[s] = exc
                continue
            tables[s] = (offsets, sizes)
            with self._lock:
                if s not in self._loaded:
                    self._loaded[s] = tables[s]
                    self._held += n
                while self._held > _KEEP_SAMPLES and len(self._loaded) > 1:
                    _, (old, _) = self._loaded.popitem(last=False)
                    self._held -= len(old)
        return failed


def _directory(url: str) -> str:
    return url.rpartition("/")[0]


def _indexed(directory: str, storage_options: Mapping[str, Any] | None) -> dict[str, IndexEntry]:
    try:
        return {e["url"]: e for e in read_index_entries(directory, storage_options=storage_options)}
    except ShardNotFoundError:
        return {}
    except IndexFormatError:
        raise
    except ConfigurationError as exc:
        log.warning("ignoring the shard index of %s: %s", redact_url(directory or "."), exc)
        return {}


def _table(directory: str, storage_options: Mapping[str, Any] | None) -> CountTable | None:
    try:
        counts = read_counts(directory, storage_options=storage_options)
    except IndexFormatError:
        raise
    except (ShardNotFoundError, ConfigurationError):
        return None  # (said again, and warned about, by the entry-by-entry path)
    return counts if isinstance(counts, CountTable) else None  # an older index: read entry by entry


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
    """Offsets and sizes of every sample of shard ``url``, read once from its start (a local
    shard: from its headers alone, see :mod:`shardstream.tar.walk`)."""
    if url.endswith(_COMPRESSED):
        raise ConfigurationError(_compressed(url))
    stream = source.open(url)
    fd = walkable(stream, url)
    if fd is not None:
        try:
            cursor = Cursor()
            members = walk_members(fd, url)
            offsets = [cursor.start for _ in group_samples(members, url, cursor=cursor)]
            return offsets, sample_sizes(offsets, os.fstat(fd).st_size - END_OF_ARCHIVE)
        finally:
            stream.close()
    try:
        counting = _Counting(stream)
        head = stream.read(2)
        counting.nread = len(head)
        if head == b"\x1f\x8b":
            raise ConfigurationError(_compressed(url))
        runs = member_runs(_Prefixed(head, counting), url)
        cursor = Cursor()
        offsets = [cursor.start for _ in group_runs(runs, url, cursor=cursor)]
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
        "the default for names ending in .tar) or stream this dataset with ss.ShardStream instead"
    )


def build_index(
    urls: Sequence[str], source: Source, *, storage_options: Mapping[str, Any] | None = None
) -> SampleIndex:
    """The :class:`SampleIndex` of ``urls``: counts from their ``_info.json`` files, ranges from
    the sidecars (when needed) or the index itself, else one pass over the shards.

    Raises:
        ConfigurationError: a compressed shard; an empty shard list.
        IndexFormatError: an index is truncated or corrupt.
        SourceError: a shard that had to be read could not be.
    """
    if not urls:
        raise ConfigurationError("ShardDataset needs at least one shard URL")
    compressed = next((u for u in urls if u.endswith(_COMPRESSED)), None)
    if compressed is not None:
        raise ConfigurationError(_compressed(compressed))
    n = len(urls)
    table = _table(_directory(urls[0]), storage_options) if "/" in urls[0] else None
    if table is not None and table.sidecars is not None:
        j = table.locate(urls)  # a run of one index's shards, all with sidecars: nothing else to read
        if j is not None and table.sidecars[j : j + n].all():
            return SampleIndex(urls, table.samples[j : j + n], np.ones(n, dtype=bool), {}, set())
    by_directory: dict[str, dict[str, IndexEntry]] = {}
    counts = np.zeros(n, dtype=np.int64)
    lazy = np.zeros(n, dtype=bool)
    pinned: dict[int, Ranges] = {}
    missing: list[int] = []
    for i, url in enumerate(urls):
        directory, _, name = url.rpartition("/")
        if directory not in by_directory:
            by_directory[directory] = _indexed(directory, storage_options)
        entry = by_directory[directory].get(name)
        if entry is not None and entry.get("sidecar"):
            counts[i], lazy[i] = entry["samples"], True
        elif entry is not None and _usable(entry):
            counts[i] = entry["samples"]
            pinned[i] = (np.array(entry["offsets"], np.int64), np.array(entry["sizes"], np.int64))
        else:
            missing.append(i)
    if missing:
        _scan(urls, missing, source, counts, pinned)
    return SampleIndex(urls, counts, lazy, pinned, set(missing))


def _scan(
    urls: Sequence[str],
    missing: list[int],
    source: Source,
    counts: npt.NDArray[np.int64],
    pinned: dict[int, Ranges],
) -> None:
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
        for i, (o, s) in zip(
            missing, pool.map(lambda i: scan_offsets(source, urls[i]), missing), strict=True
        ):
            counts[i] = len(o)
            pinned[i] = (np.array(o, np.int64), np.array(s, np.int64))
