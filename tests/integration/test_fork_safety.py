"""Fork safety: DataLoader workers are forked while our threads run (a cache fill, the heartbeat)
and while other threads hold our locks; no child may hang, share a socket, or be left behind."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _components import require_module
from _procs import children, kill_left_behind
from _procs import fork_child as _fork
from _servers import FaultProxy, HTTPFileServer, Throttle

from shardstream.cache import _heartbeat
from shardstream.cache.source import cached_source
from shardstream.cache.stats import CacheStats
from shardstream.forks import gate
from shardstream.sources import SchemeRouter, get_source, open_url
from shardstream.sources import _registry as registry
from shardstream.sources import memory as memory_module
from shardstream.sources.http import HTTPSource
from shardstream.tar.writer import TarWriter

ProxyFactory = Callable[[str], FaultProxy]
ROUNDS = 8  # DataLoaders (2 forked workers each) created while the main process's fill runs

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


@pytest.fixture(autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Every process a test here starts is gone when it ends, whether it passed, failed or hung."""
    before = children()
    yield
    left = kill_left_behind(before)  # killed by PID (then the test fails)
    assert not left, f"processes left behind: {sorted(left)}"


class _Holder:
    """A thread that holds ``lock`` until released (as a thread of ours might at fork time)."""

    def __init__(self, lock: Any) -> None:
        self._lock, self._held, self._go = lock, threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self._lock.acquire()
        self._held.set()
        self._go.wait(30)
        self._lock.release()

    def __enter__(self) -> _Holder:
        self._thread.start()
        assert self._held.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._go.set()
        self._thread.join(5)


def test_child_is_not_blocked_by_locks_a_parent_thread_held(
    http_server: HTTPFileServer, tmp_path: Path
) -> None:
    url = http_server.write("fork/locks.bin", b"payload")
    source = HTTPSource()
    stats = CacheStats()
    memory_module.memory_store["memory://fork/x"] = b"mem"
    beat_file = tmp_path / "beat"
    beat_file.touch()

    def child() -> None:
        assert get_source("memory://fork/x") is not None  # the registry lock
        with open_url("memory://fork/x") as stream:  # the memory store's lock
            assert stream.read() == b"mem"
        with source.open(url) as stream:  # a connection pool inherited from the parent
            assert stream.read() == b"payload"
        stats.add(hits=1)  # cache counters inherited from the parent
        _heartbeat.unregister(_heartbeat.register(str(beat_file), 0.05))  # the heartbeat's lock

    locks = [registry._lock, memory_module._lock, source.pool.idle._lock, stats._lock, _heartbeat._lock]
    try:
        for lock in locks:
            with _Holder(lock):
                code, _ = _fork(child)
            assert code == 0, f"child blocked or failed with {lock!r} held by a parent thread"
    finally:
        source.close()


def test_fork_waits_for_busy_regions_and_the_threads_carry_on() -> None:
    inside, ended = threading.Event(), []

    def work() -> None:
        with gate.busy():
            inside.set()
            time.sleep(0.3)
            ended.append(time.monotonic())
        with gate.busy():  # carries on after the fork
            ended.append(time.monotonic())

    thread = gate.start(work, name="busy-test")
    assert inside.wait(5)

    def child() -> None:
        assert gate.busy_count == 0  # the parent's thread does not exist here
        done = threading.Event()
        gate.start(done.set, name="child-thread")  # the child starts its own threads
        assert done.wait(5)

    code, forked_at = _fork(child)
    thread.join(5)
    assert code == 0
    assert len(ended) == 2 and ended[0] <= forked_at  # the fork happened after the busy region


def test_heartbeat_pauses_across_fork_and_is_reset_in_the_child(tmp_path: Path) -> None:
    parent_file, child_file = tmp_path / "parent.lock", tmp_path / "child.lock"
    for path in (parent_file, child_file):
        path.touch()
        os.utime(path, (0, 0))
    beat = _heartbeat.register(str(parent_file), 0.05)
    try:
        _wait_touched(parent_file)

        def child() -> None:
            assert _heartbeat._thread is None and not _heartbeat._beats  # forgets the parent's files
            own = _heartbeat.register(str(child_file), 0.05)
            _wait_touched(child_file)
            _heartbeat.unregister(own)

        code, _ = _fork(child)
        assert code == 0
        os.utime(parent_file, (0, 0))
        _wait_touched(parent_file)  # the parent's heartbeat carries on after the fork
    finally:
        _heartbeat.unregister(beat)


