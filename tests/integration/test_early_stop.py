"""Issue 3 at the pipeline level: early stops release every stream, connection and child process
at once with nothing on stderr, and skip handlers count unreachable shards."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import psutil
import pytest

import shardstream as wds
from shardstream.errors import ShardNotFoundError


def shard_bytes(shard: int, count: int, size: int = 2000) -> bytes:
    bio = io.BytesIO()
    with wds.TarWriter(bio) as w:
        for i in range(count):
            w.write({"__key__": f"s{shard}_{i:05d}", "bin": bytes([i % 256]) * size, "cls": i})
    return bio.getvalue()


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def descendants() -> set[int]:
    """PIDs of this process's live descendants (the session's S3 server is one of them)."""
    return {p.pid for p in psutil.Process(os.getpid()).children(recursive=True) if p.is_running()}


@pytest.fixture
def s3_shards(s3_server, s3_bucket) -> list[str]:
    return [s3_server.put_object(s3_bucket, f"train-{i:03d}.tar", shard_bytes(i, 300)) for i in range(3)]


@pytest.mark.s3
def test_break_mid_shard_closes_the_s3_connection(s3_server, s3_shards, fault_proxy, capfd) -> None:
    proxy = fault_proxy(s3_server.endpoint_url)
    ds = wds.WebDataset(s3_shards, storage_options=s3_server.options_for(endpoint_url=proxy.url))
    for i, _sample in enumerate(ds):
        if i == 5:
            break
    assert wait_until(lambda: proxy.open_connections == 0), proxy.open_connections
    assert capfd.readouterr().err == ""


@pytest.mark.s3
def test_with_epoch_truncation_and_user_exception_release_connections(
    s3_server, s3_shards, fault_proxy
) -> None:
    proxy = fault_proxy(s3_server.endpoint_url)
    options = s3_server.options_for(endpoint_url=proxy.url)
    ds = wds.WebDataset(s3_shards, storage_options=options).with_epoch(7)
    assert len(list(ds)) == 7
    ds.close()
    assert wait_until(lambda: proxy.open_connections == 0)

    def explode(sample: dict) -> dict:
        if sample["__key__"].endswith("00003"):
            raise RuntimeError("user code failed")
        return sample

    with pytest.raises(RuntimeError, match="user code failed"):
        list(wds.WebDataset(s3_shards, storage_options=options).map(explode))
    assert wait_until(lambda: proxy.open_connections == 0)


@pytest.mark.s3
def test_missing_shard_is_skipped_and_counted(s3_server, s3_bucket, s3_shards) -> None:
    urls = [s3_shards[0], f"s3://{s3_bucket}/does-not-exist.tar", s3_shards[2]]
    ds = wds.WebDataset(urls, handler=wds.warn_and_continue, storage_options=s3_server.storage_options)
    with pytest.warns(UserWarning, match="does-not-exist.tar"):
        keys = [s["__key__"] for s in ds]
    assert len(keys) == 600 and keys[0] == "s0_00000" and keys[-1] == "s2_00299"
    assert ds.skipped == 1
    with pytest.raises(ShardNotFoundError, match="does-not-exist.tar"):
        list(wds.WebDataset(urls, storage_options=s3_server.storage_options))


@pytest.mark.s3
def test_dataloader_workers_stop_early_from_s3(s3_server, s3_shards, capfd) -> None:
    before = descendants()
    ds = wds.WebDataset(s3_shards[:2], storage_options=s3_server.storage_options).to_tuple("__key__", "cls")
    with wds.WebLoader(ds, batch_size=None, num_workers=2) as loader:
        for i, _ in enumerate(loader):
            if i == 20:
                break
    assert wait_until(lambda: descendants() <= before)
    assert capfd.readouterr().err == ""


def write_local(tmp_path: Path, n: int = 3, count: int = 400) -> list[str]:
    paths = []
    for i in range(n):
        path = tmp_path / f"p-{i}.tar"
        path.write_bytes(shard_bytes(i, count))
        paths.append(str(path))
    return paths


def test_pipe_break_leaves_no_child_and_prints_nothing(tmp_path: Path, capfd) -> None:
    urls = [f"pipe:cat {p}" for p in write_local(tmp_path)]
    before = descendants()
    ds = wds.WebDataset(urls, allow_pipe=True)
    for i, _ in enumerate(ds):
        if i == 3:
            assert descendants() - before, "the pipe child should be running mid-shard"
            break
    assert wait_until(lambda: descendants() <= before)
    assert capfd.readouterr().err == ""


def test_pipe_with_epoch_in_dataloader_workers_is_quiet(tmp_path: Path, capfd) -> None:
    urls = [f"pipe:cat {p}" for p in write_local(tmp_path, n=4)]
    before = descendants()
    ds = wds.WebDataset(urls, allow_pipe=True).to_tuple("__key__").with_epoch(10)
    with wds.WebLoader(ds, batch_size=None, num_workers=2) as loader:
        for _epoch in range(2):
            assert len(list(loader)) == 20  # 10 per worker, WebDataset's per-process with_epoch
    assert wait_until(lambda: descendants() <= before)
    assert "Broken pipe" not in capfd.readouterr().err


def test_pipe_user_exception_reaps_child(tmp_path: Path) -> None:
    urls = [f"pipe:cat {p}" for p in write_local(tmp_path)]
    before = descendants()

    def explode(sample: dict) -> dict:
        raise ValueError("bad sample")

    with pytest.raises(ValueError, match="bad sample"):
        list(wds.WebDataset(urls, allow_pipe=True).map(explode))
    assert wait_until(lambda: descendants() <= before)


def test_pipe_refused_without_opt_in(tmp_path: Path) -> None:
    urls = [f"pipe:cat {p}" for p in write_local(tmp_path, n=1)]
    with pytest.raises(wds.UnsafeOperationError, match="allow_pipe=True"):
        list(wds.WebDataset(urls))
