"""Local tar file -> its members' names and offsets, from the headers alone: the counting pass
for local shards without an index.

The streaming reader (:mod:`.reader`) reads every byte of a shard, which is what counting its
samples used to cost: every rank read the whole dataset before its first batch. A count needs
only the names and where each member starts, and in an uncompressed tar file each header says
how far the next one is. :func:`walk_members` reads a header and ``os.pread``-s the next one past
the member's data, so a shard of large members costs one small read per member.

Small members are the exception: after a member of at most ``_SMALL`` bytes the next read is a
window of ``_WINDOW`` bytes from where the last one ended, which takes the data between the
headers along. A system call per header would cost more than the few KB it skips, and on a cold
page cache scattered small reads are each a disk request, where sequential ones are read ahead
by the kernel (``benchmarks/bench_specs.py`` measures both, warm and cold). Such shards are
still read for less than the full reader's cost: nothing is copied per member.

What it yields is exactly what :func:`~.reader.iter_members` yields, less the data: the same
headers are accepted and refused (the reader's header parse as a function,
:func:`~.reader._parse_header`, and its own checks of sizes, GNU long names, PAX records and the
end of the archive), with the same :class:`~shardstream.errors.ShardFormatError` naming the URL,
the member and the byte offset. Fed to :func:`~.grouping.group_samples`, it gives the same
samples, keys and sample offsets.

Only local, uncompressed shards are walked (:func:`walkable`): a gzip stream has to be inflated
to find its headers, and a remote shard's headers would be a request each (more than streaming
the shard costs). Those, and remote shards read through the cache, keep the full read.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import ShardFormatError
from ..sources import local_path_of, scheme_of
from .reader import (
    _BAD_CHECKSUM,
    _BLOCK,
    _GNU_LONGNAME,
    _MAX_META_SIZE,
    _ORPHAN,
    _PAX,
    _REGULAR,
    _ZERO_BLOCK,
    DEFAULT_MAX_MEMBER_SIZE,
    _ended,
    _parse_header,
    _pending,
    _read_pax,
    _size_problem,
)

__all__ = ["walk_members", "walkable"]

#: Bytes read at once while members are small: the headers of many members in one read. On a
#: cold page cache this keeps the reads of a shard of small members sequential (the kernel's
#: read-ahead then serves them), where a read per header would be a disk request per member.
_WINDOW = 256 << 10
#: Members up to this size (padded, header included) are read a window at a time (at least four
#: headers a read); after a larger member only the next header is read.
_SMALL = _WINDOW // 4
_GZIP_MAGIC = b"\x1f\x8b"
_COMPRESSED = (".gz", ".tgz")


def walkable(stream: BinaryIO, url: str) -> int | None:
    """The file descriptor whose headers :func:`walk_members` can walk for shard ``url``, or
    ``None`` when the shard must be read whole.

    Walkable: a local URL (a plain path or ``file://``) whose stream reads a regular file in
    place (it carries ``local_path``: the file source, or a cache passing a local file through)
    and does not start with the gzip magic. Not walkable: remote URLs (through the cache too),
    names ending ``.gz``/``.tgz``, gzip content, pipes and other streams without a descriptor.
    The stream's position is left as it is (the walk reads with ``os.pread``).
    """
    if sys.platform == "win32" or scheme_of(url) != "file" or url.endswith(_COMPRESSED):
        return None
    if local_path_of(stream) is None:
        return None
    try:
        fd = stream.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode) or os.pread(fd, 2, 0) == _GZIP_MAGIC:
            return None
    except (AttributeError, OSError, ValueError):  # no descriptor (io.UnsupportedOperation included)
        return None
    return fd


def walk_members(
    fd: int, url: str = "<file>", *, max_member_size: int | None = DEFAULT_MAX_MEMBER_SIZE
) -> Iterator[tuple[str, bytes, int]]:
    """Yield ``(name, b"", member_offset)`` for each regular member of the uncompressed tar file
    open at ``fd``: :func:`~.reader.iter_members`'s output without the data, from the headers.

    Args:
        fd: a descriptor of a regular file (see :func:`walkable`); it is read with ``os.pread``
            and neither moved nor closed.
        url: the shard's URL, for errors.
        max_member_size: the largest member accepted (as the reader's; default 4 GiB).

    Raises:
        ShardFormatError: what :func:`~.reader.iter_members` raises for the same file, at the same
            member and byte offset (bad checksum, invalid size, a header or member past the end
            of the file, a missing end-of-archive marker, a malformed PAX header).
    """
    shard_size = os.fstat(fd).st_size
    threshold = _MAX_META_SIZE if max_member_size is None else min(_MAX_META_SIZE, max_member_size)
    cache: dict[bytes, tuple[int, int, int]] = {}
    long_name: str | None = None
    pax: dict[str, str] | None = None
    pax_size = -1
    # The buffer holds bytes [buf_at, buf_at + len(buf)) of the file. A header outside it is read
    # with `window` bytes: one header after a large member; after small ones, the next window from
    # where the buffer ends, so that the reads of a shard of small members are sequential (on a
    # cold page cache the kernel reads ahead of sequential reads, not of scattered ones).
    buf = b""
    view = memoryview(buf)
    buf_at = 0
    window = _BLOCK
    pos = 0  # the next header's offset
    member_start = 0

    def fail(reason: str, member: str | None, at: int) -> ShardFormatError:
        return ShardFormatError(reason, url=url, member=member, offset=at)

    while True:
        at = pos  # this header's offset
        rel = at - buf_at
        if rel + _BLOCK > len(buf):
            end = buf_at + len(buf)
            if window > _BLOCK and end <= at < end + window:  # read on from the buffer's end
                buf = os.pread(fd, at - end + window, end)
                buf_at = end
            else:
                buf = os.pread(fd, window, at)
                buf_at = at
            view = memoryview(buf)
            rel = at - buf_at
        present = len(buf) - rel
        if present < _BLOCK:
            if present == 0 and (long_name is not None or pax is not None):
                raise fail(_ORPHAN, _pending(long_name, pax), at)
            raise fail(_ended(present, at, shard_size), long_name, at)
        if long_name is None and pax is None:
            member_start = at
        if buf[rel] == 0 and buf[rel : rel + _BLOCK] == _ZERO_BLOCK:
            if long_name is not None or pax is not None:
                raise fail(_ORPHAN, _pending(long_name, pax), at)
            return  # end-of-archive marker
        header = _parse_header(buf, view, rel, cache)
        if header is None:
            raise fail(_BAD_CHECKSUM, long_name, at)
        size, typeflag, name = header
        if long_name is not None:
            name = long_name
            long_name = None
        if pax is not None:
            name = pax.get("path", name)
            if pax_size >= 0:
                size = pax_size
            pax, pax_size = None, -1
        if size > threshold or size < 0 or size > shard_size - at - _BLOCK:
            field = bytes(buf[rel + 124 : rel + 136])
            problem = _size_problem(size, typeflag, at, max_member_size, shard_size, field)
            if problem is not None:
                raise fail(problem, name, at)
        padded = (size + _BLOCK - 1) & ~(_BLOCK - 1)
        pos = at + _BLOCK + padded
        if pos > shard_size:  # the data is there (checked above), its padding is not
            have = max(0, min(size, shard_size - at - _BLOCK))
            raise fail(f"truncated member data ({have} of {size} bytes present)", name, at)
        if typeflag in _REGULAR:
            yield name, b"", member_start
            window = _WINDOW if padded + _BLOCK <= _SMALL else _BLOCK
        elif typeflag == _GNU_LONGNAME or typeflag == _PAX:
            start = rel + _BLOCK
            if start + padded + _BLOCK > len(buf):  # its data and the next header: one read
                buf = os.pread(fd, max(window, padded + _BLOCK), at + _BLOCK)
                view = memoryview(buf)
                buf_at, start = at + _BLOCK, 0
            data = buf[start : start + size]
            if typeflag == _GNU_LONGNAME:
                long_name = data.rstrip(b"\0").decode("utf-8", "surrogateescape")
            else:
                pax, found = _read_pax(data, name, at, fail)
                if found >= 0:
                    pax_size = found
        else:  # PAX globals, directories, links, devices: nothing to yield, skipped unread
            window = _WINDOW if padded + _BLOCK <= _SMALL else _BLOCK
