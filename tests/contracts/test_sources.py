"""The Source contract, run alike against every source: file, memory, http, s3, pipe, the
scheme router, and the cache as a source layer (cold and warm, over http and over local files).

Each case stores fresh bytes through the backend (see ``conftest.py``), so a cold cache case is a
miss on its first open. Real loopback servers, no mocks.
"""

from __future__ import annotations

import pickle
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest
from _backends import Backend, open_fds
from _servers import HTTPFileServer

from shardstream.cache import CachedSource, ShardCache, cached_source
from shardstream.errors import ConfigurationError, UnsafeOperationError
from shardstream.sources import FAILED, OK, ManyGets, Outcome, SchemeRouter, Source, SourceBase, local_path_of
from shardstream.sources.memory import MemorySource

SIZE = 100_003
DATA = random.Random(0).randbytes(SIZE)


def _readinto_all(stream: BinaryIO, chunk: int = 4096) -> bytes:
    out = bytearray()
    buf = bytearray(chunk)
    while n := stream.readinto(buf):  # type: ignore[attr-defined]  # every source's stream has it
        out += buf[:n]
    return bytes(out)


def _read_all(stream: BinaryIO, sizes: tuple[int, ...] = (1, 7, 4096, 333, 65536, 17)) -> bytes:
    out = bytearray()
    i = 0
    while block := stream.read(sizes[i % len(sizes)]):
        out += block
        i += 1
    return bytes(out)


def _eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# -- reading ----------------------------------------------------------------------------------------


def test_whole_read_equals_the_bytes(backend: Backend) -> None:
    url = backend.put(DATA)
    with backend.source.open(url) as stream:
        assert stream.read() == DATA
        assert stream.read(10) == b""


RANGES = [
    (0, None),
    (0, 10),
    (0, SIZE),
    (1, SIZE - 2),
    (12_345, 1000),
    (77_777, None),
    (SIZE - 10, 100),  # the range reaches past the end: the object's end comes first
    (5000, 0),
    (0, 0),
    (SIZE, None),  # offset == size
    (SIZE, 10),
    (SIZE + 100, 5),  # past the end
]


@pytest.mark.parametrize(("offset", "length"), RANGES, ids=[f"{o}+{n}" for o, n in RANGES])
def test_ranged_read_yields_exactly_the_range(backend: Backend, offset: int, length: int | None) -> None:
    url = backend.put(DATA)
    end = SIZE if length is None else offset + length
    with backend.source.open(url, offset=offset, length=length) as stream:
        assert _readinto_all(stream) == DATA[offset:end]
        assert stream.read(10) == b"" and stream.read() == b""


def test_read_and_readinto_agree(backend: Backend) -> None:
    url = backend.put(DATA)
    with backend.source.open(url) as a, backend.source.open(url) as b:
        assert _read_all(a) == _readinto_all(b, 8191) == DATA
    with backend.source.open(url, offset=999, length=50_000) as a:
        with backend.source.open(url, offset=999, length=50_000) as b:
            assert _read_all(a) == _readinto_all(b, 8191) == DATA[999:50_999]


def test_empty_object(backend: Backend) -> None:
    url = backend.put(b"")
    with backend.source.open(url) as stream:
        assert stream.read() == b""
    with backend.source.open(url, offset=0, length=10) as stream:
        assert stream.read() == b""


def test_stat_reports_the_size(backend: Backend) -> None:
    url = backend.put(DATA)
    assert backend.source.stat(url).size == (SIZE if backend.knows_size else None)


def test_missing_object_raises_not_found_naming_the_url(backend: Backend) -> None:
    url = backend.missing
    if backend.missing_on_open:
        for offset, length in ((0, None), (10, 5)):
            with pytest.raises(backend.missing_error) as info:
                backend.source.open(url, offset=offset, length=length)
            assert url in str(info.value)
    else:  # pipes: the command's exit status reports it when the output ends
        with pytest.raises(backend.missing_error) as info:
            with backend.source.open(url) as stream:
                stream.read()
        assert url in str(info.value)


# -- declared capabilities (SourceBase) -------------------------------------------------------------


