"""The tar reader against truncated shards and hand-crafted hostile headers (issue 9, items 1-3).

Truncation: a shard written by our ShardWriter is cut at every 512-byte block boundary (every
member boundary is one) and read through the ShardStream under each error policy. Hostile headers are
built byte by byte here, with valid checksums, so that only the field under test is wrong; every
test has a timeout, so a reader that loops fails instead of hanging.
"""

from __future__ import annotations

import gzip
import io
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import shardstream as ss
from shardstream.errors import ShardFormatError
from shardstream.handlers import Handler, ignore_and_continue, reraise_exception, warn_and_continue
from shardstream.sources import SchemeRouter
from shardstream.sources.file import FileSource
from shardstream.tar.reader import iter_members
from shardstream.tar.samples import TarFormat
from shardstream.tar.sharded_writer import ShardWriter

#: Every test here runs on both header parses (the compiled fast path and the Python one).
pytestmark = pytest.mark.usefixtures("tar_parse")

pytestmark = pytest.mark.timeout(60)

# -- truncation at every block boundary ---------------------------------------------------------


def _write_shard(path: Path) -> bytes:
    """Five samples of three fields; one member spans several blocks, one key needs a PAX header."""
    with ShardWriter(str(path.with_suffix("")) + "-%d.tar", maxcount=100, index=False) as writer:
        for i in range(5):
            key = "k" * 150 if i == 3 else f"s{i:03d}"
            writer.write(
                {"__key__": key, "txt": f"text {i}", "cls": i, "bin": bytes([65 + i]) * (300 + 500 * i)}
            )
    written = Path(str(path.with_suffix("")) + "-0.tar")
    written.rename(path)
    return path.read_bytes()


def _layout(raw: bytes) -> tuple[list[int], list[int], int]:
    """(member starts, sample ends, offset of the end-of-archive marker) of an intact shard."""
    members = list(iter_members(io.BytesIO(raw)))
    starts = [offset for _, _, offset in members]
    keys = [name.partition(".")[0] for name, _, _ in members]
    marker = len(raw) - 1024
    sample_ends = [starts[i + 1] for i in range(len(keys) - 1) if keys[i] != keys[i + 1]] + [marker]
    return starts, sample_ends, marker


def _plain(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if k not in ("__url__", "__local_path__")}


HANDLERS: list[Handler] = [reraise_exception, warn_and_continue, ignore_and_continue]


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[dict[str, Any]]]:
    path = tmp_path_factory.mktemp("intact") / "intact.tar"
    raw = _write_shard(path)
    reference = [_plain(s) for s in ss.ShardStream(str(path), shuffle_shards=False, cache=None)]
    assert len(reference) == 5 and len(raw) % 512 == 0
    return raw, reference


def _read(urls: list[str], handler: Handler) -> tuple[list[dict[str, Any]], BaseException | None, Any]:
    """(samples, the error: raised, or handed to the policy, the dataset)."""
    seen: list[BaseException] = []

    def policy(exc: BaseException) -> bool:  # the policy under test, watched
        seen.append(exc)
        return handler(exc)

    ds = ss.ShardStream(urls, shuffle_shards=False, cache=None, handler=policy, empty_check=False)
    got: list[dict[str, Any]] = []
    try:
        for sample in ds:
            got.append(sample)
    except ShardFormatError as exc:
        assert seen == [exc]
        return got, exc, ds
    assert len(seen) <= 1
    return got, seen[0] if seen else None, ds


