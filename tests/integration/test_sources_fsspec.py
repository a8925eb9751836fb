"""The fsspec fallback source: ``ftp://`` against a real FTP server (pyftpdlib), and a fault in the
middle of a read resumed at the byte offset (an fsspec filesystem of our own that breaks once)."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import fsspec
import pytest
from _ftp import FTPServer
from fsspec.implementations.memory import MemoryFileSystem

import shardstream as ss
from shardstream.cli import main
from shardstream.errors import AccessDeniedError, ConfigurationError, ShardNotFoundError
from shardstream.sources import create_url, get_source, open_url
from shardstream.sources.fallback import FsspecSource


def _write_shards(url_pattern: str, options: dict[str, Any], n: int = 3, per: int = 4) -> list[str]:
    keys = []
    with ss.ShardWriter(url_pattern, maxcount=per, storage_options=options) as writer:
        for i in range(n * per):
            key = f"k{i:04d}"
            writer.write({"__key__": key, "txt": f"sample {i}", "cls": i})
            keys.append(key)
    return keys


def test_shards_written_and_read_back_over_ftp(ftp_server: FTPServer) -> None:
    options = ftp_server.storage_options
    keys = _write_shards(ftp_server.url("train/train-%06d.tar"), options)
    on_disk = sorted(p.name for p in (ftp_server.root / "train").iterdir())
    assert on_disk == ["_info.json", "_offsets", "train-000000.tar", "train-000001.tar", "train-000002.tar"]
    assert not [n for n in on_disk if n.startswith(".")]  # no temporary object left
    ds = ss.ShardStream(
        ftp_server.url("train/train-{000000..000002}.tar"), storage_options=options, shuffle_shards=False
    )
    got = [(s["__key__"], s["txt"].decode()) for s in ds]
    assert got == [(k, f"sample {i}") for i, k in enumerate(keys)]


def test_cli_lists_a_prefix_without_index(ftp_server: FTPServer, capsys: pytest.CaptureFixture[str]) -> None:
    options = ftp_server.storage_options
    _write_shards(ftp_server.url("cli/part-%06d.tar"), options, n=2, per=3)
    (ftp_server.root / "cli" / "readme.txt").write_text("not a shard")
    flags = [f"--storage-option={k}={v}" for k, v in options.items()]
    assert main(["ls", ftp_server.url("cli/"), "--no-header", *flags]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [row[-1] for row in rows[:2]] == [
        ftp_server.url("cli/part-000000.tar"),
        ftp_server.url("cli/part-000001.tar"),
    ]
    assert [row[0] for row in rows[:2]] == ["3", "3"]
    out = capsys.readouterr()
    assert ftp_server.password not in out.out + out.err


def test_object_stream_lists_an_ftp_prefix(ftp_server: FTPServer) -> None:
    base = ftp_server.root / "objs" / "sub"
    base.mkdir(parents=True)
    for i in range(6):
        (base / f"{i:03d}.txt").write_text(f"object {i}")
        (base / f"{i:03d}.cls").write_text(str(i))
    stream = ss.ObjectStream(
        ftp_server.url("objs/"), storage_options=ftp_server.storage_options, shuffle=False
    )
    got = sorted((s["__key__"], s["txt"], s["cls"]) for s in stream)
    assert got == [(f"sub/{i:03d}", f"object {i}".encode(), str(i).encode()) for i in range(6)]


def test_failed_write_publishes_nothing(ftp_server: FTPServer) -> None:
    url = ftp_server.url("aborted/one.bin")
    with pytest.raises(RuntimeError, match="boom"):
        with create_url(url, storage_options=ftp_server.storage_options) as out:
            out.write(b"x" * 100_000)
            raise RuntimeError("boom")
    folder = ftp_server.root / "aborted"
    assert not folder.exists() or not list(folder.iterdir())


def test_errors_name_the_url_and_hide_the_password(ftp_server: FTPServer) -> None:
    missing = ftp_server.url("nowhere/missing.tar")
    with pytest.raises(ShardNotFoundError) as found:
        open_url(missing, storage_options=ftp_server.storage_options).read()
    assert "nowhere/missing.tar" in str(found.value)
    wrong = {"username": ftp_server.user, "password": "not-the-password"}
    with pytest.raises((AccessDeniedError, ConfigurationError)) as denied:
        open_url(ftp_server.url("x.bin"), storage_options=wrong).read()
    assert "not-the-password" not in str(denied.value)
    assert "not-the-password" not in repr(get_source(missing, wrong))


def test_unknown_scheme_names_the_fsspec_extra() -> None:
    with pytest.raises(ConfigurationError, match=r"fsspec.*shardstream\[fsspec\]"):
        open_url("nosuchproto://bucket/x.tar")


# -- a fault in the middle of a read ----------------------------------------------------------------


class _BreaksOnce(MemoryFileSystem):
    """fsspec's memory filesystem whose first file read past ``BREAK_AT`` raises a connection reset:
    what a dropped connection looks like to fsspec's own network filesystems."""

    protocol = "breaksonce"
    BREAK_AT = 300_000
    opened_at: list[int] = []  # noqa: RUF012 (test bookkeeping, shared on purpose)
    broken = False

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        if path.startswith("breaksonce://"):
            path = path[len("breaksonce://") :]
        return str(super()._strip_protocol(path))

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        handle = super()._open(path, mode, **kwargs)
        if "r" not in mode:
            return handle
        owner = type(self)
        read = handle.read

        def breaking_read(size: int = -1) -> bytes:
            if not owner.broken and handle.tell() >= owner.BREAK_AT:
                owner.broken = True
                raise ConnectionResetError("connection reset by peer (injected)")
            return bytes(read(size))

        handle.read = breaking_read
        seek = handle.seek

        def recording_seek(offset: int, whence: int = 0) -> int:
            owner.opened_at.append(offset)
            return int(seek(offset, whence))

        handle.seek = recording_seek
        return handle