def _get_all(gets: ManyGets, urls: list[str] | list[tuple[str, int, int | None]]) -> dict[int, Outcome]:
    """Every URL's (or ``(url, offset, length)`` range's) outcome through one session, submitted
    all at once."""
    found: dict[int, Outcome] = {}
    for i, request in enumerate(urls):
        if isinstance(request, str):
            failed = gets.submit(i, request)
        else:
            failed = gets.submit(i, *request)
        if failed is not None:
            found[failed.token] = failed
    while len(found) < len(urls):
        for outcome in gets.wait():
            found[outcome.token] = outcome
    return found


def test_listing_finds_what_was_put(backend: Backend) -> None:
    url = backend.put(DATA)
    other = backend.put(DATA[:10])
    prefix = url.rsplit("/", 1)[0] + "/"
    source = backend.source.route(url) if isinstance(backend.source, SourceBase) else backend.source
    assert isinstance(source, SourceBase)
    if not source.can_list:  # http, pipe, memory, the cache layer: a clear refusal naming the fix
        with pytest.raises(ConfigurationError, match="cannot list"):
            list(source.list_objects(prefix))
        return
    found = {item.key: item.size for item in source.list_objects(prefix)}
    assert found[url.rsplit("/", 1)[1]] == SIZE
    assert found[other.rsplit("/", 1)[1]] == 10
    assert all(not key.startswith("/") and not key.endswith("/") for key in found)


def test_every_source_declares_its_capabilities(backend: Backend) -> None:
    source = backend.source
    assert isinstance(source, SourceBase)
    url = backend.put(DATA)
    assert source.size(url) == (SIZE if backend.knows_size else None)
    pending = source.open_ahead(url)
    if pending is not None:  # the remote sources open ahead; the others say it is not worth it
        with pending.result() as stream:
            assert stream.read() == DATA
    sink = bytearray(DATA[:1000])  # get_into appends the rest of the object: a resume
    source.get_into(url, sink)
    assert sink == DATA


@pytest.mark.parametrize("which", ["declared", "default"])
def test_get_many_delivers_each_object_or_an_error_naming_it(backend: Backend, which: str) -> None:
    """The source's own ``get_many`` (S3: one thread on epoll) and the default built from
    ``get_into`` give the same bytes, and a missing object is a final error naming its URL."""
    source = backend.source
    assert isinstance(source, SourceBase)
    objects = [DATA[: 1 + 997 * i] for i in range(6)] + [b""]
    urls = [backend.put(data) for data in objects] + [backend.missing]
    gets = source.get_many(window=3) if which == "declared" else SourceBase.get_many(source, window=3)
    try:
        for _ in range(2):  # a paused session serves a second run
            found = _get_all(gets, urls)
            assert [found[i].kind for i in range(len(objects))] == [OK] * len(objects)
            assert [found[i].body for i in range(len(objects))] == objects
            missing = found[len(objects)]
            assert missing.kind == FAILED and isinstance(missing.error, backend.missing_error)
            assert backend.missing in str(missing.error)
            gets.pause()
    finally:
        gets.close()
    assert gets.closed


@pytest.mark.parametrize("which", ["declared", "default"])
def test_get_many_reads_exactly_each_byte_range(backend: Backend, which: str) -> None:
    """Ranged GETs through one session (S3: a ``Range`` header on the epoll loop; the default:
    the source's ranged ``open``) follow ``open``'s range contract, mixed with whole objects;
    a range of a missing object is a final error naming its URL."""
    source = backend.source
    assert isinstance(source, SourceBase)
    url = backend.put(DATA)
    requests: list[tuple[str, int, int | None]] = [(url, o, n) for o, n in RANGES] + [
        (backend.missing, 10, 5)
    ]
    expected = [DATA[o:] if n is None else DATA[o : o + n] for o, n in RANGES]
    gets = source.get_many(window=4) if which == "declared" else SourceBase.get_many(source, window=4)
    try:
        for _ in range(2):  # a paused session serves ranges again
            found = _get_all(gets, requests)
            assert [found[i].kind for i in range(len(RANGES))] == [OK] * len(RANGES)
            assert [found[i].body for i in range(len(RANGES))] == expected
            missing = found[len(RANGES)]
            assert missing.kind == FAILED and isinstance(missing.error, backend.missing_error)
            assert backend.missing in str(missing.error)
            gets.pause()
    finally:
        gets.close()
    sink = bytearray(DATA[500:600])  # get_into resumes a range after the bytes it has
    source.get_into(url, sink, offset=500, length=1000)
    assert sink == DATA[500:1500]


