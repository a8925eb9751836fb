"""pipe: URLs: opt-in, clean early stop (no child left, nothing on stderr), exit-status errors, writing."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import psutil
import pytest

from shardstream.errors import PipeCommandError, UnsafeOperationError
from shardstream.sources import create_url, open_url, stat_url

_servers: set[int] = set()  # long-lived children of the session (SeaweedFS), not ours to count


@pytest.fixture(autouse=True)
def _known_children() -> None:
    _servers.clear()
    _servers.update(p.pid for p in psutil.Process().children(recursive=True))


def _children() -> list[psutil.Process]:
    """Child processes (recursive) started during this test and still alive (zombies included)."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in _servers]


def _wait_no_children(timeout: float = 5.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := _children()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    path = tmp_path / "big.tar"
    path.write_bytes(os.urandom(4 << 20))
    return path


def test_refused_without_opt_in(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(UnsafeOperationError, match="allow_pipe=True"):
        open_url(f"pipe:touch {marker}")
    with pytest.raises(UnsafeOperationError):
        create_url(f"pipe:cat > {marker}")
    assert not marker.exists()


def test_read_to_end_and_offset(big_file: Path) -> None:
    url = f"pipe:cat {shlex.quote(str(big_file))}"
    data = big_file.read_bytes()
    with open_url(url, allow_pipe=True) as stream:
        assert stream.read() == data
    with open_url(url, offset=1_000_001, allow_pipe=True) as stream:
        assert stream.read() == data[1_000_001:]
    assert stat_url(url).size is None
    assert _wait_no_children() == []


def test_ranged_read_skips_then_stops(big_file: Path) -> None:
    data = big_file.read_bytes()
    # The command fails after its output: a range that stops before the end never sees it.
    url = f"pipe:cat {shlex.quote(str(big_file))}; exit 3"
    with open_url(url, offset=1_000_001, length=5000, allow_pipe=True) as stream:
        assert stream.read() == data[1_000_001:1_005_001]
        assert stream.read() == b""
    assert _wait_no_children() == []
    with pytest.raises(PipeCommandError, match="status 3"):
        with open_url(url, offset=len(data) - 10, length=100, allow_pipe=True) as stream:
            stream.read()
    assert _wait_no_children() == []


def test_early_close_leaves_no_process_and_prints_nothing(
    big_file: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Like `aws s3 cp ... -`: complains on stderr when its reader goes away; and a grandchild.
    cmd = (
        f"echo starting >&2; cat {shlex.quote(str(big_file))} | cat "
        "|| echo 'download failed: [Errno 32] Broken pipe' >&2"
    )
    assert _children() == []
    for _ in range(3):
        stream = open_url(f"pipe:{cmd}", allow_pipe=True)
        assert len(stream.read(1000)) == 1000
        assert len(_children()) >= 2
        stream.close()
        assert _children() == []  # reaped at close(), not later
    with open_url(f"pipe:{cmd}", allow_pipe=True) as stream:  # break out of a with block
        stream.read(10)
    assert _children() == []
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_failing_command_reports_status_and_stderr_tail(big_file: Path) -> None:
    cmd = f"cat {shlex.quote(str(big_file))}; echo 'noise' >&2; echo 'fatal: bucket gone' >&2; exit 3"
    with open_url(f"pipe:{cmd}", allow_pipe=True) as stream:
        with pytest.raises(PipeCommandError) as info:
            stream.read()
    msg = str(info.value)
    assert info.value.status == 3
    assert "status 3" in msg and "fatal: bucket gone" in msg and "ignore_status" in msg
    assert _wait_no_children() == []


def test_ignored_status_and_early_close_of_failing_command(big_file: Path) -> None:
    cmd = f"pipe:cat {shlex.quote(str(big_file))}; exit 3"
    with open_url(cmd, allow_pipe=True, storage_options={"ignore_status": [3]}) as stream:
        assert len(stream.read()) == big_file.stat().st_size
    with open_url(cmd, allow_pipe=True) as stream:  # not read to the end: status not checked
        stream.read(100)


def test_killed_by_signal_is_reported() -> None:
    with open_url("pipe:echo partial; kill -9 $$", allow_pipe=True) as stream:
        with pytest.raises(PipeCommandError, match="killed by signal SIGKILL"):
            stream.read()


def test_write_through_command(tmp_path: Path) -> None:
    target = tmp_path / "out.tar"
    data = os.urandom(3 << 20)
    with create_url(f"pipe:cat > {shlex.quote(str(target))}", allow_pipe=True) as out:
        out.write(data[:1000])
        out.write(data[1000:])
    assert target.read_bytes() == data
    assert _wait_no_children() == []


def test_write_failure_reports_status(tmp_path: Path) -> None:
    out = create_url("pipe:cat > /nonexistent-dir/x.tar", allow_pipe=True)
    with pytest.raises(PipeCommandError) as info:
        for _ in range(64):  # the command may already be gone: then write() raises
            out.write(b"x" * 65536)
        out.close()
    assert info.value.status not in (None, 0)
    assert "nonexistent-dir" in str(info.value)
    out.close()
    assert _wait_no_children() == []
