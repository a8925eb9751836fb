"""The header walk (``tar/walk.py``): the members, samples and errors of a full read, from the
headers alone, and the counting passes that use it read a few KB of a 100 MB shard.

Shards are generated at random (a fixed seed) with our ``TarWriter`` and with the stdlib
``tarfile`` in its three formats; each is walked and read whole, and the two must agree on every
member name and offset, every sample count and, for a broken shard, the error's member, offset and
reason.
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import random
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstream as ss
from shardstream.cli import main
from shardstream.errors import ConfigurationError, ShardFormatError
from shardstream.readers.counts import clear_cache, shard_counts
from shardstream.sources.file import FileSource
from shardstream.sources.memory import MemorySource, memory_store
from shardstream.tar.index import read_index_entries
from shardstream.tar.reader import iter_members
from shardstream.tar.samples import TarFormat
from shardstream.tar.walk import walk_members, walkable
from shardstream.tar.writer import TarWriter

pytestmark = pytest.mark.timeout(120)

Outcome = Any  # a list of results, or ("error", reason, member, offset)


def _error(exc: ShardFormatError) -> tuple[str, str, str | None, int]:
    return ("error", exc.reason, exc.member, exc.offset)


def read_members(path: Path) -> Outcome:
    """``(name, offset)`` of every member, as the streaming reader yields them."""
    with open(path, "rb", buffering=0) as stream:
        try:
            return [(n, o) for n, _, o in iter_members(stream, str(path), shard_size=path.stat().st_size)]
        except ShardFormatError as exc:
            return _error(exc)


def walked_members(path: Path) -> Outcome:
    fd = os.open(path, os.O_RDONLY)
    try:
        found = []
        for name, data, offset in walk_members(fd, str(path)):
            assert data == b""
            found.append((name, offset))
        return found
    except ShardFormatError as exc:
        return _error(exc)
    finally:
        os.close(fd)


def counted(path: Path, fmt: TarFormat | None = None) -> Outcome:
    """``TarFormat.count`` (the walk, for a local shard)."""
    try:
        return (fmt or TarFormat()).count(FileSource(), str(path))
    except ShardFormatError as exc:
        return _error(exc)


def read_count(path: Path, fmt: TarFormat | None = None) -> Outcome:
    """The samples the full reader yields."""
    try:
        return sum(1 for _ in (fmt or TarFormat()).samples(FileSource(), str(path)))
    except ShardFormatError as exc:
        return _error(exc)


def assert_same(path: Path) -> None:
    members = read_members(path)
    assert walked_members(path) == members, path.name
    assert counted(path) == read_count(path), path.name


# -- generated shards -----------------------------------------------------------------------------

_DIRS = ["", "d/", "dir.v1/", "a/b.c/d/", "ünï/", "x" * 120 + "/"]
_STEMS = ["s", "img", "x" * 90, "long" * 30]
_EXTS = ["jpg", "JPG", "txt", "b.c", "cls", "json.gz", "Jpg"]
_ODD = ["README", "d/noext", ".hidden", "d/.dot.txt", "__meta__.json", "__dir__/x.txt", "a/__k__.txt"]


def _samples(rng: random.Random, n: int) -> Iterator[tuple[str, list[str]]]:
    for i in range(n):
        key = f"{rng.choice(_DIRS)}{rng.choice(_STEMS)}{i % 7 if rng.random() < 0.2 else i}"
        exts = rng.sample(_EXTS, rng.randint(1, 3))
        if rng.random() < 0.03:  # a repeated field: a format error, raised the same by both
            exts.append(exts[0].lower())
        yield key, exts


def _size(rng: random.Random) -> int:
    return rng.choice([0, 1, 100, 511, 512, 513, 1000, 5000, 20_000, 70_000, rng.randint(0, 3000)])


def tarfile_shard(path: Path, rng: random.Random, fmt: int, samples: int) -> None:
    """A shard written by the stdlib, with directories, links and odd names among the samples."""
    pax_headers = {"comment": "global", "path": "ignored.txt"} if fmt == tarfile.PAX_FORMAT else None
    with tarfile.open(path, "w", format=fmt, pax_headers=pax_headers) as tf:
        for key, exts in _samples(rng, samples):
            names = [f"{key}.{ext}" for ext in exts]
            if rng.random() < 0.15:
                names.insert(rng.randrange(len(names) + 1), rng.choice(_ODD))
            for name in names:
                if rng.random() < 0.1:
                    extra = tarfile.TarInfo(rng.choice(["adir", "d/sub.d", key + ".dir"]))
                    extra.type = rng.choice([tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE])
                    extra.linkname = "target.txt"
                    _add(tf, extra, b"")
                info = tarfile.TarInfo(name)
                data = bytes([rng.randrange(256)]) * _size(rng)
                info.size = len(data)
                _add(tf, info, data)


def _add(tf: tarfile.TarFile, info: tarfile.TarInfo, data: bytes) -> None:
    try:
        tf.addfile(info, io.BytesIO(data) if info.isreg() else None)
    except ValueError:  # a name that ustar cannot hold (too long to split, or not ASCII)
        pass


def writer_shard(path: Path, rng: random.Random, fmt: str | None, samples: int) -> None:
    with TarWriter(str(path), encoder=False, format=fmt) as writer:
        for i, (key, exts) in enumerate(_samples(rng, samples)):
            sample: dict[str, Any] = {"__key__": key.replace(".", "_") + f"-{i}"}
            for ext in exts:
                sample[ext.lower()] = bytes(_size(rng))
            writer.write(sample)


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tarfile_shards_walk_as_they_read(tmp_path: Path, fmt: int) -> None:
    rng = random.Random(fmt)
    errors = 0
    for i in range(60):
        path = tmp_path / f"t{fmt}-{i}.tar"
        tarfile_shard(path, rng, fmt, rng.choice([0, 1, 2, 5, 20]))
        assert_same(path)
        errors += isinstance(counted(path), tuple)
    assert 0 < errors < 30  # the duplicate-field shards raise, the others count


@pytest.mark.parametrize("fmt", [None, "gnu", "pax"])
def test_writer_shards_walk_as_they_read(tmp_path: Path, fmt: str | None) -> None:
    rng = random.Random(str(fmt))
    for i in range(40):
        path = tmp_path / f"w-{i}.tar"
        writer_shard(path, rng, fmt, rng.choice([0, 1, 3, 30]))
        assert_same(path)


def test_edge_shards(tmp_path: Path) -> None:
    path = tmp_path / "e.tar"
    cases: list[tuple[Callable[[Path], None], int]] = [
        (lambda p: p.write_bytes(bytes(1024)), 0),  # an empty archive
        (lambda p: p.write_bytes(bytes(512)), 0),  # one zero block ends it too
        (lambda p: tarfile.open(p, "w").close(), 0),  # tarfile's, padded to 10 KiB
        (lambda p: _one(p, "only.txt", b"x"), 1),  # a single member
        (lambda p: _one(p, "noext", b"x"), 0),  # a member without extension is no sample
        (lambda p: _one(p, "d/" + "k" * 200 + ".txt", b"x" * 70_000), 1),  # PAX path, a large member
    ]
    for make, samples in cases:
        make(path)
        assert_same(path)
        assert counted(path) == samples
    with TarWriter(str(path), encoder=False) as writer:  # thousands of tiny members
        for i in range(3000):
            writer.write({"__key__": f"k{i:05d}", "a": b"x" * (i % 50), "b": b""})
    assert_same(path)
    assert counted(path) == 3000


def _one(path: Path, name: str, data: bytes) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))


# -- broken shards --------------------------------------------------------------------------------


def _mixed(path: Path) -> bytes:
    """Tiny members, one larger than the walk's read window, GNU long names and PAX headers."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for i, size in enumerate([10, 0, 300_000, 700, 3]):
            info = tarfile.TarInfo(("g" * 120 if i == 3 else f"s{i}") + ".bin")
            info.size = size
            tf.addfile(info, io.BytesIO(bytes(size)))
    gnu = path.read_bytes()[: -2 * 512]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("p" * 130 + ".txt")
        info.size = 5
        tf.addfile(info, io.BytesIO(b"hello"))
    raw = gnu + buf.getvalue()
    path.write_bytes(raw)
    return raw


