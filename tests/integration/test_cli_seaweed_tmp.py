"""The S3 server of the demo and the tests keeps its sockets and logs in its own directory."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from shardstream.testing.seaweed import SeaweedS3


@pytest.mark.s3
def test_weed_sockets_and_logs_stay_in_the_data_dir_and_go(tmp_path: Path) -> None:
    with SeaweedS3(tmp_path / "w") as server:
        own = server._tmp_dir
        assert own == tmp_path / "w" / "tmp"
        names = sorted(p.name for p in own.iterdir())
        assert "s3.sock" in names and "filer.sock" in names, names
        assert any(n.startswith("weed.") for n in names), names  # glog files and their symlinks
        assert not Path(f"/tmp/seaweedfs-s3-{server.port}.sock").exists()
        fixed = list(server._fixed_sockets)  # weed's gRPC sockets, hard-coded in /tmp, named by our ports
        assert any(p.exists() for p in fixed), fixed
        pid = server.pid
    assert pid is not None and not own.exists()
    assert not [p for p in fixed if p.exists()]


def test_a_long_data_dir_gets_a_short_temp_dir_that_is_removed(tmp_path: Path) -> None:
    server = SeaweedS3(tmp_path / ("x" * 80))
    server.data_dir.mkdir(parents=True)
    server._tmp_dir = server._make_tmp_dir()  # what start() does, without starting weed
    made = server._tmp_dir
    assert made.parent == Path(tempfile.gettempdir()) and made.name.startswith("shardstream-weed-")
    server.stop()
    assert not made.exists()