def _wait_touched(path: Path, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while os.stat(path).st_mtime == 0:
        assert time.monotonic() < deadline, f"{path} was not touched"
        time.sleep(0.01)


def test_forked_child_never_shares_the_parents_connections(
    http_server: HTTPFileServer, fault_proxy: ProxyFactory
) -> None:
    data = os.urandom(100_000)
    http_server.write("fork/conn.bin", data)
    proxy = fault_proxy(http_server.url)
    url = f"{proxy.url}/fork/conn.bin"
    source = HTTPSource()
    with source.open(url) as stream:
        assert stream.read() == data  # leaves one idle keep-alive connection in the pool

    def child() -> None:
        with source.open(url) as stream:
            assert stream.read() == data

    try:
        assert _fork(child)[0] == 0
        with source.open(url) as stream:  # the parent's idle connection still works, untouched
            assert stream.read() == data
        assert proxy.connections == 2  # one of the parent's (reused), one of the child's own
    finally:
        source.close()


def _write_worker_shards(server: HTTPFileServer, count: int, per_shard: int) -> tuple[list[str], list[str]]:
    urls, keys = [], []
    for shard in range(count):
        path = server.root / "fork" / f"w-{shard}.tar"
        path.parent.mkdir(parents=True, exist_ok=True)
        with TarWriter(str(path)) as sink:
            for i in range(per_shard):
                key = f"w{shard}-{i:03d}"
                sink.write({"__key__": key, "bin": os.urandom(2000)})
                keys.append(key)
        urls.append(server.url_for(f"fork/w-{shard}.tar"))
    return urls, keys


@pytest.mark.timeout(300)
def test_forked_dataloader_while_the_cache_fills_and_a_pool_is_active(
    http_server: HTTPFileServer, fault_proxy: ProxyFactory, tmp_path: Path
) -> None:
    torch_data = require_module("torch.utils.data", "the PyTorch DataLoader paths", package="torch")
    import shardstream as ss

    urls, keys = _write_worker_shards(http_server, count=4, per_shard=25)
    big = os.urandom(30_000_000)
    http_server.write("fork/big.tar", big)
    slow = fault_proxy(http_server.url)
    slow.every(Throttle(2_000_000))  # the main process's fill lasts about 15 s, longer than the loop
    cache_dir = str(tmp_path / "cache")

    # The main process: a cache fill streaming on a thread (heartbeat running, entry locked),
    # pooled connections, and a thread that keeps taking our locks, as user code might.
    cache = cached_source(SchemeRouter(), cache_dir=cache_dir)
    filling = cache.open(f"{slow.url}/fork/big.tar")
    head = filling.read(1000)
    stop = threading.Event()

    def hammer() -> None:
        stats = CacheStats()
        while not stop.is_set():
            get_source(urls[0])
            stats.add(hits=1)
            with open_url(urls[0], length=100) as stream:
                stream.read()

    hammering = threading.Thread(target=hammer, daemon=True)
    hammering.start()
    fill = filling._fill  # type: ignore[attr-defined]  # the TeeReader's running copy
    try:
        started = time.monotonic()
        for _ in range(ROUNDS):
            dataset = ss.ShardStream(urls, cache=ss.CachePolicy(cache_dir), shuffle_shards=False)
            loader = torch_data.DataLoader(
                dataset, batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=60
            )
            assert sorted(sample["__key__"] for sample in loader) == keys
            del loader
            gc.collect()
            # Every fork above happened with the fill thread and the heartbeat running.
            assert not fill.done, "the fill ended before the loop did: make it slower (Throttle)"
            assert _heartbeat._thread is not None and _heartbeat._thread.is_alive()
        print(f"{ROUNDS} rounds of 2 forked workers in {time.monotonic() - started:.1f}s")
    finally:
        stop.set()
        hammering.join(10)
    assert head + filling.read() == big  # the fill went on through every fork, intact
    filling.close()
    # The children are checked by the no_process_left_behind fixture.


def test_a_forked_child_adopts_the_parents_s3_source_with_connections_of_its_own(
    s3_server: Any, s3_bucket: str, fault_proxy: ProxyFactory
) -> None:
    proxy = fault_proxy(s3_server.endpoint_url)
    opts = s3_server.options_for(endpoint_url=proxy.url)
    s3_server.put_object(s3_bucket, "fork/one.bin", b"x" * 5000)
    url = f"s3://{s3_bucket}/fork/one.bin"
    source: Any = get_source(url, opts)
    sink = bytearray()
    source.get_into(url, sink)  # leaves one idle keep-alive connection in the whole-body pool
    client = source._client
    files = get_source("file:///", {})

    def child() -> None:
        adopted: Any = get_source(url, opts)
        assert adopted is source  # no second botocore client built in the worker
        assert get_source("file:///", {}) is not files  # sources not declared fork-safe are new
        assert not source.whole.idle.count() and not source.pool.idle.count()  # the parent's are not ours
        got = bytearray()
        source.get_into(url, got)
        assert got == b"x" * 5000
        assert source._client is client  # still not rebuilt: static keys sign without it

    try:
        assert _fork(child)[0] == 0
        again = bytearray()
        source.get_into(url, again)  # the parent's idle connection still works, untouched
        assert again == b"x" * 5000 and proxy.connections == 2
    finally:
        for key in [k for k, v in registry._instances.items() if v is source]:
            del registry._instances[key]
        source.close()
