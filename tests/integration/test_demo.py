"""``shardstream demo`` end to end: local and s3:// streaming, and the server always stopped by PID."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from shardstream.cli import _demo, main

pytestmark = pytest.mark.s3


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _server_pid(out: str) -> int:
    match = re.search(r"SeaweedFS pid (\d+) ready", out)
    assert match is not None, out
    return int(match.group(1))


def test_demo_streams_locally_and_over_s3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["demo", "--dir", str(tmp_path), "--samples", "40", "--per-shard", "10", "--batch-size", "8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "wrote 40 samples (256x256 JPEG + cls) into 4 shards" in out
    local, _, remote = out.partition("starting SeaweedFS")
    for section in (local, remote):
        assert "samples:          40\n" in section
        assert "samples/s:" in section and "MB/s:" in section and "CPU utilisation:" in section
        assert "2 workers, decode rgb8, to_tuple jpg cls" in section
    assert "uploaded 4 shards to s3://shardstream-demo/" in remote
    pid = _server_pid(out)
    assert f"stopped SeaweedFS (pid {pid})" in out
    assert not _alive(pid)
    assert not list(tmp_path.glob("seaweed-*")), "the server's data directory is removed"


def test_demo_stops_the_server_on_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_upload(shards: list[Path], storage_options: dict[str, object]) -> list[str]:
        raise RuntimeError("upload failed on purpose")

    monkeypatch.setattr(_demo, "_upload", failing_upload)
    monkeypatch.setattr(_demo, "_report", lambda title, config: None)  # only the server part matters
    args = ["demo", "--dir", str(tmp_path), "--samples", "10", "--per-shard", "10", "--workers", "0"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "upload failed on purpose" in captured.err
    assert not _alive(_server_pid(captured.out))
    assert not list(tmp_path.glob("seaweed-*"))
