"""WebDataset compatibility: WDS_CACHE / WDS_CACHE_SIZE, explicit arguments win, wds.cache names."""

from __future__ import annotations

import inspect
import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _components import require_module

import shardstream as wds
import shardstream.cache as sscache
from shardstream.sources.memory import memory_store
from shardstream.tar.writer import TarWriter


@pytest.fixture
def shard_url() -> Iterator[str]:
    buf = io.BytesIO()
    with TarWriter(buf) as writer:
        for i in range(5):
            writer.write({"__key__": f"k{i}", "txt": f"sample {i}"})
    url = "memory://compat-bucket/shard-000.tar"
    memory_store[url] = buf.getvalue()
    yield url
    memory_store.pop(url, None)


def _cached(root: Path) -> list[str]:
    # The tar reader stops at the end-of-archive marker and closes the stream; the fill thread
    # publishes the file a moment later.
    deadline = time.monotonic() + 5
    while True:
        found = sorted(str(p.relative_to(root)) for p in root.rglob("*.tar") if p.is_file())
        if found or time.monotonic() > deadline or not root.exists():
            return found
        time.sleep(0.01)


def test_wds_cache_env_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard_url: str) -> None:
    monkeypatch.setenv("WDS_CACHE", str(tmp_path / "env"))
    samples = list(wds.WebDataset([shard_url], shardshuffle=False))
    assert [s["__key__"] for s in samples] == [f"k{i}" for i in range(5)]
    assert _cached(tmp_path / "env") == ["memory/compat-bucket/shard-000.tar"]
    assert samples[0]["__local_path__"] == str(tmp_path / "env" / "memory/compat-bucket/shard-000.tar")


def test_explicit_arguments_win_over_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard_url: str
) -> None:
    monkeypatch.setenv("WDS_CACHE", str(tmp_path / "env"))
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "ss-env"))
    list(wds.WebDataset([shard_url], shardshuffle=False, cache_dir=str(tmp_path / "explicit")))
    assert _cached(tmp_path / "explicit") == ["memory/compat-bucket/shard-000.tar"]
    assert not (tmp_path / "env").exists() and not (tmp_path / "ss-env").exists()
    list(wds.WebDataset([shard_url], shardshuffle=False, cache_dir=None))  # explicit: no cache
    assert not (tmp_path / "ss-env").exists()
    list(wds.WebDataset([shard_url], shardshuffle=False))  # SHARDSTREAM_ name beats WDS_ alias
    assert _cached(tmp_path / "ss-env") == ["memory/compat-bucket/shard-000.tar"]


def test_cache_size_zero_disables_and_env_size_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard_url: str
) -> None:
    list(wds.WebDataset([shard_url], shardshuffle=False, cache_dir=str(tmp_path / "c"), cache_size=0))
    assert not (tmp_path / "c").exists()
    monkeypatch.setenv("WDS_CACHE_SIZE", "1M")
    from shardstream.datasets.options import translate  # (both front doors' translation)

    policy = translate(cache_dir=str(tmp_path / "d")).cache  # cache_size unset: the environment's
    assert isinstance(policy, wds.CachePolicy) and policy.size_bytes == 1 << 20


def test_filecache_downloads_once_and_validates(tmp_path: Path, shard_url: str) -> None:
    fc = wds.cache.FileCache(str(tmp_path))
    path = fc.get_file(shard_url)
    assert path == str(tmp_path / "memory/compat-bucket/shard-000.tar")
    opened = list(fc([shard_url]))
    for d in opened:
        d["stream"].close()
    assert [d["local_path"] for d in opened] == [path]
    memory_store["memory://b/not-a-tar"] = b"<html>error</html>" * 40
    with pytest.raises(ValueError, match="not a tar archive"):
        fc.get_file("memory://b/not-a-tar")
    assert not (tmp_path / "memory/b/not-a-tar").exists()
    memory_store.pop("memory://b/not-a-tar")


def test_lru_cleanup_deletes_only_own_idle_entries(tmp_path: Path) -> None:
    memory_store["memory://b/one.tar"] = b"1" * 1000
    memory_store["memory://b/two.tar"] = b"2" * 1000
    cache = sscache.ShardCache(str(tmp_path))
    for url in ("memory://b/one.tar", "memory://b/two.tar"):
        cache.get_file(url)
    (tmp_path / "mine.bin").write_bytes(b"m" * 10_000)
    wds.cache.LRUCleanup(str(tmp_path), cache_size=1500, interval=None).cleanup()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and ".shardstream" not in p.parts) == [
        "mine.bin",
        "two.tar",
    ]
    for url in ("memory://b/one.tar", "memory://b/two.tar"):
        memory_store.pop(url)


def test_exports_sorted_and_webdataset_names_present() -> None:
    assert sscache.__all__ == sorted(sscache.__all__)
    wds_cache = require_module(
        "webdataset.cache", "the comparison with WebDataset 1.0.2's cache naming", package="webdataset"
    )
    public = [
        "FileCache", "LRUCleanup", "StreamingOpen", "check_tar_format", "download", "get_filetype",
        "islocal", "magic_filetype", "pipe_cleaner", "url_to_cache_name",
    ]  # fmt: skip
    for name in public:
        theirs = inspect.signature(getattr(wds_cache, name)).parameters
        ours = inspect.signature(getattr(sscache, name)).parameters
        assert list(ours)[: len(theirs)] == list(theirs), name
    assert sscache.default_cache_dir == "./_cache" and sscache.default_cache_size == 1e18
    assert wds.cache is sscache


def test_cache_size_accepts_size_strings(tmp_path, make_shards) -> None:
    import shardstream as wds
    from shardstream.sources.memory import memory_store

    spec, keys = make_shards([3])
    # A remote-looking source so the cache is used: serve the shard from the memory store.
    (path,) = (tmp_path / "data").glob("*.tar")
    memory_store["memory://bucket/shard.tar"] = path.read_bytes()
    ds = wds.WebDataset("memory://bucket/shard.tar", cache_dir=str(tmp_path / "cache"), cache_size="1M")
    assert [s["__key__"] for s in ds] == keys
    with pytest.raises(ValueError, match="cache_size='lots'"):
        wds.WebDataset("memory://bucket/shard.tar", cache_dir=str(tmp_path / "cache"), cache_size="lots")
