"""The streaming tar reader against stdlib tarfile as the reference."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from shardstream.errors import ShardFormatError
from shardstream.tar.reader import iter_members

#: Every test here runs on both header parses (the compiled fast path and the Python one).
pytestmark = pytest.mark.usefixtures("tar_parse")


def build_tar(
    members: list[tuple[str, bytes]], fmt: int = tarfile.USTAR_FORMAT, extra_types: bool = False
) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as tf:
        if extra_types:
            d = tarfile.TarInfo("adir")
            d.type = tarfile.DIRTYPE
            tf.addfile(d)
            link = tarfile.TarInfo("alink.txt")
            link.type = tarfile.SYMTYPE
            link.linkname = "x"
            tf.addfile(link)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return bio.getvalue()


def reference(raw: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        return [(m.name, tf.extractfile(m).read()) for m in tf if m.isreg()]  # type: ignore[union-attr]


def read(raw: bytes, blocksize: int = 1 << 20) -> list[tuple[str, bytes]]:
    return [(n, d) for n, d, _ in iter_members(io.BytesIO(raw), "mem://t.tar", blocksize=blocksize)]


MEMBERS = [
    (f"dir.v1/s{i:04d}.{ext}", bytes([i % 251]) * size)
    for i, size in enumerate([0, 1, 511, 512, 513, 1000, 5000, 70000])
    for ext in ("a", "b.c")
]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("blocksize", [512, 1000, 4096, 1 << 20])
def test_matches_tarfile(fmt: int, blocksize: int) -> None:
    raw = build_tar(MEMBERS, fmt, extra_types=True)
    assert read(raw, blocksize) == reference(raw) == MEMBERS


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_long_names_over_100_chars(fmt: int) -> None:
    members = [("d" * 150 + f"/sample{i}.txt", b"x" * i) for i in range(5)]
    raw = build_tar(members, fmt)
    assert read(raw, 777) == members


def test_ustar_prefix_field() -> None:
    # ustar splits long paths into prefix + name.
    members = [("p" * 90 + "/" + "q" * 60 + "/k.txt", b"data")]
    raw = build_tar(members, tarfile.USTAR_FORMAT)
    assert read(raw) == members


def test_pax_unicode_name() -> None:
    members = [("näme/ключ.txt", b"1")]
    assert read(build_tar(members, tarfile.PAX_FORMAT)) == members


@pytest.mark.parametrize("blocksize", [300, 1 << 20])
def test_gzip_single_and_concatenated(blocksize: int) -> None:
    raw = build_tar(MEMBERS)
    assert read(gzip.compress(raw), blocksize) == MEMBERS
    # Two gzip members back to back decode as one stream.
    half = len(raw) // 1024 * 512
    assert read(gzip.compress(raw[:half]) + gzip.compress(raw[half:]), blocksize) == MEMBERS


def test_no_end_of_archive_blocks_is_truncated() -> None:
    raw = build_tar(MEMBERS)
    body = raw.rstrip(b"\0")
    # Cut exactly after the last member's padding: every member is whole, the marker is missing.
    end = len(body) + (-len(body)) % 512
    with pytest.raises(ShardFormatError, match="no end-of-archive marker") as info:
        read(raw[:end])
    assert info.value.offset == end and info.value.member is None
    # One zero block is enough to end the archive (as for tarfile and GNU tar).
    assert read(raw[: end + 512]) == MEMBERS


@pytest.mark.parametrize("cut", [100, 512 + 3, 2048 + 700, -2000])
def test_truncated_stream_names_url_member_offset(cut: int) -> None:
    raw = build_tar([("a.txt", b"x" * 3000), ("b.txt", b"y" * 3000)])
    raw = raw[:cut] if cut > 0 else raw[: len(raw) + cut - 1024]
    with pytest.raises(ShardFormatError) as info:
        read(raw, 1024)
    err = info.value
    assert err.url == "mem://t.tar"
    assert err.offset >= 0
    assert "mem://t.tar" in str(err) and "byte offset" in str(err) and "handler" in str(err)
    if cut == 2048 + 700:  # inside the data of the first member... after its header at 0
        pass


def test_truncated_data_reports_member_and_header_offset() -> None:
    raw = build_tar([("a.txt", b"x" * 600), ("b.txt", b"y" * 3000)])
    # b.txt's header is at 512 + 1024 = 1536; cut inside its data.
    with pytest.raises(ShardFormatError) as info:
        read(raw[: 1536 + 512 + 100], 512)
    assert info.value.member == "b.txt"
    assert info.value.offset == 1536
    assert "truncated member data" in str(info.value)


@pytest.mark.parametrize("position", [0, 50, 124, 150, 300, 511])
def test_corrupt_header_byte_detected(position: int) -> None:
    raw = bytearray(build_tar([("a.txt", b"x" * 10), ("b.txt", b"y" * 10)]))
    raw[1024 + position] ^= 0x5A  # corrupt the second header
    with pytest.raises(ShardFormatError) as info:
        read(bytes(raw))
    assert info.value.offset == 1024
    assert "checksum" in str(info.value) or "size" in str(info.value)


def test_not_a_tar_file() -> None:
    with pytest.raises(ShardFormatError, match="checksum"):
        read(b"this is not a tar file" * 100)


def test_corrupt_gzip_is_a_format_error() -> None:
    data = bytearray(gzip.compress(build_tar(MEMBERS)))
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(ShardFormatError):
        read(bytes(data))


def _rewrite(raw: bytes, size_fmt: bytes, check_fmt: bytes) -> bytes:
    """``raw`` (one-member-per-header ustar) with every header's size and checksum fields
    written in the given layouts (``%``-formats of 12 and 8 bytes), checksums recomputed."""
    out = bytearray(raw)
    pos = 0
    while pos + 512 <= len(out) and any(out[pos : pos + 512]):
        header = out[pos : pos + 512]
        size = int(bytes(header[124:136]).rstrip(b"\0 ") or b"0", 8)
        header[124:136] = size_fmt % size
        header[148:156] = b" " * 8
        header[148:156] = check_fmt % sum(header)
        out[pos : pos + 512] = header
        pos += 512 + (size + 511) // 512 * 512
    return bytes(out)


# (size layout, checksum layout): GNU tar and tarfile write the first; the others are parsed
# by the strict path and must read the same.
LAYOUTS = [
    (b"%011o\0", b"%06o\0 "),
    (b"%011o ", b"%06o\0 "),
    (b"%012o", b"%06o\0 "),
    (b"%011o\0", b"%07o\0"),
    (b"%011o\0", b" %06o\0"),
    (b"%11o\0", b"%6o\0 "),  # space-padded digits
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=[f"{s.decode()!r}-{c.decode()!r}" for s, c in LAYOUTS])
def test_every_field_layout_reads_the_same(layout: tuple[bytes, bytes]) -> None:
    members = [
        (f"s{i:04d}.{ext}", bytes([i]) * size)
        for i, size in enumerate([0, 1, 700, 9000, 40000])
        for ext in ("a", "b")
    ]
    raw = _rewrite(build_tar(members), *layout)
    assert read(raw) == reference(raw) == members


@pytest.mark.parametrize(
    "size_field",
    [b"00000000018\0", b"00000 00001\0", b"+0000000001\0", b"0000_000001\0", b"\xd9\xa1" + b"0" * 9 + b"\0"],
)
def test_near_misses_of_the_common_layout_are_refused(size_field: bytes) -> None:
    raw = bytearray(build_tar([("s0.txt", b"hello"), ("s1.txt", b"x")]))
    header = raw[1024 : 1024 + 512]
    header[124:136] = size_field
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    raw[1024 : 1024 + 512] = header
    members = iter_members(io.BytesIO(bytes(raw)), "mem://t.tar")
    assert next(members)[0] == "s0.txt"
    with pytest.raises(ShardFormatError, match="unparsable or negative member size"):
        next(members)
