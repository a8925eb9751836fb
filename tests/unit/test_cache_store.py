"""ShardCache in one process: fills, hits, streaming while filling, verification, eviction, naming."""

from __future__ import annotations

import io
import logging
import os
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from shardstream.cache import CachedSource, ShardCache
from shardstream.cache.owner import Owner
from shardstream.errors import CacheError, ConfigurationError
from shardstream.sources import SchemeRouter, Source, get_source, local_path_of, register_source
from shardstream.sources.base import ObjectInfo
from shardstream.sources.memory import MemorySource, memory_store


@pytest.fixture
def store() -> Iterator[dict[str, bytes]]:
    before = dict(memory_store)
    yield memory_store
    memory_store.clear()
    memory_store.update(before)


def _put(url: str, data: bytes) -> str:
    memory_store[url] = data
    return url


def _read_all(stream: BinaryIO) -> bytes:
    out = bytearray()
    while chunk := stream.read(1 << 16):
        out += chunk
    stream.close()
    return bytes(out)


def _opens() -> int:
    source = get_source("memory://")
    return source.opens  # type: ignore[attr-defined, no-any-return]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# -- a source whose bytes arrive only when the test says so ----------------------------------------

GATES: dict[str, threading.Event] = {}


class _GatedStream(io.RawIOBase):
    def __init__(self, data: bytes, gate: threading.Event, first: int) -> None:
        self._data, self._gate, self._first, self._pos = data, gate, first, 0
        self.size = len(data)
        self.etag = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._pos >= self._first:
            self._gate.wait(10)
        end = min(
            len(self._data),
            self._pos + len(buffer),
            max(self._first, self._pos + 1) if not self._gate.is_set() else len(self._data),
        )
        n = end - self._pos
        buffer[:n] = self._data[self._pos : end]
        self._pos = end
        return n


class GatedSource:
    """``gated://name``: the first 1000 bytes at once, the rest when GATES[url] is set."""

    def open(self, url: str, *, offset: int = 0) -> BinaryIO:
        return _GatedStream(memory_store[url], GATES[url], 1000)  # type: ignore[return-value]

    def stat(self, url: str) -> ObjectInfo:
        return ObjectInfo(size=len(memory_store[url]))

    def close(self) -> None:
        pass


register_source("gated", GatedSource)


# -- tests ------------------------------------------------------------------------------------------


def test_miss_then_hit(tmp_path: Path, store: dict[str, bytes]) -> None:
    data = os.urandom(300_000)
    url = _put("memory://b1/x.tar", data)
    cache = ShardCache(str(tmp_path))
    stream, path = cache(url)
    assert path == str(tmp_path / "memory" / "b1" / "x.tar")
    assert _read_all(stream) == data
    stream2, _ = cache(url)
    assert _read_all(stream2) == data
    stats = cache.stats
    assert (stats.misses, stats.hits, stats.bytes_fetched) == (1, 1, len(data))
    assert Path(path).read_bytes() == data
    assert not list((tmp_path / ".shardstream" / "tmp").rglob("*.part"))


def test_first_bytes_arrive_before_the_shard_is_downloaded(tmp_path: Path, store: dict[str, bytes]) -> None:
    data = os.urandom(200_000)
    url = _put("gated://b/x.tar", data)
    GATES[url] = threading.Event()
    cache = ShardCache(str(tmp_path))
    stream, path = cache(url)
    assert path is not None
    first = stream.read(1 << 20)
    assert first == data[: len(first)] and len(first) > 0  # streamed while the source is stalled
    assert not os.path.exists(path)  # nothing partial is ever published
    # Another opener (here another thread) waits for the complete file and reads it.
    other = ShardCache(str(tmp_path))
    result: list[bytes] = []
    waiter = threading.Thread(target=lambda: result.append(_read_all(other(url)[0])))
    waiter.start()
    time.sleep(0.2)
    assert not result
    GATES[url].set()
    assert first + _read_all(stream) == data
    waiter.join(10)
    assert result == [data]
    assert other.stats.lock_waits == 1 and other.stats.hits == 1 and other.stats.misses == 0


class ShortSource(GatedSource):
    """``short://``: announces the full size but delivers 100 bytes less."""

    def open(self, url: str, *, offset: int = 0) -> BinaryIO:
        stream = _GatedStream(memory_store[url][:-100], threading.Event(), 1 << 30)
        stream.size = len(memory_store[url])
        return stream  # type: ignore[return-value]


register_source("short", ShortSource)


def test_short_download_is_not_published(tmp_path: Path, store: dict[str, bytes]) -> None:
    url = _put("short://b/x.tar", os.urandom(50_000))
    cache = ShardCache(str(tmp_path))
    stream, path = cache(url)
    with pytest.raises(CacheError, match=r"gave 49900 bytes.*announced 50000"):
        _read_all(stream)
    assert path is not None and not os.path.exists(path)
    assert not list((tmp_path / ".shardstream" / "tmp").rglob("*.part"))
    assert not list((tmp_path / ".shardstream" / "lock").rglob("*.lock"))


