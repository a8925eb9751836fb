"""``shardstream demo`` end to end: local and s3:// streaming, and the server always stopped by PID."""

from __future__ import annotations

import json
import os
import re
import shlex
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
        assert "ss.Loader, 2 workers, 1 thread per process, decode rgb8, to_tuple jpg cls" in section
    assert "uploaded 4 shards to s3://shardstream-demo/" in remote
    capacity = re.search(r"decode-only capacity: .* by 2 processes .*\n([\d,]+) samples/s", local)
    assert capacity is not None, local
    for section in (local, remote):  # each rate, as a share of that capacity
        share = re.search(r"\n=> ([\d,]+) samples/s, (\d+)% of this machine's decode-only capacity", section)
        assert share is not None, section
        assert f"capacity ({capacity.group(1)} samples/s on 2 cores)" in section
    assert "next, try (each runs as printed):" in remote
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
    monkeypatch.setattr(_demo, "_report", lambda *args: None)  # only the server part matters
    monkeypatch.setattr(_demo, "MEASURE_S", 0.2)
    args = ["demo", "--dir", str(tmp_path), "--samples", "10", "--per-shard", "10", "--workers", "0"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "upload failed on purpose" in captured.err
    assert not _alive(_server_pid(captured.out))
    assert not list(tmp_path.glob("seaweed-*"))


def test_the_dataset_is_written_once_and_again_only_when_it_changed(tmp_path: Path) -> None:
    shards_dir = tmp_path / "shards"
    shards, written = _demo.prepare_dataset(shards_dir, 12, 5)
    assert written and [p.name for p in shards] == [f"demo-{i:06d}.tar" for i in range(3)]
    first = {p.name: p.stat().st_mtime_ns for p in shards}
    again, written = _demo.prepare_dataset(shards_dir, 12, 5)
    assert not written and again == shards
    assert {p.name: p.stat().st_mtime_ns for p in again} == first  # not touched

    shards[1].write_bytes(shards[1].read_bytes()[:4096])  # cut short (an interrupted copy, say)
    assert _demo.prepare_dataset(shards_dir, 12, 5)[1]
    shards[2].unlink()  # missing
    assert _demo.prepare_dataset(shards_dir, 12, 5)[1]
    stamp = shards_dir / _demo.STAMP
    old = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**old, "version": _demo.DATA_VERSION - 1}))  # an older demo's data
    assert _demo.prepare_dataset(shards_dir, 12, 5)[1]
    fewer, written = _demo.prepare_dataset(shards_dir, 8, 5)  # other arguments
    assert written and [p.name for p in fewer] == ["demo-000000.tar", "demo-000001.tar"]
    # the index is the new dataset's alone (no entry left from the three shards before)
    assert [e["url"] for e in json.loads((shards_dir / "_info.json").read_text())["shards"]] == [
        p.name for p in fewer
    ]
    assert not _demo.prepare_dataset(shards_dir, 8, 5)[1]


def test_a_second_run_reuses_the_data_and_every_next_command_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # bench --profile writes its PNG here
    monkeypatch.setattr(_demo, "MEASURE_S", 0.5)
    args = ["demo", "--dir", str(tmp_path / "demo"), "--samples", "24", "--per-shard", "8"]
    args += ["--batch-size", "4", "--local-only"]
    assert main(args) == 0
    assert "wrote 24 samples (256x256 JPEG + cls) into 3 shards" in capsys.readouterr().out
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("using the 24 samples (256x256 JPEG + cls) in 3 shards, ")
    assert f"that an earlier run wrote in {tmp_path / 'demo' / 'shards'}" in out
    assert re.search(r"\n[\d,]+ samples/s \([\d,]+ decoded\)\n", out), out
    assert "% of this machine's decode-only capacity (" in out
    listed = out.partition("next, try (each runs as printed):\n")[2].splitlines()
    commands = [line.strip() for line in listed if line.startswith("  shardstream ")]
    assert len(commands) == 3 and all(line.startswith("      ") for line in listed[1::2])
    for command in commands:
        assert main(shlex.split(command)[1:]) == 0, command
    shown = capsys.readouterr().out
    assert "cls:24 jpg:24" in shown and "decoded jpg: 0 problems" in shown
    assert "decode (into the batch)" in shown
