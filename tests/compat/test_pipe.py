"""``pipe:`` URLs: refused when the dataset is built (not in a worker); SHARDSTREAM_ALLOW_PIPE=1
runs trusted legacy code unchanged, reading what WebDataset 1.0.2 reads."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import webdataset as wds
from _wds_both import wds_items

import shardstream as ss
from shardstream.errors import UnsafeOperationError


def pipe_spec(spec: str) -> str:
    directory = Path(spec).parent
    return f"pipe:cat {shlex.quote(str(directory))}/" + Path(spec).name


def test_refused_when_the_dataset_is_built(make_shards, tmp_path: Path) -> None:
    spec, _ = make_shards([2, 2])
    marker = tmp_path / "ran"
    for urls in (
        pipe_spec(spec),
        f"pipe:touch {marker}",
        [spec.replace("{000000..000001}", "000000"), "pipe:true"],
    ):
        with pytest.raises(UnsafeOperationError, match="allow_pipe=True"):
            ss.WebDataset(urls, shardshuffle=False)
    with pytest.raises(UnsafeOperationError):
        ss.WebDataset(f"pipe:touch {marker}", split="equal", batch_size=2)
    assert not marker.exists()


def test_variable_expanding_to_a_pipe_is_refused_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WDS_SRC", "pipe:curl -s http://example.invalid")
    with pytest.raises(UnsafeOperationError):
        ss.WebDataset("${SRC}/a-{0..1}.tar", shardshuffle=False)


def test_allowed_per_dataset_or_process_wide(make_shards, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, keys = make_shards([2, 3])
    url = pipe_spec(spec)
    theirs = [s["__key__"] for s in wds_items(wds.WebDataset(url, shardshuffle=False))]
    assert [s["__key__"] for s in ss.WebDataset(url, shardshuffle=False, allow_pipe=True)] == theirs == keys
    monkeypatch.setenv("SHARDSTREAM_ALLOW_PIPE", "1")
    assert [s["__key__"] for s in ss.WebDataset(url, shardshuffle=False)] == keys
    legacy = ss.DataPipeline(ss.SimpleShardList(url), ss.tarfile_to_samples())
    assert [s["__key__"] for s in legacy] == keys
    with ss.gopen(ss.expand_urls(url)[0]) as stream:
        assert stream.read(512)
    monkeypatch.setenv("SHARDSTREAM_ALLOW_PIPE", "0")
    with pytest.raises(UnsafeOperationError):
        ss.WebDataset(url, shardshuffle=False)
    monkeypatch.setenv("SHARDSTREAM_ALLOW_PIPE", "maybe")
    with pytest.raises(ValueError, match="SHARDSTREAM_ALLOW_PIPE"):
        ss.WebDataset(url, shardshuffle=False)