def _small(path: Path) -> bytes:
    """Small members over several of the walk's read windows."""
    with TarWriter(str(path), encoder=False) as writer:
        for i in range(200):
            writer.write({"__key__": f"k{i:04d}", "a": bytes(i * 7 % 1500), "b": b"x"})
    return path.read_bytes()


def test_truncated_shards_raise_what_the_reader_raises(tmp_path: Path) -> None:
    path = tmp_path / "cut.tar"
    for raw in (_mixed(tmp_path / "mixed.tar"), _small(tmp_path / "small.tar")):
        step = max(512, len(raw) // 512 // 40 * 512)
        ends = {len(raw) - 1024, len(raw) - 512, len(raw) - 1}
        cuts = sorted({*range(0, len(raw), step), *range(100, len(raw), 4096), *ends})
        for cut in cuts:
            path.write_bytes(raw[:cut])
            members = read_members(path)
            assert walked_members(path) == members, cut
            assert counted(path) == read_count(path), cut
    raw = _mixed(tmp_path / "mixed.tar")
    path.write_bytes(raw[:3000])
    with pytest.raises(ShardFormatError) as caught:
        TarFormat().count(FileSource(), str(path))
    assert caught.value.offset == 1536 and str(path) in str(caught.value)
    assert "byte offset 1536" in str(caught.value)
    assert "runs past the end of the shard" in caught.value.reason  # the large member's header


def test_corrupt_headers_raise_what_the_reader_raises(tmp_path: Path) -> None:
    path = tmp_path / "bad.tar"
    rng = random.Random(7)
    for raw in (_mixed(tmp_path / "mixed.tar"), _small(tmp_path / "small.tar")):
        positions = [*range(0, 1536, 11), *rng.sample(range(len(raw)), 100)]
        for at in positions:
            broken = bytearray(raw)
            broken[at] ^= rng.choice([0x01, 0x20, 0xFF])
            path.write_bytes(broken)
            assert walked_members(path) == read_members(path), at
            assert counted(path) == read_count(path), at
    raw = _mixed(tmp_path / "mixed.tar")
    broken = bytearray(raw)
    broken[20] ^= 0xFF  # the first header's name: its checksum no longer matches
    path.write_bytes(broken)
    with pytest.raises(ShardFormatError, match="bad tar header checksum") as caught:
        TarFormat().count(FileSource(), str(path))
    assert caught.value.offset == 0 and str(path) in str(caught.value)


# -- which shards are walked ----------------------------------------------------------------------


def test_only_local_uncompressed_shards_are_walked(tmp_path: Path) -> None:
    path = tmp_path / "a.tar"
    with TarWriter(str(path), encoder=False) as writer:
        for i in range(4):
            writer.write({"__key__": f"k{i}", "txt": b"x", "cls": b"1"})
    raw = path.read_bytes()
    (tmp_path / "b.tar.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "c.tar").write_bytes(gzip.compress(raw))  # gzip content under a .tar name
    memory_store["memory://t/a.tar"] = raw
    try:
        for url, source, walks in [
            (str(path), FileSource(), True),
            (path.as_uri(), FileSource(), True),
            (str(tmp_path / "b.tar.gz"), FileSource(), False),
            (str(tmp_path / "c.tar"), FileSource(), False),
            ("memory://t/a.tar", MemorySource(), False),
        ]:
            stream = source.open(url)
            try:
                assert (walkable(stream, url) is not None) == walks, url
                assert stream.tell() == 0  # (the check reads with pread)
            finally:
                stream.close()
            assert TarFormat().count(source, url) == 4  # walked or read whole, the same count
            keep_txt = TarFormat(select_files=lambda name: name.endswith(".txt"))
            assert keep_txt.count(source, url) == 4  # read whole: the format filters members
    finally:
        memory_store.pop("memory://t/a.tar")
    with pytest.raises(ConfigurationError, match="compressed"):  # random access still refuses gzip
        ss.ShardDataset(str(tmp_path / "c.tar"))


# -- what the counting passes read ----------------------------------------------------------------

_PROC_IO = Path("/proc/self/io")
_SHARD_BYTES = 100 << 20
_MEMBERS = 10


def _rchar() -> int:
    for line in _PROC_IO.read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def sparse_shard(path: Path, members: int = _MEMBERS, size: int = _SHARD_BYTES // _MEMBERS) -> None:
    """A shard of ``members`` members of ``size`` bytes whose data are holes (nothing written)."""
    with open(path, "wb") as f:
        for i in range(members):
            info = tarfile.TarInfo(f"s{i:04d}.bin")
            info.size = size
            f.write(info.tobuf(tarfile.USTAR_FORMAT))
            f.seek((size + 511) // 512 * 512, os.SEEK_CUR)
        f.write(bytes(1024))


def bytes_read(fn: Callable[[], Any]) -> tuple[int, Any]:
    before = _rchar()
    result = fn()
    return _rchar() - before, result


@pytest.fixture
def big_shard(tmp_path: Path) -> Path:
    if not _PROC_IO.exists():
        pytest.skip("needs /proc/self/io (Linux) to count the bytes read")
    (tmp_path / "warm").mkdir()
    sparse_shard(tmp_path / "warm" / "w.tar", members=2, size=1 << 20)  # for the first calls' imports
    path = tmp_path / "big" / "b-000000.tar"
    path.parent.mkdir()
    sparse_shard(path)
    assert path.stat().st_size > _SHARD_BYTES
    return path


_FEW_KB = 32 << 10


def test_count_reads_only_the_headers(big_shard: Path) -> None:
    warm = big_shard.parent.parent / "warm" / "w.tar"
    TarFormat().count(FileSource(), str(warm))  # (imports, first calls)
    used, n = bytes_read(lambda: TarFormat().count(FileSource(), str(big_shard)))
    assert n == _MEMBERS and used < _FEW_KB, used
    for url in (str(big_shard), big_shard.as_uri()):  # what the planner, len() and the default split use
        clear_cache()
        used, counts = bytes_read(functools.partial(shard_counts, [url]))
        assert counts == [_MEMBERS] and used < _FEW_KB, used
    clear_cache()


def test_index_and_ls_read_only_the_headers(big_shard: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warm = big_shard.parent.parent / "warm"
    assert main(["index", str(warm)]) == 0 and main(["ls", str(warm / "w.tar"), "--shards"]) == 0
    used, status = bytes_read(lambda: main(["index", str(big_shard.parent)]))
    assert status == 0 and used < _FEW_KB, used
    (entry,) = read_index_entries(str(big_shard.parent), offsets=True)
    step = 512 + _SHARD_BYTES // _MEMBERS
    assert entry["samples"] == _MEMBERS and entry["offsets"] == [i * step for i in range(_MEMBERS)]
    assert entry["sizes"] == [step] * _MEMBERS and entry["extensions"] == {"bin": _MEMBERS}
    os.remove(big_shard.parent / "_info.json")
    used, status = bytes_read(lambda: main(["ls", str(big_shard), "--shards", "--json"]))
    assert status == 0 and used < _FEW_KB, used
    assert '"samples": 10' in capsys.readouterr().out


def test_shard_dataset_offsets_from_the_headers(big_shard: Path) -> None:
    warm = big_shard.parent.parent / "warm" / "w.tar"
    assert len(ss.ShardDataset(str(warm))) == 2
    used, ds = bytes_read(lambda: ss.ShardDataset(str(big_shard)))
    assert len(ds) == _MEMBERS and used < _FEW_KB, used
