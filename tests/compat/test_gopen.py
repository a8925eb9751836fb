"""``gopen_schemes`` takes a user's opener function, and ``gopen`` calls it, as in WebDataset 1.0.2."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
import webdataset as wds
from _wds_both import wds_items

import shardstream as ss


@pytest.fixture
def myfs(make_shards) -> Iterator[tuple[str, list[str], list[tuple[str, str, int]]]]:
    """A ``myfs://`` scheme served by an opener function in both libraries; removed afterwards."""
    spec, keys = make_shards([3, 2])
    root = Path(spec).parent
    calls: list[tuple[str, str, int]] = []

    def opener(url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> BinaryIO:
        calls.append((url, mode, bufsize))
        path = root / url.removeprefix("myfs://")
        return open(path, mode)  # noqa: SIM115 - the caller closes it

    wds.gopen_schemes["myfs"] = opener
    ss.gopen_schemes["myfs"] = opener
    try:
        yield "myfs://" + Path(spec).name, keys, calls
    finally:
        del wds.gopen_schemes["myfs"]
        del ss.gopen_schemes["myfs"]


def test_gopen_calls_the_opener_like_webdataset(myfs: Any, make_shards) -> None:
    spec, _, calls = myfs
    url = ss.expand_urls(spec)[0]
    with wds.gopen(url) as theirs, ss.gopen(url) as ours:
        assert ours.read() == theirs.read()
    assert calls == [(url, "rb", 8192), (url, "rb", 8192)]
    assert ss.gopen_schemes["myfs"] is wds.gopen_schemes["myfs"]
    assert (
        callable(ss.gopen_schemes["http"]) and "s3" in ss.gopen_schemes and "__default__" in ss.gopen_schemes
    )
    with pytest.raises(ValueError, match="no gopen handler"):
        ss.gopen_schemes["__default__"]("nope://x")


def test_datasets_read_through_the_opener(myfs: Any) -> None:
    spec, keys, calls = myfs
    theirs = [s["__key__"] for s in wds_items(wds.WebDataset(spec, shardshuffle=False))]
    ours = [s["__key__"] for s in ss.WebDataset(spec, shardshuffle=False)]
    assert ours == theirs == keys
    assert len([c for c in calls if c[0].endswith("000000-0.tar")]) == 2  # one open per library
    pipeline = ss.DataPipeline(ss.SimpleShardList(spec), ss.tarfile_to_samples())
    assert [s["__key__"] for s in pipeline] == keys


def test_a_resumed_read_skips_to_its_offset(myfs: Any) -> None:
    spec, keys, _ = myfs
    ds = ss.WebDataset(spec, shardshuffle=False)
    it = iter(ds)
    first = [next(it)["__key__"] for _ in range(2)]
    state = ds.state_dict()
    it.close()
    ds.load_state_dict(state)
    assert first + [s["__key__"] for s in ds] == keys  # continued in the middle of shard 0


def test_removing_an_opener_restores_the_builtin_scheme(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"abc")
    ss.gopen_schemes["file"] = lambda url, mode="rb", bufsize=8192: io.BytesIO(b"from opener")
    try:
        assert ss.gopen(f"file://{path}").read() == b"from opener"
    finally:
        del ss.gopen_schemes["file"]
    with ss.gopen(f"file://{path}") as stream:
        assert stream.read() == b"abc"
    with pytest.raises(TypeError, match="opener function"):
        ss.gopen_schemes["x"] = "not callable"  # type: ignore[assignment]
