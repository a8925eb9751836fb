"""The shard-spec grammar over real stores: an ``s3://`` prefix through the API (as the command line
takes it), the existence check against an ``_info.json`` with no request per shard, and the native
default split refusing, with a clear message, a remote spec whose sample counts are unknown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _servers import HTTPFileServer, SeaweedS3

import shardstream as ss
from shardstream.compat import WebDataset
from shardstream.errors import ConfigurationError, ShardNotFoundError

SHARDS, PER_SHARD = 4, 5


def _write(prefix: str, storage_options: dict[str, Any] | None = None, index: bool = True) -> list[str]:
    with ss.ShardWriter(
        f"{prefix}/a-%06d.tar", maxcount=PER_SHARD, storage_options=storage_options, index=index
    ) as sink:
        for i in range(SHARDS * PER_SHARD):
            sink.write({"__key__": f"k{i:04d}", "cls": i})
    return [f"{prefix}/a-{i:06d}.tar" for i in range(SHARDS)]


@pytest.mark.s3
@pytest.mark.parametrize("index", [True, False], ids=["indexed", "listed"])
def test_an_s3_prefix_is_a_spec_for_every_front_door(
    s3_server: SeaweedS3, s3_bucket: str, index: bool
) -> None:
    options = s3_server.storage_options
    urls = _write(f"s3://{s3_bucket}/train", options, index=index)
    keys = [f"k{i:04d}" for i in range(SHARDS * PER_SHARD)]
    prefix = f"s3://{s3_bucket}/train/"
    dataset = ss.ShardStream(prefix, storage_options=options, shuffle_shards=False)
    assert dataset.urls == urls
    assert [s["__key__"] for s in dataset] == keys
    assert WebDataset(prefix, storage_options=options).urls == urls
    assert [s["__key__"] for s in ss.ShardDataset(prefix, storage_options=options)] == keys


def _http_shards(http_server: HTTPFileServer, tmp_path: Path, name: str, index: bool) -> str:
    """Shards written locally, then served; returns their directory's URL."""
    local = tmp_path / name
    local.mkdir()
    _write(str(local), index=index)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            http_server.write(f"{name}/{path.relative_to(local).as_posix()}", path.read_bytes())
    return http_server.url_for(name)


def test_an_indexed_remote_brace_typo_fails_before_any_shard_is_requested(
    http_server: HTTPFileServer, tmp_path: Path
) -> None:
    base = _http_shards(http_server, tmp_path, "typo", index=True)
    http_server.reset_counts()
    spec = f"{base}/a-{{000000..000005}}.tar"  # 6 named, 4 written
    with pytest.raises(ShardNotFoundError) as caught:
        ss.ShardStream(spec)
    message = str(caught.value)
    assert f"2 of 6 shards named by {spec!r} are missing: a-000004.tar, a-000005.tar" in message
    assert "_info.json" in message and "shardstream index" in message
    assert sum(http_server.gets(f"typo/a-{i:06d}.tar") for i in range(6)) == 0  # the index decided
    assert http_server.gets("typo/_info.json") >= 1
    assert len(ss.ShardStream(f"{base}/a-{{000000..000003}}.tar", split="equal")) == SHARDS * PER_SHARD


def test_unindexed_remote_shards_are_not_checked_and_need_a_split_on_several_ranks(
    http_server: HTTPFileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _http_shards(http_server, tmp_path, "bare", index=False)
    spec = f"{base}/a-{{000000..000005}}.tar"
    http_server.reset_counts()
    assert len(ss.ShardStream(spec).urls) == 6  # not checked: one request per shard would cost more
    assert sum(http_server.gets(f"bare/a-{i:06d}.tar") for i in range(6)) == 0
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ConfigurationError) as caught:
        ss.ShardStream(f"{base}/a-{{000000..000003}}.tar")
    message = str(caught.value)
    assert "2 ranks without split=" in message
    assert "split='equal'" in message and "split='shards'" in message
    assert f"shardstream index {base}/" in message
    # Each of the three ways out works.
    assert ss.ShardStream(f"{base}/a-{{000000..000003}}.tar", split="equal").split.mode == "equal"
    assert ss.ShardStream(f"{base}/a-{{000000..000003}}.tar", split="shards").split.mode == "shards"
