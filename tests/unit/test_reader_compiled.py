"""The tar reader's compiled fast path (``tar/_cmembers.c``) against its Python parse: the same
members, and the same error at the same member and offset, on archives of every kind the reader
meets (GNU long names, PAX headers, ustar prefixes, directories, links, large members, odd but
valid numeric fields, names that are not UTF-8) and on thousands of corrupted and truncated ones,
read through windows of several sizes. ``test_reader.py`` and ``test_reader_hostile.py`` run
every one of their tests on both parses too."""

from __future__ import annotations

import gzip
import io
import random
import tarfile
from collections.abc import Callable
from typing import Any

import pytest

from shardstream.errors import ShardFormatError
from shardstream.tar import reader
from shardstream.tar.reader import iter_members

#: Only where the compiled path is built (a build without it fails under ``CI=true``).
pytestmark = pytest.mark.usefixtures("compiled_tar_parse")

Outcome = tuple[list[tuple[str, bytes, int]], Any]


def _tar(members: list[tuple[str, bytes, bytes]], fmt: int, encoding: str = "utf-8") -> bytes:
    """``(name, data, type)`` members (``tarfile`` type codes) in one archive."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt, encoding=encoding) as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mtime = 1_700_000_000
            if kind == tarfile.SYMTYPE:
                info.linkname = "target"
            if kind in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return out.getvalue()


def _rechecksum(header: bytearray) -> None:
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)


def _archives() -> dict[str, bytes]:
    rng = random.Random(7)
    small = [
        (f"s{i:05d}.{ext}", rng.randbytes(rng.randrange(0, 700)), tarfile.REGTYPE)
        for i in range(60)
        for ext in ("json", "bin")
    ]
    odd_sizes = [
        (f"o{i}.bin", b"x" * size, tarfile.REGTYPE)
        for i, size in enumerate((0, 1, 511, 512, 513, 1024, 70_000))
    ]
    mixed = [
        ("dir/", b"", tarfile.DIRTYPE),
        ("dir/a.txt", b"a", tarfile.REGTYPE),
        ("dir/link.txt", b"", tarfile.SYMTYPE),
        ("dir/b.cls", b"7", tarfile.AREGTYPE),
        ("dir/c.bin", b"c" * 3000, tarfile.CONTTYPE),
        ("dir/" + "n" * 150 + ".jpg", b"long", tarfile.REGTYPE),
        ("d\u00e9j\u00e0/vu.txt", b"pax name", tarfile.REGTYPE),
        ("big.bin", rng.randbytes(1_200_000), tarfile.REGTYPE),  # over the 1 MiB fast-path bound
        ("after/big.txt", b"after", tarfile.REGTYPE),
    ]
    archives = {
        "ustar small": _tar(small, tarfile.USTAR_FORMAT),
        "ustar odd sizes": _tar(odd_sizes, tarfile.USTAR_FORMAT),
        "ustar prefix": _tar(
            [("p/" * 60 + "x.txt", b"prefixed", tarfile.REGTYPE), *small[:6]], tarfile.USTAR_FORMAT
        ),
        "gnu mixed": _tar(mixed, tarfile.GNU_FORMAT),
        "pax mixed": _tar(mixed, tarfile.PAX_FORMAT),
        "latin-1 names": _tar(
            [("caf\u00e9.txt", b"not utf-8", tarfile.REGTYPE), *small[:4]], tarfile.GNU_FORMAT, "latin-1"
        ),
    }
    # Valid numeric fields in layouts other writers use: space-padded octal, a size in GNU
    # base-256, a checksum with its NUL and space swapped.
    plain = bytearray(_tar(small[:8], tarfile.USTAR_FORMAT))
    variants = bytearray(plain)
    sizes = bytearray(plain)
    at = 0
    k = 0
    while variants[at] != 0:
        size = int(variants[at + 124 : at + 135], 8)
        if k % 3 == 0:
            variants[at + 124 : at + 136] = b"%11o " % size
        elif k % 3 == 1:
            variants[at + 124 : at + 136] = b"  %o\0" % size + b"\0" * (12 - len(b"  %o\0" % size))
        header = variants[at : at + 512]
        _rechecksum(header)
        if k % 2:
            header[154:156] = b" \0"
        variants[at : at + 512] = header
        sizes[at + 124 : at + 136] = b"\x80" + size.to_bytes(11, "big")
        header = sizes[at : at + 512]
        _rechecksum(header)
        sizes[at : at + 512] = header
        at += 512 + (size + 511) // 512 * 512
        k += 1
    archives["numeric layouts"] = bytes(variants)
    archives["base-256 sizes"] = bytes(sizes)
    archives["gzip"] = gzip.compress(archives["ustar small"])
    return archives


ARCHIVES = _archives()
#: Windows of several sizes: refills land at every kind of boundary.
BLOCKSIZES = (1024, 4096, 65536, 1 << 20)


def _outcome(data: bytes, fast: bool, **kw: Any) -> Outcome:
    saved = reader._plain_members
    if not fast:
        reader._plain_members = None
    got: list[tuple[str, bytes, int]] = []
    try:
        for member in iter_members(io.BytesIO(data), "mem://shard.tar", **kw):
            got.append(member)
    except ShardFormatError as err:
        return got, (str(err), err.member, err.offset)
    finally:
        reader._plain_members = saved
    return got, None


def _both(data: bytes, **kw: Any) -> Outcome:
    fast = _outcome(data, True, **kw)
    slow = _outcome(data, False, **kw)
    assert fast == slow
    return fast


@pytest.mark.parametrize("name", sorted(ARCHIVES))
@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_same_members_as_the_python_parse(name: str, blocksize: int) -> None:
    got, error = _both(ARCHIVES[name], blocksize=blocksize)
    assert error is None and got


@pytest.mark.parametrize("name", ["ustar small", "gnu mixed", "ustar odd sizes"])
def test_same_bounds_on_sizes_as_the_python_parse(name: str) -> None:
    """A shard size and a member limit that refuse some members: the same refusal, in the same place."""
    data = ARCHIVES[name]
    for shard_size in (len(data), len(data) - 700, 3000):
        _both(data, shard_size=shard_size)
    for limit in (100, 600, 5000):
        _both(data, max_member_size=limit)


def test_same_errors_on_corrupted_and_truncated_archives() -> None:
    rng = random.Random(46)
    names = sorted(k for k in ARCHIVES if k != "gzip")
    errors = 0
    for trial in range(1500):
        data = bytearray(ARCHIVES[names[trial % len(names)]])
        if trial % 5 == 4:
            data = data[: rng.randrange(0, len(data))]
        else:
            for _ in range(rng.randrange(1, 4)):
                header = rng.randrange(0, max(1, min(len(data), 40_000)) // 512) * 512
                at = header + rng.choice((rng.randrange(0, 512), 124 + rng.randrange(0, 32), 156))
                data[at] = rng.randrange(0, 256)
        _, error = _both(bytes(data), blocksize=rng.choice(BLOCKSIZES))
        errors += error is not None
    assert errors > 300  # the corruptions reached the checks, not only the member data


def test_the_compiled_path_reads_the_plain_members(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is taken, and leaves to the Python parse what it must (a PAX header)."""
    real: Callable[..., Any] = reader._plain_members  # type: ignore[assignment]
    taken: list[int] = []

    def counting(*args: Any) -> Any:
        members, start = real(*args)
        taken.append(len(members))
        return members, start

    monkeypatch.setattr(reader, "_plain_members", counting)
    got = list(iter_members(io.BytesIO(ARCHIVES["ustar small"]), "mem://a.tar"))
    # All but a member that straddles the end of the first read (64 KiB): the Python parse refills.
    assert len(got) == 120 and 118 <= sum(taken) < 120
    taken.clear()
    got = list(iter_members(io.BytesIO(ARCHIVES["pax mixed"]), "mem://b.tar"))
    names = [name for name, _, _ in got]
    assert "d\u00e9j\u00e0/vu.txt" in names and "big.bin" in names
    assert 0 < sum(taken) < len(got)
