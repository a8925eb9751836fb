"""Byte stream -> tar members: a streaming reader written for speed.

The stdlib ``tarfile`` module builds a ``TarInfo`` object, runs several method calls and issues
small reads for every member, which dominates the cost for tiny samples. This reader pulls large
blocks from the stream and slices headers and member data out of them, so a shard of small
members costs one read per block and a handful of bytes operations per member.

The common member (a regular file whose header and data lie whole in the buffer, with plain
octal fields and an exact checksum) is parsed in C when the optional ``_cmembers`` extension is
built (``_cmembers.c``, compiled by ``setup.py`` where a C compiler is found): one call takes every
such member in the buffer and stops at the first header it leaves to the Python parse below,
which handles everything else (long names, PAX headers, refills, every error) and is the whole
reader when the extension is missing. For tiny samples the Python parse of a header was most of
the reading thread's time, and in thread mode that thread's time per sample caps the loader
(``benchmarks/results/bench_scaling.md``, ``bench_tar_read.md``).

It understands ustar (with the POSIX ``prefix`` field), GNU long names (``L``), PAX extended
headers (``x``: ``path`` and ``size``), and gzip-compressed streams (detected by their magic
bytes). Non-regular members (directories, links, devices) are skipped. Every header's checksum is
verified, so a corrupt or truncated shard fails at the first bad byte with a
:class:`~shardstream.errors.ShardFormatError` naming the URL, the member and the offset.

Hostile input: every header field used is validated first (sizes: non-negative, in the field's
own syntax, at most ``max_member_size`` and within a shard of known size), so nothing makes the
reader go backwards or allocate what the shard does not hold; large members are read in chunks and
gzip is inflated a buffer at a time. A stream that ends without the end-of-archive marker (a zero
block) is truncated, a 0-byte one included. The first zero block ends the archive: what follows
(padding, a second archive appended with ``cat``) is not read, as with ``tarfile`` and GNU tar.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

from ..errors import ShardFormatError
from ._gzip import GzipReader, Readable

#: The compiled fast path for plain members (``_cmembers.c``), or ``None`` in an install built
#: without a C compiler, which reads with the Python parse below alone.
_plain_members: Callable[..., tuple[list[tuple[str, bytes, int]], int]] | None
try:
    from ._cmembers import plain_members

    _plain_members = plain_members
except ImportError:
    _plain_members = None

__all__ = ["DEFAULT_BLOCKSIZE", "DEFAULT_MAX_MEMBER_SIZE", "iter_members", "member_runs"]

DEFAULT_BLOCKSIZE = 1 << 20
#: Default ``max_member_size``: larger members are refused as corrupt or hostile headers.
DEFAULT_MAX_MEMBER_SIZE = 4 << 30
_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)
_REGULAR = (48, 0, 55)  # '0', NUL, '7' (contiguous file)
_GNU_LONGNAME = 76  # 'L'
_PAX = 120  # 'x'
_KEPT = (*_REGULAR, _GNU_LONGNAME, _PAX)  # types whose data is used; other members' data is skipped
_MAX_META_SIZE = 1 << 20  # PAX and GNU long-name headers: real ones hold a few hundred bytes
_MAX_CHUNK = 16 << 20  # direct reads of a large member: never one read of a declared size
_OCTAL_DIGITS = b"01234567"
_CHECKSUM_BLANKS = 8 * 32  # the checksum field counts as spaces
_ADLER_MOD = 65521
_CACHE_LIMIT = 4096


def _octal(field: bytes) -> int:
    """A numeric header field: octal digits (to a NUL, space-padded) or positive GNU base-256.
    ValueError for anything else (``int()`` alone would accept signs, underscores, whitespace)."""
    if field[:1] == b"\x80":  # GNU base-256 for values that do not fit in octal
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise ValueError("negative base-256 number")
    nul = field.find(0)
    field = (field if nul < 0 else field[:nul]).strip(b" ")
    if field.translate(None, _OCTAL_DIGITS):
        raise ValueError(f"not an octal number: {field!r}")
    return int(field, 8) if field else 0


def _parse_fields(fields: bytes) -> tuple[int, int, int]:
    """Header bytes 124-156 -> (size or -1, stored checksum or -1, byte sum of the checksum field)."""
    # The layout tar writers use (GNU tar, Python's tarfile, ours) first: the size as 11 octal
    # digits and a NUL, the checksum as 6 octal digits, a NUL and a space. isdigit() leaves out
    # what int() would also accept (signs, spaces, underscores) and int() refuses an 8 or a 9,
    # so this reads exactly what the strict parse below reads, in under half its time (a JPEG
    # shard's headers rarely repeat, so most of them are parsed).
    size_digits, check_digits = fields[:11], fields[24:30]
    if fields[11] == 0 and fields[30:32] == b"\x00 " and size_digits.isdigit() and check_digits.isdigit():
        try:
            return int(size_digits, 8), int(check_digits, 8), sum(check_digits) + 32
        except ValueError:  # an 8 or a 9: the strict parse says what is wrong
            pass
    size_field, checksum_field = fields[:12], fields[24:32]
    try:
        size = _octal(size_field)
    except ValueError:
        size = -1
    try:
        return size, _octal(checksum_field), sum(checksum_field)
    except ValueError:
        return size, -1, 0


def _parse_pax(data: bytes) -> dict[str, str]:
    """PAX records ``"<length> <key>=<value>\\n"``, framed strictly (as recent ``tarfile``)."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos, pos + 20)
        digits = data[pos:space]
        if space < 0 or not digits.isdigit():
            raise ValueError(f"bad record length at byte {pos}")
        length = int(digits)
        stop = pos + length - 1  # the record's closing newline
        if length < 5 or stop >= len(data) or data[stop] != 10:
            raise ValueError(f"bad record length {length} at byte {pos}")
        key, equals, value = data[space + 1 : stop].partition(b"=")
        if not key or not equals:
            raise ValueError(f"record without 'key=' at byte {pos}")
        records[key.decode("utf-8")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _parse_header(
    buf: bytes | bytearray, view: memoryview, pos: int, cache: dict[bytes, tuple[int, int, int]]
) -> tuple[int, int, str] | None:
    """The tar header at ``buf[pos : pos + 512]`` as ``(size, typeflag, name)``, or ``None`` when
    its checksum does not match.

    ``size`` is the size field (-1 when unparsable: the caller refuses it, naming the member);
    ``name`` joins the ustar ``prefix``, before a GNU long name or PAX ``path`` replaces it.
    ``view`` is a memoryview of ``buf``; ``cache`` memoises the field parses of one shard.

    This is :func:`iter_members`'s own header parse as a function, for the header walk
    (``walk.py``); the reader runs the same lines inline, because a Python call per member is a
    measurable share of a tiny member's cost (``bench_tar_read.py --only tiny``). The two must
    stay the same: ``tests/unit/test_walk.py`` compares the walk with the reader on generated,
    cut and corrupted shards.
    """
    fields = bytes(view[pos + 124 : pos + 156])
    parsed = cache.get(fields)
    if parsed is None:
        parsed = _parse_fields(fields)
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        cache[fields] = parsed
    size, expected, stored_sum = parsed
    if (
        expected < 0
        or ((zlib.adler32(view[pos : pos + _BLOCK]) & 0xFFFF) - 1 - stored_sum + _CHECKSUM_BLANKS - expected)
        % _ADLER_MOD
    ):
        return None
    nul = buf.find(0, pos, pos + 100)
    raw_name = buf[pos : nul if nul >= 0 else pos + 100]
    if buf[pos + 345] != 0 and buf[pos + 257 : pos + 263] == b"ustar\x00":
        prefix = buf[pos + 345 : pos + 500]
        nul = prefix.find(0)
        raw_name = (prefix[:nul] if nul >= 0 else prefix) + b"/" + raw_name
    return size, buf[pos + 156], raw_name.decode("utf-8", "surrogateescape")


def _pax_size(value: str) -> int:
    """A PAX ``size`` value: ASCII decimal digits only (no sign, spaces or underscores); -1 if not."""
    return int(value) if value.isascii() and value.isdigit() and len(value) < 40 else -1


def _refill(
    reader: Readable, view: memoryview, start: int, end: int, base: int, need: int
) -> tuple[int, int, int]:
    """Make ``need`` bytes available at ``start`` (moving the unparsed tail to the front if the
    buffer's end is too close); returns the new ``(start, end, base)``. Fewer bytes at EOF."""
    if len(view) - start < need:
        tail = end - start
        view[:tail] = view[start:end]
        base += start
        start, end = 0, tail
    readinto = getattr(reader, "readinto", None)
    while end - start < need:
        if readinto is not None:
            got = readinto(view[end:]) or 0
        else:
            data = reader.read(len(view) - end)
            got = len(data)
            view[end : end + got] = data
        if got == 0:
            break
        end += got
    return start, end, base


def _read_large(
    reader: Readable, first: memoryview, size: int, padded: int, keep: bool
) -> tuple[bytes | None, int]:
    """A member larger than the buffer: ``first`` (its buffered head) plus direct reads up to
    the end of its padding, in chunks of at most 16 MiB (never one read of the declared size).
    Returns ``(data or None if the stream ended, bytes present)``; data is ``b""`` unless ``keep``."""
    parts = [bytes(first[:size])] if keep else []
    have = min(len(first), size)
    consumed = len(first)
    while consumed < padded:
        # Never past the padding: the next header is buffered after this member.
        chunk = reader.read(min(padded - consumed, _MAX_CHUNK))
        if not chunk:
            return None, have
        if have < size:
            piece = chunk if have + len(chunk) <= size else chunk[: size - have]
            if keep:
                parts.append(piece)
            have += len(piece)
        consumed += len(chunk)
    return b"".join(parts), have


def _size_problem(
    size: int, typeflag: int, at: int, max_member_size: int | None, limit: int | None, field: bytes
) -> str | None:
    """Why the declared ``size`` of the member whose header is at ``at`` cannot be used, or ``None``."""
    if size < 0:
        return f"unparsable or negative member size in tar header (size field {field!r})"
    if max_member_size is not None and size > max_member_size:
        return (
            f"member size {size} bytes exceeds max_member_size={max_member_size} (a corrupt or "
            "hostile header; if members this large are real, raise max_member_size=)"
        )
    if limit is not None and size > limit - at - _BLOCK:
        left = max(0, limit - at - _BLOCK)
        return f"member size {size} bytes runs past the end of the shard ({left} of its {limit} bytes remain)"
    if size > _MAX_META_SIZE and typeflag in (_PAX, _GNU_LONGNAME):
        return f"PAX or GNU long-name header of {size} bytes (at most {_MAX_META_SIZE} accepted)"
    return None


_ORPHAN = "a PAX or GNU long-name header is not followed by the member it describes"
_BAD_CHECKSUM = "bad tar header checksum (not a tar file, or corrupt)"


def _read_pax(
    data: bytes, name: str | None, at: int, fail: Callable[[str, str | None, int], ShardFormatError]
) -> tuple[dict[str, str], int]:
    """A PAX extended header's records and the member size it sets (-1: none), checked: a
    malformed header or size raises ``fail(reason, member, at)``. The reader and the header walk
    (``walk.py``) read PAX headers with it (they are rare: no hot path)."""
    try:
        pax = _parse_pax(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise fail(f"malformed PAX extended header ({exc})", name, at) from None
    if "size" not in pax:
        return pax, -1
    size = _pax_size(pax["size"])
    if size < 0:
        raise fail(
            f"invalid member size {pax['size'][:40]!r} in PAX extended header (expected decimal digits)",
            pax.get("path", name),
            at,
        )
    return pax, size


def _pending(long_name: str | None, pax: dict[str, str] | None) -> str | None:
    return long_name if pax is None else pax.get("path", long_name)


def _ended(present: int, at: int, shard_size: int | None) -> str:
    """Why a stream that ended where a header was due is truncated."""
    if present:
        return f"truncated tar header (the stream ended {present} bytes into a 512-byte header)"
    if at == 0:
        return "the shard is empty (0 bytes), not a tar archive"
    known = "" if shard_size is None else f" of a {shard_size}-byte shard"
    return (
        f"no end-of-archive marker (the tar stream ends at byte {at}{known}, on a member boundary: "
        "the shard was cut there and any members after the cut are lost)"
    )


def iter_members(
    stream: Readable,
    url: str = "<stream>",
    *,
    blocksize: int = DEFAULT_BLOCKSIZE,
    offset: int = 0,
    shard_size: int | None = None,
    max_member_size: int | None = DEFAULT_MAX_MEMBER_SIZE,
) -> Iterator[tuple[str, bytes, int]]:
    """Yield ``(name, data, member_offset)`` for each regular member of the tar stream
    (:func:`member_runs`' lists, one member at a time; the arguments and errors are its own)."""
    for run in member_runs(
        stream,
        url,
        blocksize=blocksize,
        offset=offset,
        shard_size=shard_size,
        max_member_size=max_member_size,
    ):
        yield from run


def member_runs(
    stream: Readable,
    url: str = "<stream>",
    *,
    blocksize: int = DEFAULT_BLOCKSIZE,
    offset: int = 0,
    shard_size: int | None = None,
    max_member_size: int | None = DEFAULT_MAX_MEMBER_SIZE,
) -> Iterator[list[tuple[str, bytes, int]]]:
    """Yield the regular members of the tar stream as ``(name, data, member_offset)``, in lists:
    the compiled walk's run of members at a time, one member in a list for the Python parse.
    (:func:`~.grouping.group_runs` takes a run in one call: a generator step per member was a
    large part of the reading thread's time for tiny samples.)

    ``member_offset`` is where the member's first header starts (its GNU long-name or PAX
    header when it has one), so reading again from that offset yields the same member: it is
    the position resume and ranged reads use.

    Bytes are read with ``readinto`` (when the stream has it) into one reused buffer of
    ``blocksize`` bytes, and each member is cut out with a single copy; only the short unparsed
    tail moves on a refill. (Reading fresh ``bytes`` blocks and concatenating the leftover costs
    two more copies of every byte, which showed on fast networks.) Members larger than the
    buffer are read directly, in chunks.

    Args:
        stream: object with ``read(n)`` (and ideally ``readinto``); gzip is detected from the
            first bytes.
        url: used in error messages only.
        blocksize: size of the read buffer (default 1 MiB).
        offset: the byte offset of the stream's first byte within the shard (a ranged read
            that starts at a member boundary); offsets in errors and output count from the
            shard's start.
        shard_size: the shard's size in bytes when known for free (a local file, an HTTP
            Content-Length), counted like ``offset`` (default ``None``: unknown). A member
            declaring more bytes than remain is refused before it is read. Ignored for gzip.
        max_member_size: the largest member accepted (default 4 GiB); a larger declared size
            is refused before anything is allocated. ``None``: no limit (memory still follows
            the bytes actually present).

    Raises:
        ShardFormatError: bad checksum, invalid header field, a 0-byte or truncated stream
            (ending inside a header or member, or without the end-of-archive marker); names the
            URL, member and byte offset (of the uncompressed tar stream).
    """
    long_name: str | None = None
    pax: dict[str, str] | None = None
    pax_size = -1
    name: str | None = None
    field_cache: dict[bytes, tuple[int, int, int]] = {}
    start = end = 0  # buffer window [start, end); base = stream offset of buf[0]
    base = offset
    member_start = offset
    limit = shard_size
    threshold = _MAX_META_SIZE if max_member_size is None else min(_MAX_META_SIZE, max_member_size)

    def fail(reason: str, member: str | None, at: int) -> ShardFormatError:
        return ShardFormatError(reason, url=url, member=member, offset=at)

    try:
        reader: Readable = stream
        first = stream.read(min(blocksize, 1 << 16))
        if first[:2] == b"\x1f\x8b":
            reader = GzipReader(stream, first, blocksize)
            first = b""
            limit = None
        buf = bytearray(max(blocksize, 2 * _BLOCK, len(first)))
        view = memoryview(buf)
        capacity = len(buf)
        view[: len(first)] = first
        end = len(first)
        plain, far = _plain_members, -1 if limit is None else limit
        while True:
            if plain is not None and long_name is None and pax is None:
                # The compiled walk takes the run of plain members whole in the window and stops
                # at the first header it leaves to the parse below (_cmembers.c says which).
                got, start = plain(buf, start, end, base, threshold, far)
                if got:
                    name = got[-1][0]
                    yield got
            if end - start < _BLOCK:
                start, end, base = _refill(reader, view, start, end, base, _BLOCK)
                if end - start < _BLOCK:
                    if end == start and (long_name is not None or pax is not None):
                        raise fail(_ORPHAN, _pending(long_name, pax), base + start)
                    raise fail(_ended(end - start, base + start, limit), long_name, base + start)
            pos = start
            header_end = pos + _BLOCK
            header_offset = base + pos
            if long_name is None and pax is None:
                member_start = header_offset
            if buf[pos] == 0 and buf[pos:header_end] == _ZERO_BLOCK:
                if long_name is not None or pax is not None:
                    raise fail(_ORPHAN, _pending(long_name, pax), header_offset)
                return  # end-of-archive marker
            # From here to the name: _parse_header, inline (a call per member would slow tiny
            # members; change the two together, the header walk uses the function).
            # Verify the checksum: this is what catches a corrupt header before its garbage size
            # field derails the rest of the shard. The tar checksum is the plain byte sum of the
            # header; sum() over 512 bytes in CPython costs more than the rest of the member's
            # parse. The low half of Adler-32 is (1 + byte sum) mod 65521, computed in C in a
            # fraction of that: comparing modulo 65521 catches every corruption that changes the sum by
            # less than 65521, i.e. any error in fewer than 257 bytes.
            # Field parses are memoised: one key covers the size, mtime and checksum fields
            # (bytes 124-156), which repeat across headers; a dict hit costs a fraction of
            # strip + int() + sum().
            fields = bytes(view[pos + 124 : pos + 156])
            parsed = field_cache.get(fields)
            if parsed is None:
                parsed = _parse_fields(fields)
                if len(field_cache) > _CACHE_LIMIT:
                    field_cache.clear()
                field_cache[fields] = parsed
            size, expected, stored_sum = parsed
            if (
                expected < 0
                or (
                    (zlib.adler32(view[pos:header_end]) & 0xFFFF)
                    - 1
                    - stored_sum
                    + _CHECKSUM_BLANKS
                    - expected
                )
                % _ADLER_MOD
            ):
                raise fail(_BAD_CHECKSUM, long_name, header_offset)
            typeflag = buf[pos + 156]
            if long_name is not None:
                name = long_name
                long_name = None
            else:
                nul = buf.find(0, pos, pos + 100)
                raw_name = buf[pos : nul if nul >= 0 else pos + 100]
                if buf[pos + 345] != 0 and buf[pos + 257 : pos + 263] == b"ustar\x00":
                    prefix = buf[pos + 345 : pos + 500]
                    nul = prefix.find(0)
                    raw_name = (prefix[:nul] if nul >= 0 else prefix) + b"/" + raw_name
                name = raw_name.decode("utf-8", "surrogateescape")
            if pax is not None:
                name = pax.get("path", name)
                if pax_size >= 0:  # validated when the PAX header was read
                    size = pax_size
                pax, pax_size = None, -1
            # Validate the size before it moves the read position or sizes a buffer: a negative
            # size would send the reader backwards (forever, onto the same headers), a huge one
            # would allocate what the shard does not hold. One comparison on the hot path.
            if size > threshold or size < 0 or (limit is not None and size > limit - header_offset - _BLOCK):
                field = bytes(view[pos + 124 : pos + 136])
                problem = _size_problem(size, typeflag, header_offset, max_member_size, limit, field)
                if problem is not None:
                    raise fail(problem, name, header_offset)
            padded = (size + _BLOCK - 1) & ~(_BLOCK - 1)
            start = header_end
            if end - start >= padded:
                data = bytes(view[start : start + size])
                start += padded
            elif padded <= capacity:
                start, end, base = _refill(reader, view, start, end, base, padded)
                if end - start < padded:
                    have = max(0, min(size, end - start))
                    raise fail(f"truncated member data ({have} of {size} bytes present)", name, header_offset)
                data = bytes(view[start : start + size])
                start += padded
            else:
                large, have = _read_large(reader, view[start:end], size, padded, typeflag in _KEPT)
                if large is None:
                    raise fail(f"truncated member data ({have} of {size} bytes present)", name, header_offset)
                data = large
                base += start + padded
                start = end = 0
            if typeflag in _REGULAR:
                yield [(name, data, member_start)]
            elif typeflag == _GNU_LONGNAME:
                long_name = data.rstrip(b"\0").decode("utf-8", "surrogateescape")
            elif typeflag == _PAX:
                pax, found = _read_pax(data, name, header_offset, fail)
                if found >= 0:
                    pax_size = found
            # Other types (PAX globals, dirs, links, devices) carry nothing we yield.
    except (EOFError, zlib.error) as exc:
        raise fail(f"corrupt compressed stream ({exc})", name, base + start) from exc
