"""A writer killed or failing mid-shard never leaves a truncated shard under its final name.

A real writer process (``_writer_child.py``) is killed with SIGKILL while it writes the fourth
shard, on a local directory and on S3 (SeaweedFS); and a writer whose own code raises inside the
``with`` block. Afterwards every shard under its final name is whole, the one in progress is not
there (a local writer leaves only a hidden ``.partial~`` file, removed by the next writer of that
name; an S3 multipart upload is never completed), and the dataset reads without error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _servers import SeaweedS3

import shardstream as ss
from shardstream.tar import ShardWriter

HERE = Path(__file__).resolve().parent


def _start(pattern: str, options: dict[str, Any] | None, mode: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(HERE / "_writer_child.py"), pattern, json.dumps(options or {}), mode]
    return subprocess.Popen(cmd, stderr=subprocess.PIPE)


def _kill_during_fourth_shard(proc: subprocess.Popen[bytes], third_done: Any) -> None:
    deadline = time.monotonic() + 60
    try:
        while not third_done():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the writer made no progress"
            time.sleep(0.01)
        time.sleep(0.08)  # well inside the fourth shard (50 samples at 5 ms each)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def _check_readable(urls: list[str], options: dict[str, Any] | None = None) -> None:
    ds = ss.ShardStream(urls, shuffle_shards=False, storage_options=options, cache=None)
    keys = [s["__key__"] for s in ds]  # reraise_exception: a truncated shard would raise here
    assert keys == [f"{i:05d}" for i in range(50 * len(urls))]


def test_a_killed_local_writer_leaves_whole_shards_only(tmp_path: Path) -> None:
    pattern = str(tmp_path / "shard-%06d.tar")
    proc = _start(pattern, None, "slow")
    _kill_during_fourth_shard(proc, lambda: (tmp_path / "shard-000002.tar").exists())
    names = sorted(os.listdir(tmp_path))
    final = [n for n in names if n.endswith(".tar")]
    assert final == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"], names
    partial = [n for n in names if n.startswith(".shard-000003.tar.partial~")]
    assert len(partial) == 1, names  # the killed writer's bytes, hidden
    _check_readable([str(tmp_path / n) for n in final])
    # The next writer of those names removes the dead writer's leftover.
    with ShardWriter(pattern, maxcount=50) as sink:
        for i in range(200):
            sink.write({"__key__": f"{i:05d}", "txt": "y"})
    assert not [n for n in os.listdir(tmp_path) if ".partial~" in n]
    _check_readable([str(tmp_path / f"shard-{k:06d}.tar") for k in range(4)])


def test_an_error_inside_the_writer_publishes_no_partial_shard(tmp_path: Path) -> None:
    pattern = str(tmp_path / "shard-%06d.tar")
    proc = _start(pattern, None, "raise")
    assert proc.wait(60) != 0
    assert proc.stderr is not None and b"the writer's own code failed" in proc.stderr.read()
    proc.stderr.close()
    names = sorted(os.listdir(tmp_path))
    assert [n for n in names if n.endswith(".tar")] == [f"shard-00000{k}.tar" for k in range(3)]
    assert not [n for n in names if ".partial~" in n], names  # discarded, not left behind
    index = json.loads((tmp_path / "_info.json").read_text())
    assert [e["url"] for e in index["shards"]] == [f"shard-00000{k}.tar" for k in range(3)]
    _check_readable([str(tmp_path / f"shard-00000{k}.tar") for k in range(3)])


@pytest.mark.s3
def test_a_killed_s3_writer_publishes_no_partial_object(s3_server: SeaweedS3) -> None:
    bucket = s3_server.create_bucket("killed-writer")
    options = s3_server.storage_options
    client = s3_server.client()

    def keys() -> list[str]:
        return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))

    proc = _start(f"s3://{bucket}/w/shard-%06d.tar", options, "slow")
    _kill_during_fourth_shard(proc, lambda: "w/shard-000002.tar" in keys())
    time.sleep(0.2)
    assert keys() == [f"w/shard-00000{k}.tar" for k in range(3)]
    _check_readable([f"s3://{bucket}/w/shard-00000{k}.tar" for k in range(3)], options)
    # An error inside the with block: the fourth shard's upload is aborted, not completed.
    proc = _start(f"s3://{bucket}/e/shard-%06d.tar", options, "raise")
    assert proc.wait(60) != 0
    if proc.stderr is not None:
        proc.stderr.close()
    written = [f"e/shard-00000{k}.tar" for k in range(3)]
    sidecars = [f"e/_offsets/shard-00000{k}.tar.bin" for k in range(3)]
    assert [k for k in keys() if k.startswith("e/")] == ["e/_info.json", *sidecars, *written]