def test_corrupt_cached_file_is_replaced_with_warning(
    tmp_path: Path, store: dict[str, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    data = os.urandom(100_000)
    url = _put("memory://b/corrupt.tar", data)
    cache = ShardCache(str(tmp_path))
    _read_all(cache(url)[0])
    path = cache.path_for(url)
    with open(path, "r+b") as f:
        f.truncate(60_000)
    opens = _opens()
    with caplog.at_level(logging.WARNING, logger="shardstream.cache"):
        assert _read_all(cache(url)[0]) == data
    assert path in caplog.text and "corrupt" in caplog.text and "size 60000" in caplog.text
    assert _opens() == opens + 1 and cache.stats.corrupt == 1
    assert Path(path).read_bytes() == data


def test_local_files_are_read_in_place(tmp_path: Path) -> None:
    shard = tmp_path / "local.tar"
    shard.write_bytes(b"x" * 1000)
    cache = ShardCache(str(tmp_path / "cache"))
    for url in (str(shard), f"file://{shard}"):
        stream, path = cache(url)
        assert path == str(shard) and _read_all(stream) == b"x" * 1000
    assert cache.stats.local_reads == 2 and cache.stats.misses == 0
    assert _files(tmp_path / "cache") == []


def test_unwritable_cache_dir_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CacheError, match=rf"cache directory '{blocker}/cache' is not usable.*cache_dir="):
        ShardCache(str(blocker / "cache"))


def test_colliding_basenames_are_cached_apart(tmp_path: Path, store: dict[str, bytes]) -> None:
    a = _put("memory://bucket1/train-000.tar", b"a" * 1000)
    b = _put("memory://bucket2/train-000.tar", b"b" * 2000)
    cache = ShardCache(str(tmp_path))
    assert _read_all(cache(a)[0]) == b"a" * 1000
    assert _read_all(cache(b)[0]) == b"b" * 2000
    assert _read_all(cache(a)[0]) == b"a" * 1000  # still the first one
    assert _files(tmp_path) == sorted(
        ["memory/bucket1/train-000.tar", "memory/bucket2/train-000.tar"]
        + [f".shardstream/meta/memory/bucket{i}/train-000.tar.json" for i in (1, 2)]
    )


def test_eviction_spares_active_readers_and_evicts_only_what_is_needed(
    tmp_path: Path, store: dict[str, bytes]
) -> None:
    urls = [_put(f"memory://b/{c}.tar", c.encode() * 1000) for c in "abcde"]
    (tmp_path / "foreign.tar").write_bytes(b"f" * 5000)  # not ours: never deleted, not counted
    cache = ShardCache(str(tmp_path), cache_size=2500)
    held, _ = cache(urls[0])  # a: open for the whole test (a reader lease)
    held.read(10)
    time.sleep(0.02)
    _read_all(cache(urls[1])[0])  # b
    time.sleep(0.02)
    _read_all(cache(urls[2])[0])  # c: 3000 > 2500 -> one eviction; a is oldest but busy -> b
    names = {p.name for p in tmp_path.joinpath("memory", "b").iterdir()}
    assert names == {"a.tar", "c.tar"} and cache.stats.evictions == 1
    held.close()
    time.sleep(0.02)
    _read_all(cache(urls[3])[0])  # d: a is now idle and the least recently used -> only a goes
    names = {p.name for p in tmp_path.joinpath("memory", "b").iterdir()}
    assert names == {"c.tar", "d.tar"} and cache.stats.evictions == 2
    assert (tmp_path / "foreign.tar").exists()
    assert cache.stats.evicted_bytes == 2000


def test_shard_larger_than_cache_is_streamed_uncached(tmp_path: Path, store: dict[str, bytes]) -> None:
    url = _put("memory://b/big.tar", b"z" * 5000)
    cache = ShardCache(str(tmp_path), cache_size=1000)
    stream, path = cache(url)
    assert path is None and _read_all(stream) == b"z" * 5000
    assert cache.stats.uncached == 1 and not os.path.exists(cache.path_for(url))


def test_leftover_temp_of_dead_process_is_removed(tmp_path: Path, store: dict[str, bytes]) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    url = _put("memory://b/t.tar", b"t" * 1000)
    cache = ShardCache(str(tmp_path))
    me = Owner.current()
    dead = Owner(me.host, proc.pid, None, "abc123")
    leftover = Path(cache.layout.tmp(cache.name_for(url), dead))
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"partial")
    assert _read_all(cache(url)[0]) == b"t" * 1000
    assert not leftover.exists() and cache.stats.temp_cleaned == 1


def test_cache_pickles_for_dataloader_workers(tmp_path: Path, store: dict[str, bytes]) -> None:
    url = _put("memory://b/p.tar", b"p" * 100)
    cache = ShardCache(str(tmp_path), cache_size=10_000)
    _read_all(cache(url)[0])
    clone = pickle.loads(pickle.dumps(cache))
    assert _read_all(clone(url)[0]) == b"p" * 100
    assert clone.stats.hits == 1 and clone.stats.misses == 0


# -- ranged reads, local paths, and the cache as a Source layer -------------------------------------


