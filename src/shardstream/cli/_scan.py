"""One pass over a shard that gathers what ``ls``, ``stat``, ``index`` and ``verify`` report.

The shard is read through the data path's own tar reader and sample grouping (so the sample
offsets recorded here are exactly those resume seeks to), every header checksum is checked on the
way, and the first structural error ends the shard (a tar stream cannot be resynchronised): it is
recorded as a :class:`Problem`, never raised. Commands that need no member data (``ls``,
``index``: counts, extensions, offsets) ask for ``headers_only``: a local, uncompressed shard is
then walked header by header (:mod:`shardstream.tar.walk`, the data skipped, the same members
and errors), the others read as usual. Shards are scanned in parallel threads (the work is
I/O and C-level parsing) with a progress bar counting shards.
"""

from __future__ import annotations

import collections
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import ShardFormatError, ShardStreamError, redact_url
from ..forks import GatedExecutor
from ._progress import Progress

__all__ = ["Problem", "ShardScan", "SampleHook", "scan_many", "scan_shard"]

#: Called with (scan, sample, member offsets by field) for every sample (decode checks, videos).
SampleHook = Callable[["ShardScan", dict[str, Any], dict[str, int]], None]


@dataclass(frozen=True)
class Problem:
    """Something wrong at one place: shard URL, member (if any), byte offset (if known)."""

    url: str
    message: str
    member: str | None = None
    offset: int | None = None

    def __str__(self) -> str:
        where = redact_url(self.url)
        if self.member is not None:
            where += f" member {self.member}"
        if self.offset is not None:
            where += f" at byte {self.offset}"
        return f"{where}: {redact_url(self.message)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": redact_url(self.url),
            "member": self.member,
            "offset": self.offset,
            "problem": redact_url(self.message),  # (it may name another shard: a duplicate key's)
        }


@dataclass
class ShardScan:
    """What one pass over shard ``url`` found."""

    url: str
    stored_bytes: int = 0
    compressed: bool = False
    members: int = 0
    offsets: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    extensions: collections.Counter[str] = field(default_factory=collections.Counter)
    extension_bytes: collections.Counter[str] = field(default_factory=collections.Counter)
    problems: list[Problem] = field(default_factory=list)
    complete: bool = False  # read to its end-of-archive marker without a structural error
    sized: bool = False  # stored_bytes is the size the source reports (else: the bytes read)
    extra: dict[str, Any] = field(default_factory=dict)  # for sample hooks

    @property
    def samples(self) -> int:
        return len(self.offsets)

    def problem(self, message: str, member: str | None = None, offset: int | None = None) -> None:
        self.problems.append(Problem(self.url, message, member, offset))


class _Counting:
    """Passes reads through, counting bytes and keeping the first two (gzip magic)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.head = b""
        self.nread = 0

    def read(self, n: int = -1, /) -> bytes:
        data = self.stream.read(n)
        if self.nread == 0:
            self.head = data[:2]
        self.nread += len(data)
        return data


def _known_size(stream: Any) -> int | None:
    size = getattr(stream, "size", None)
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        return size
    try:
        info = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def scan_shard(
    url: str,
    *,
    storage_options: dict[str, Any],
    allow_pipe: bool = False,
    hook: SampleHook | None = None,
    headers_only: bool = False,
) -> ShardScan:
    """Read shard ``url`` once; problems are recorded in the result, not raised.

    ``headers_only``: no member data is needed (no ``hook``; ``extension_bytes`` stays empty), so a
    local, uncompressed shard is walked from header to header instead of read (default False).
    """
    from ..sources import open_url
    from ..tar.grouping import Cursor, group_samples
    from ..tar.reader import iter_members
    from ..tar.walk import walk_members, walkable

    scan = ShardScan(url)
    try:
        stream = open_url(url, storage_options=storage_options, allow_pipe=allow_pipe)
    except (ShardStreamError, OSError) as exc:
        scan.problem(f"cannot open: {exc}")
        return scan
    member_offsets: dict[str, int] = {}
    counting = _Counting(stream)
    known = _known_size(stream)

    fd = walkable(stream, url) if headers_only and hook is None else None

    def members() -> Iterator[tuple[str, bytes, int]]:
        read = iter_members(counting, url, shard_size=known) if fd is None else walk_members(fd, url)
        for name, data, offset in read:
            scan.members += 1
            member_offsets[name] = offset
            yield name, data, offset

    cursor = Cursor()
    try:
        for sample in group_samples(members(), url, cursor=cursor):
            key = sample["__key__"]
            scan.offsets.append(cursor.start)
            scan.keys.append(key)
            where: dict[str, int] = {}
            for ext, value in sample.items():
                if ext[:2] == "__" and ext[-2:] == "__":
                    continue
                scan.extensions[ext] += 1
                if fd is None:
                    scan.extension_bytes[ext] += len(value)
                where[ext] = member_offsets.pop(f"{key}.{ext}", cursor.start)
            if hook is not None:
                hook(scan, sample, where)
            if len(member_offsets) > 1024:  # names that mapped to no field (skipped members)
                member_offsets.clear()
        scan.complete = True
    except ShardFormatError as exc:
        scan.problem(exc.reason, exc.member, exc.offset)
    except (ShardStreamError, OSError) as exc:
        scan.problem(f"read failed after {counting.nread} bytes: {exc}")
    finally:
        stream.close()
    scan.compressed = counting.head == b"\x1f\x8b"
    scan.stored_bytes = known if known is not None else counting.nread
    scan.sized = known is not None
    return scan


def scan_many(
    urls: Sequence[str],
    *,
    storage_options: dict[str, Any],
    allow_pipe: bool = False,
    jobs: int = 8,
    desc: str = "scan",
    hook: SampleHook | None = None,
    headers_only: bool = False,
) -> list[ShardScan]:
    """Scan ``urls`` with ``jobs`` threads and a progress bar; results in the order of ``urls``
    (``hook``, ``headers_only``: as :func:`scan_shard`'s)."""

    def one(url: str) -> ShardScan:
        return scan_shard(
            url, storage_options=storage_options, allow_pipe=allow_pipe, hook=hook, headers_only=headers_only
        )

    results: list[ShardScan] = []
    with Progress(len(urls), desc, "shard") as bar, GatedExecutor(max(1, min(jobs, len(urls)))) as pool:
        for scan in pool.map(one, urls):
            results.append(scan)
            bar.update(1, problems=sum(len(s.problems) for s in results))
    return results
