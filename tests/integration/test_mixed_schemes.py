"""One dataset over two schemes whose storage options differ: local shards beside ``ftp://`` ones
(the fsspec fallback, against a real FTP server). Each source takes its own options from the
shared dict; the fallback takes any option, so options meant for it are not typos for the others."""

from __future__ import annotations

from pathlib import Path

import pytest
from _ftp import FTPServer

import shardstream as ss
from shardstream.errors import ConfigurationError


def _write(pattern: str, first: int, options: dict[str, object] | None = None) -> None:
    with ss.ShardWriter(pattern, maxcount=2, storage_options=options) as writer:
        for i in range(first, first + 2):
            writer.write({"__key__": f"k{i}", "txt": f"sample {i}"})


def test_local_and_ftp_shards_in_one_dataset(ftp_server: FTPServer, tmp_path: Path) -> None:
    options = dict(ftp_server.storage_options)  # host, port, username, password: ftp's own
    _write(str(tmp_path / "local-%06d.tar"), 0)
    _write(ftp_server.url("mixed/remote-%06d.tar"), 2, options)
    urls = [str(tmp_path / "local-000000.tar"), ftp_server.url("mixed/remote-000000.tar")]
    ds = ss.ShardStream(urls, storage_options=options, shuffle_shards=False, cache=None)
    assert [s["txt"].decode() for s in ds] == [f"sample {i}" for i in range(4)]


def test_a_typo_is_still_refused_without_a_fallback_in_use(tmp_path: Path) -> None:
    _write(str(tmp_path / "only-%06d.tar"), 0)
    with pytest.raises(ConfigurationError, match="endpoint_urll"):
        ss.ShardStream([str(tmp_path / "only-000000.tar")], storage_options={"endpoint_urll": "x"})