def test_ranged_hit_is_served_from_the_cache_file(tmp_path: Path, store: dict[str, bytes]) -> None:
    data = os.urandom(100_000)
    url = _put("memory://b/ranged-hit.tar", data)
    cache = ShardCache(str(tmp_path))
    _read_all(cache(url)[0])
    opens = _opens()
    for offset, length in ((0, 10), (54_321, 1000), (99_990, 100), (100_000, None), (7, 0)):
        stream, path = cache.open(url, offset=offset, length=length)
        assert local_path_of(stream) == path == cache.path_for(url)
        end = len(data) if length is None else offset + length
        assert _read_all(stream) == data[offset:end]
    assert _opens() == opens and cache.stats.hits == 5


def test_ranged_miss_fills_the_whole_entry(tmp_path: Path, store: dict[str, bytes]) -> None:
    data = os.urandom(300_000)
    url = _put("memory://b/ranged-miss.tar", data)
    cache = ShardCache(str(tmp_path))
    opens = _opens()
    stream, path = cache.open(url, offset=250_000, length=100)
    assert path is not None and local_path_of(stream) == path
    assert _read_all(stream) == data[250_000:250_100]
    deadline = time.monotonic() + 5  # closing early does not stop the fill
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Path(path).read_bytes() == data
    assert _read_all(cache.open(url, offset=10, length=20)[0]) == data[10:30]
    assert (cache.stats.misses, cache.stats.hits, _opens() - opens) == (1, 1, 1)


def test_ranged_miss_is_served_as_the_fill_passes_it(tmp_path: Path, store: dict[str, bytes]) -> None:
    data = os.urandom(200_000)
    url = _put("gated://b/ranged.tar", data)
    GATES[url] = threading.Event()  # only the first 1000 bytes arrive until the gate opens
    cache = ShardCache(str(tmp_path))
    stream, path = cache.open(url, offset=100, length=500)
    assert stream.read(1000) == data[100:600]  # while the source is stalled
    stream.close()
    GATES[url].set()
    assert cache.get_file(url) == path and Path(path).read_bytes() == data


def test_ranged_read_of_a_shard_larger_than_the_cache(tmp_path: Path, store: dict[str, bytes]) -> None:
    url = _put("memory://b/big-ranged.tar", bytes(range(256)) * 20)
    cache = ShardCache(str(tmp_path), cache_size=1000)
    stream, path = cache.open(url, offset=300, length=50)
    assert path is None and local_path_of(stream) is None
    assert _read_all(stream) == (bytes(range(256)) * 20)[300:350]
    assert cache.stats.uncached == 1 and not os.path.exists(cache.path_for(url))


def test_local_path_of_streams_matches_the_opener(tmp_path: Path, store: dict[str, bytes]) -> None:
    shard = tmp_path / "local.tar"
    shard.write_bytes(b"l" * 100)
    url = _put("memory://b/paths.tar", b"m" * 100)
    cache = ShardCache(str(tmp_path / "cache"))
    for target in (str(shard), f"file://{shard}", url, url):  # local, local, fill, hit
        stream, path = cache(target)
        assert local_path_of(stream) == path is not None
        _read_all(stream)
    ranged, path = cache.open(str(shard), offset=10, length=5)
    assert local_path_of(ranged) == path == str(shard) and _read_all(ranged) == b"l" * 5
    # The local file was not copied.
    assert _files(tmp_path / "cache") == [".shardstream/meta/memory/b/paths.tar.json", "memory/b/paths.tar"]


def test_source_and_storage_options_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="both source= and storage_options="):
        ShardCache(str(tmp_path), source=SchemeRouter(), storage_options={"retries": 2})
    cache = ShardCache(str(tmp_path), storage_options={"retries": 2})
    assert cache.source == SchemeRouter({"retries": 2})


def test_cached_source_over_a_custom_inner_source(tmp_path: Path, store: dict[str, bytes]) -> None:
    url = _put("memory://b/layer.tar", b"q" * 5000)
    inner = MemorySource()
    cache = ShardCache(str(tmp_path))
    source = CachedSource(inner, cache)
    assert isinstance(source, Source) and source.cache.source is inner
    assert _read_all(source.open(url, offset=4000)) == b"q" * 1000
    assert _read_all(source.open(url)) == b"q" * 5000
    assert inner.opens == 1  # the miss filled the entry through inner; the second open was a hit
    assert (cache.stats.misses, cache.stats.hits) == (1, 1)  # the view shares the cache's counters


def test_cached_source_stat_answers_from_the_record(tmp_path: Path, store: dict[str, bytes]) -> None:
    url = _put("memory://b/stat.tar", b"s" * 777)
    source = CachedSource(SchemeRouter(), ShardCache(str(tmp_path)))
    assert source.stat(url).size == 777 and source.stat(url).local_path is None  # not cached: inner
    _read_all(source.open(url))
    del store[url]  # the source no longer has it; the complete entry still answers
    info = source.stat(url)
    assert (info.size, info.local_path) == (777, source.cache.path_for(url))