def test_stream_carries_its_local_path(backend: Backend) -> None:
    url = backend.put(DATA)
    with backend.source.open(url) as stream:
        path = local_path_of(stream)
        assert stream.read() == DATA
    assert path == backend.local_path(url)
    if path is not None:
        assert Path(path).read_bytes() == DATA  # a fill is published by the time EOF is seen
    with backend.source.open(url, offset=10, length=5) as stream:
        assert local_path_of(stream) == path and stream.read() == DATA[10:15]


@pytest.mark.parametrize("ranged", [False, True], ids=["whole", "ranged"])
def test_close_releases_at_once(backend: Backend, ranged: bool) -> None:
    url = backend.put(DATA * 20)  # 2 MB: a partial read leaves most of it unread
    before = open_fds()
    stream = backend.source.open(url, offset=1000 if ranged else 0, length=1_500_000 if ranged else None)
    assert len(stream.read(1000)) == 1000
    stream.close()
    assert stream.closed
    assert _eventually(lambda: not (open_fds() - before)), open_fds() - before
    assert _eventually(backend.released), "connection, child process or lease still held"


def test_negative_range_is_refused(backend: Backend) -> None:
    url = backend.put(DATA)
    for offset, length in ((-1, None), (0, -1)):
        with pytest.raises(ConfigurationError, match="must be >= 0"):
            backend.source.open(url, offset=offset, length=length)


# -- the routing source and the cache layer ---------------------------------------------------------


def test_router_pickles_without_its_sources(http_server: HTTPFileServer) -> None:
    router = SchemeRouter({"retries": 2})
    url = http_server.write("contracts/pickle.bin", DATA)
    with router.open(url) as stream:  # builds this process's HTTP source and its pool
        stream.read()
    blob = pickle.dumps(router)
    assert len(blob) < 500  # options only: no pool, no socket
    clone = pickle.loads(blob)
    assert clone == router and isinstance(clone, Source)
    with clone.open(url, offset=5, length=10) as stream:
        assert stream.read() == DATA[5:15]


def test_router_resolves_sources_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    router = SchemeRouter()
    here = router.source_for("memory://x")
    assert isinstance(here, MemorySource) and router.source_for("memory://y") is here
    monkeypatch.setattr("shardstream.sources._registry.os.getpid", lambda: -1)  # as in a forked child
    there = router.source_for("memory://x")
    assert isinstance(there, MemorySource) and there is not here


def test_router_refuses_pipe_unless_allowed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    router = SchemeRouter()
    for call in (router.open, router.stat, router.create):
        with pytest.raises(UnsafeOperationError, match="allow_pipe=True"):
            call(f"pipe:touch {marker}")
    assert not marker.exists()
    with SchemeRouter(allow_pipe=True).open(f"pipe:touch {marker}") as stream:
        assert stream.read() == b""
    assert marker.exists()


def test_cached_source_pickles(http_server: HTTPFileServer, tmp_path: Path) -> None:
    source = CachedSource(SchemeRouter(), ShardCache(str(tmp_path / "cache")))
    url = http_server.write("contracts/cached-pickle.bin", DATA)
    with source.open(url) as stream:
        assert stream.read() == DATA
    clone = pickle.loads(pickle.dumps(source))
    assert clone.cache.source is clone.inner and clone.inner == source.inner
    with clone.open(url, offset=100, length=50) as stream:
        assert stream.read() == DATA[100:150]
    assert (clone.stats.hits, clone.stats.misses) == (1, 0)


def test_cached_source_is_off_without_dir_or_size(tmp_path: Path) -> None:
    inner = SchemeRouter()
    assert cached_source(inner, cache_dir=None) is inner
    assert cached_source(inner, cache_dir=str(tmp_path), cache_size=0) is inner
    made = cached_source(inner, cache_dir=str(tmp_path), cache_size=-1)
    assert isinstance(made, CachedSource) and made.inner is inner and made.cache.cache_size is None