def test_every_block_boundary_under_every_handler(
    shard: tuple[bytes, list[dict[str, Any]]], tmp_path: Path
) -> None:
    raw, reference = shard
    starts, sample_ends, marker = _layout(raw)
    intact = tmp_path / "intact.tar"
    intact.write_bytes(raw)
    cases = 0
    for cut in range(0, len(raw) + 1, 512):
        url = str(tmp_path / f"cut-{cut:06d}.tar")
        Path(url).write_bytes(raw[:cut])
        complete = sum(1 for end in sample_ends if end <= cut)  # samples wholly before the cut
        for handler in HANDLERS:
            cases += 1
            if handler is warn_and_continue and cut < marker + 512:
                with pytest.warns(UserWarning) as warned:
                    got, error, ds = _read([url, str(intact)], handler)
            else:
                got, error, ds = _read([url, str(intact)], handler)
            if cut >= marker + 512:  # the first zero block is there: nothing is missing
                assert error is None and ds.skipped == 0 and [_plain(s) for s in got] == reference * 2
                continue
            err = error
            assert isinstance(err, ShardFormatError), (cut, handler)
            head = got
            if handler is not reraise_exception:
                (stats,) = [s for s in ds.stats()["stages"] if s["skipped"]]
                assert ds.skipped == stats["skipped"] == 1, (cut, handler)
                assert stats["last_error"] == f"ShardFormatError: {err}"
                head, tail = got[: len(got) - 5], got[len(got) - 5 :]
                assert [_plain(s) for s in tail] == reference  # the next shard is read in full
                if handler is warn_and_continue:
                    assert any(url in str(w.message) for w in warned)
            assert err.url == url and url in str(err) and f"byte offset {err.offset}" in str(err)
            assert 0 <= err.offset <= cut and "handler=warn_and_continue" in str(err)
            if cut in starts or cut == marker:  # a member boundary: the marker rule finds it
                assert err.offset == cut and err.member is None
                assert ("empty (0 bytes)" if cut == 0 else "no end-of-archive marker") in str(err)
            # No partial sample: what arrived is a prefix of the shard, every field intact.
            assert [_plain(s) for s in head] == reference[: len(head)]
            assert complete - 1 <= len(head) <= complete, (cut, len(head), complete)
    assert cases == 3 * (len(raw) // 512 + 1)


def test_zero_byte_shard_is_an_error(tmp_path: Path) -> None:
    url = str(tmp_path / "empty.tar")
    Path(url).write_bytes(b"")
    with pytest.raises(ShardFormatError, match=r"empty \(0 bytes\)") as info:
        list(ss.ShardStream(url, cache=None))
    assert info.value.offset == 0 and info.value.url == url
    got, error, ds = _read([url], ignore_and_continue)
    assert got == [] and isinstance(error, ShardFormatError) and ds.skipped == 1


def test_gzip_of_a_cut_tar_and_resumed_reads_are_truncated(
    shard: tuple[bytes, list[dict[str, Any]]], tmp_path: Path
) -> None:
    raw, _ = shard
    starts, _, marker = _layout(raw)
    for cut in [*starts, marker]:
        with pytest.raises(ShardFormatError, match="no end-of-archive marker|empty") as info:
            list(iter_members(io.BytesIO(gzip.compress(raw[:cut])), "mem://c.tar.gz"))
        assert info.value.offset == cut
    # A ranged read from a sample boundary (a resume) of a cut shard fails at the same place,
    # and the message says how large the shard is (a local file's size is known for free).
    url = str(tmp_path / "cut.tar")
    Path(url).write_bytes(raw[: starts[-1]])
    with pytest.raises(ShardFormatError) as err:
        list(TarFormat().samples(FileSource(), url, offset=starts[3]))
    assert err.value.offset == starts[-1] and f"byte {starts[-1]} of a {starts[-1]}-byte shard" in str(
        err.value
    )


def test_concatenated_archives_end_at_the_first_marker() -> None:
    first, second = _tar([_member("a.txt", b"1")]), _tar([_member("b.txt", b"2")])
    assert [n for n, _, _ in iter_members(io.BytesIO(first + second))] == ["a.txt"]
    # Without a marker in between, the members simply continue (one archive).
    assert [n for n, _, _ in iter_members(io.BytesIO(first[:-1024] + second))] == ["a.txt", "b.txt"]


# -- hand-crafted headers ---------------------------------------------------------------------


def _header(name: bytes, size_field: bytes, typeflag: bytes = b"0") -> bytes:
    """One ustar header with a correct checksum around an arbitrary 12-byte size field."""
    h = bytearray(512)
    h[: len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = h[116:124] = b"0000000\0"
    h[124:136] = size_field.ljust(12, b"\0")[:12]
    h[136:148] = b"00000000000\0"
    h[156:157] = typeflag
    h[257:265] = b"ustar\x0000"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _octal(n: int) -> bytes:
    return b"%011o\0" % n


def _base256(n: int, negative: bool = False) -> bytes:
    return (b"\xff" if negative else b"\x80") + n.to_bytes(11, "big")


def _pad(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def _member(name: str, data: bytes, size_field: bytes | None = None, typeflag: bytes = b"0") -> bytes:
    field = _octal(len(data)) if size_field is None else size_field
    return _header(name.encode(), field, typeflag) + _pad(data)


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n += 1
    return str(n).encode() + body


def _pax(records: bytes, size_field: bytes | None = None) -> bytes:
    return _member("././@PaxHeader", records, size_field, typeflag=b"x")


def _tar(parts: list[bytes], end: bool = True) -> bytes:
    return b"".join(parts) + (bytes(1024) if end else b"")


GOOD = _member("s0.txt", b"hello")
TAIL = _member("s1.txt", b"x" * 3000)  # real data after the hostile header, for a reader to wander into


def _pax_size(value: str) -> bytes:
    """A PAX header declaring ``size=value`` for the member after it (at 1024)."""
    return _tar([GOOD, _pax(_pax_record("size", value)), _member("s1.txt", b"y"), TAIL])


def _pax_records(records: bytes) -> bytes:
    """A PAX header at 1024 holding ``records`` verbatim."""
    return _tar([GOOD, _pax(records), _member("s1.txt", b"y")])


def _size(field: bytes, typeflag: bytes = b"0") -> bytes:
    """A member header at 1024 whose size field is ``field``; real data follows."""
    name = "s1.txt" if typeflag == b"0" else "././@LongLink"
    return _tar([GOOD, _member(name, b"", field, typeflag), TAIL])


PAX_PATH = _pax(_pax_record("path", "s1.txt"))
E = "exceeds max_member_size"
# (id, archive, expected message fragment, offset of the bad header)
HOSTILE: list[tuple[str, bytes, str, int]] = [
    ("pax-size-negative", _pax_size("-1536"), "invalid member size '-1536' in PAX", 1024),
    ("pax-size-abc", _pax_size("abc"), "'abc'", 1024),
    ("pax-size-1e26", _pax_size("1" + "0" * 26), E, 2048),  # refused at the member it sizes
    ("pax-size-sign", _pax_size("+12"), "'+12'", 1024),
    ("pax-size-underscore", _pax_size("1_0"), "'1_0'", 1024),
    ("pax-size-space", _pax_size(" 12"), "' 12'", 1024),
    ("pax-size-arabic-digits", _pax_size("\u0661\u0662"), "PAX", 1024),
    ("pax-size-empty", _pax_size(""), "''", 1024),
    ("pax-size-5000-digits", _pax_size("9" * 5000), "PAX", 1024),
    ("pax-record-negative-length", _pax_records(b"-5 size=1\n"), "malformed", 1024),
    ("pax-record-zero-length", _pax_records(b"0 size=1\n"), "malformed", 1024),
    ("pax-record-past-end", _pax_records(b"99 size=1\n"), "malformed", 1024),
    ("pax-record-no-newline", _pax_records(b"10 size=12X"), "malformed", 1024),
    ("pax-record-no-equals", _pax_records(b"9 size12\n"), "malformed", 1024),
    ("pax-record-length-junk", _pax_records(b"1x size=1\n"), "malformed", 1024),
    ("pax-header-2MiB", _tar([GOOD, _pax(b"", _octal(2 << 20))]), "PAX or GNU long-name header of", 1024),
    ("pax-then-end", _tar([GOOD, PAX_PATH]), "not followed by the member", 2048),
    ("pax-then-eof", _tar([GOOD, PAX_PATH], end=False), "not followed", 2048),
    ("longname-2^40", _size(_base256(1 << 40), b"L"), E, 1024),
    ("longname-2MiB", _size(_octal(2 << 20), b"L"), "long-name header", 1024),
    (
        "longname-then-end",
        _tar([GOOD, _member("././@LongLink", b"s1.txt\0", typeflag=b"L")]),
        "not followed",
        2048,
    ),
    ("octal-8GiB", _size(_octal((8 << 30) - 1)), E, 1024),
    ("octal-12-digits", _size(b"777777777777"), E, 1024),
    ("octal-negative-sign", _size(b"-0000003000\0"), "unparsable", 1024),
    ("octal-plus-sign", _size(b"+0000000001\0"), "unparsable", 1024),
    ("octal-underscore", _size(b"0000_000001\0"), "unparsable", 1024),
    ("octal-digit-9", _size(b"00000000009\0"), "unparsable", 1024),
    ("octal-hex", _size(b"0x000000001\0"), "unparsable", 1024),
    ("base256-2^40", _size(_base256(1 << 40)), E, 1024),
    ("base256-2^80", _size(_base256(1 << 80)), E, 1024),
    ("base256-negative", _size(_base256(1536, negative=True)), "unparsable or negative", 1024),
    ("base256-all-ff", _size(b"\xff" * 12), "negative", 1024),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
@pytest.mark.parametrize("blocksize", [512, 4096, 1 << 20])
def test_hostile_header_is_a_located_format_error(case: tuple[str, bytes, str, int], blocksize: int) -> None:
    _, raw, fragment, offset = case
    members = iter_members(io.BytesIO(raw), "mem://hostile.tar", blocksize=blocksize)
    assert next(members)[0] == "s0.txt"  # the good member before the bad header
    with pytest.raises(ShardFormatError) as info:
        for name, _, at in members:  # nothing may repeat or move backwards
            assert name != "s0.txt" and at > 0
    err = info.value
    assert fragment in str(err) and err.url == "mem://hostile.tar" and err.offset == offset, str(err)
    assert "mem://hostile.tar" in str(err) and f"byte offset {offset}" in str(err)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("field", [_base256(1 << 40), _base256(1 << 80), _octal((8 << 30) - 1)])
def test_absurd_sizes_fail_before_any_allocation(field: bytes, tmp_path: Path) -> None:
    path = tmp_path / "absurd.tar"
    path.write_bytes(_tar([GOOD, _member("s1.txt", b"", field), TAIL]))
    tracemalloc.start()
    try:
        with pytest.raises(ShardFormatError, match="exceeds max_member_size") as info:
            list(TarFormat().samples(FileSource(), str(path)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.member == "s1.txt" and info.value.offset == 1024
    assert peak < 8 << 20


class _SizedStream(io.BytesIO):
    """An in-memory stream that knows its size, as HTTP/S3 streams do from Content-Length."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.size = len(data)


def test_member_larger_than_the_rest_of_a_known_size_shard(tmp_path: Path, http_server: Any) -> None:
    # The header says 40 KiB; the shard holds a few blocks. Known size: refused before reading.
    raw = _tar([GOOD, _member("s1.txt", b"", _octal(40 << 10)), TAIL])
    for stream in [_SizedStream(raw), open(_write(tmp_path / "short.tar", raw), "rb")]:  # noqa: SIM115
        with stream, pytest.raises(ShardFormatError, match="runs past the end of the shard") as info:
            list(TarFormat().samples(FileSource(), "short.tar", stream=stream))  # type: ignore[arg-type]
        assert info.value.member == "s1.txt" and info.value.offset == 1024
        assert f"of its {len(raw)} bytes remain" in str(info.value)
    # HTTP: the size comes with the response (no extra request).
    _write(Path(http_server.root) / "short.tar", raw)
    with pytest.raises(ShardFormatError, match="runs past the end"):
        list(TarFormat().samples(SchemeRouter(), f"{http_server.url}/short.tar"))
    # Unknown size: read as far as the bytes go, then a truncation error.
    with pytest.raises(ShardFormatError, match="truncated member data"):
        list(iter_members(io.BytesIO(raw), "short.tar"))


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_max_member_size_is_configurable(tmp_path: Path) -> None:
    url = _write(tmp_path / "big.tar", _tar([GOOD, _member("s1.txt", b"z" * 5000)]))
    with pytest.raises(ShardFormatError, match="max_member_size=4096") as info:
        list(TarFormat(max_member_size=4096).samples(FileSource(), url))
    assert info.value.member == "s1.txt"
    assert [s["txt"] for s in TarFormat(max_member_size=None).samples(FileSource(), url)][-1] == b"z" * 5000
    with pytest.raises(ss.ConfigurationError, match="max_member_size"):
        TarFormat(max_member_size=-1)


class _Recording(io.BytesIO):
    """Records the largest read request (a reader must never ask for a declared size at once)."""

    largest = 0

    def read(self, n: int | None = -1, /) -> bytes:
        self.largest = max(self.largest, n if n is not None and n >= 0 else 1 << 62)
        return super().read(n)

    readinto = None  # type: ignore[assignment]


@pytest.mark.timeout(10)
def test_large_members_are_read_in_chunks() -> None:
    # No limit, unknown size, a 1 TiB declared member with 64 KiB present: reads stay bounded.
    raw = _tar([GOOD, _member("s1.txt", b"", _base256(1 << 40)), b"q" * (64 << 10)], end=False)
    stream = _Recording(raw)
    with pytest.raises(ShardFormatError, match="truncated member data"):
        list(iter_members(stream, "mem://big.tar", blocksize=4096, max_member_size=None))
    assert stream.largest <= 16 << 20
    # A real large member still comes back whole.
    data = bytes(range(256)) * 4096
    assert list(iter_members(io.BytesIO(_tar([_member("a.bin", data)])), blocksize=4096))[0][1] == data


@pytest.mark.timeout(20)
def test_gzip_bomb_is_inflated_a_buffer_at_a_time() -> None:
    # 64 MiB of zeros after one member compress to ~64 KiB; one read must not inflate them all.
    bomb = gzip.compress(GOOD + bytes(64 << 20), 9)
    assert len(bomb) < 200 << 10
    tracemalloc.start()
    try:
        names = [name for name, _, _ in iter_members(io.BytesIO(bomb), "mem://bomb.tar.gz")]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert names == ["s0.txt"] and peak < 8 << 20