def test_a_cut_read_is_resumed_at_the_byte_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    fsspec.register_implementation("breaksonce", _BreaksOnce, clobber=True)
    data = random.Random(3).randbytes(1_000_003)
    store = _BreaksOnce()
    with store.open("/bucket/blob.bin", "wb") as out:
        out.write(data)
    _BreaksOnce.opened_at = []
    _BreaksOnce.broken = False
    source = get_source("breaksonce://bucket/blob.bin", {"retries": 3})
    assert isinstance(source, FsspecSource)
    got = io.BytesIO()
    with source.open("breaksonce://bucket/blob.bin", offset=17, length=900_000) as stream:
        while block := stream.read(65_536):
            got.write(block)
    assert got.getvalue() == data[17 : 17 + 900_000]
    assert _BreaksOnce.broken
    # the first open seeks to 17; the resume reopens exactly where the delivered bytes end
    assert _BreaksOnce.opened_at[0] == 17
    # (a read handle seeks to 0 when it is closed) the resume reopens where the delivered bytes end:
    # past the break, not at the range's start, so nothing is read twice or skipped (bytes equal)
    resumed = [offset for offset in _BreaksOnce.opened_at[1:] if offset]
    assert resumed and _BreaksOnce.BREAK_AT <= resumed[0] < _BreaksOnce.BREAK_AT + 2 * 65_536
    assert source.stat("breaksonce://bucket/blob.bin").size == len(data)
    names = [item.key for item in source.list_objects("breaksonce://bucket/")]
    assert names == ["blob.bin"]


def test_fallback_needs_no_listing_or_index_for_brace_specs(tmp_path: Path, ftp_server: FTPServer) -> None:
    # A plain spec never lists: the URLs go straight to opens.
    _write_shards(ftp_server.url("brace/b-%06d.tar"), ftp_server.storage_options, n=2, per=2)
    ds = ss.ShardStream(
        ftp_server.url("brace/b-{000000..000001}.tar"), storage_options=ftp_server.storage_options
    )
    assert len(list(ds)) == 4
