"""The shard cache with real processes against the SeaweedFS S3 server.

Requests are counted at a loopback proxy in front of the S3 gateway, so "fetched once" is
measured at the wire, not inferred from our own counters.
"""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _cache_workers import fill_and_hang, hold_open, read_all
from _servers import FaultProxy, SeaweedS3, Stall

from shardstream.cache import ShardCache
from shardstream.tar.grouping import group_samples
from shardstream.tar.reader import iter_members
from shardstream.tar.writer import TarWriter

pytestmark = pytest.mark.s3

SPAWN = multiprocessing.get_context("spawn")


def _shard(index: int, samples: int = 40, size: int = 20_000) -> bytes:
    buf = io.BytesIO()
    with TarWriter(buf) as writer:
        for i in range(samples):
            rnd = hashlib.sha256(f"{index}-{i}".encode()).digest() * (size // 32)
            writer.write({"__key__": f"s{index:03d}-{i:04d}", "bin": rnd, "cls": str(i)})
    return buf.getvalue()


def _digest(data: bytes, url: str) -> tuple[str, list[str]]:
    h = hashlib.sha256()
    keys = []
    for sample in group_samples(iter_members(io.BytesIO(data), url), url):
        keys.append(sample["__key__"])
        for field in sorted(k for k in sample if not k.startswith("__")):
            h.update(sample[field])
    return h.hexdigest(), keys


@pytest.fixture
def proxied(
    s3_server: SeaweedS3, fault_proxy: Callable[[str], FaultProxy]
) -> tuple[FaultProxy, dict[str, Any]]:
    proxy = fault_proxy(s3_server.endpoint_url)
    return proxy, s3_server.options_for(endpoint_url=proxy.url)


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """Every process a test starts is stopped by PID at the end."""
    started: list[Any] = []
    yield started
    for proc in started:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)


def _no_debris(cache_dir: Path) -> None:
    book = cache_dir / ".shardstream"
    assert not list((book / "tmp").rglob("*.part")), "temp files left behind"
    assert not list((book / "lock").rglob("*.lock")), "lock files left behind"


# Each spawned child imports shardstream (and with it torch) and botocore: about 3 CPU-seconds, so
# the 16-process run takes about a minute on two shared cores and is marked slow; 4 processes
# exercise the same races in the default suite.
@pytest.mark.parametrize("nprocs", [4, pytest.param(16, marks=pytest.mark.slow)])
def test_processes_fetch_each_shard_exactly_once(
    tmp_path: Path,
    s3_server: SeaweedS3,
    s3_bucket: str,
    proxied: tuple[FaultProxy, dict[str, Any]],
    processes: list[Any],
    nprocs: int,
) -> None:
    proxy, options = proxied
    shards = {s3_server.put_object(s3_bucket, f"train/shard-{i:03d}.tar", _shard(i)): i for i in range(8)}
    expected = {url: _digest(_shard(i), url) for url, i in shards.items()}
    urls = list(shards)
    cache_dir = str(tmp_path / "cache")
    results = SPAWN.Queue()
    barrier = SPAWN.Barrier(nprocs)
    for seed in range(nprocs):
        args = (read_all, (cache_dir, urls, options, seed, barrier), results)
        proc = SPAWN.Process(target=_run_and_report, args=args)
        proc.start()
        processes.append(proc)
    outcomes = [results.get(timeout=180) for _ in range(nprocs)]
    for proc in processes:
        proc.join(30)
        assert proc.exitcode == 0
    errors = [o for o in outcomes if "error" in o]
    assert not errors, errors[0]["error"]
    for outcome in outcomes:
        assert {u: (d, outcome["keys"][u]) for u, d in outcome["digests"].items()} == expected
    for url in urls:
        path = "/" + url[len("s3://") :]
        assert proxy.gets(path) == 1, (url, proxy.gets(path))
    totals = {k: sum(o["stats"][k] for o in outcomes) for k in ("hits", "misses")}
    assert totals == {"misses": 8, "hits": nprocs * 8 - 8}
    _no_debris(Path(cache_dir))


def _run_and_report(func: Callable[..., dict[str, Any]], args: tuple[Any, ...], results: Any) -> None:
    try:
        results.put(func(*args))
    except BaseException as exc:  # errors travel to the test as values
        import traceback

        results.put({"error": "".join(traceback.format_exception(exc))})


@pytest.mark.parametrize("other_host", [False, True], ids=["same-host-pid-check", "other-host-heartbeat"])
def test_killed_downloader_is_taken_over(
    tmp_path: Path,
    s3_server: SeaweedS3,
    s3_bucket: str,
    proxied: tuple[FaultProxy, dict[str, Any]],
    processes: list[Any],
    other_host: bool,
) -> None:
    proxy, options = proxied
    data = _shard(0, samples=60)
    url = s3_server.put_object(s3_bucket, "big/shard-000.tar", data)
    cache_dir = tmp_path / "cache"
    proxy.plan(Stall(after=300_000, seconds=60))  # the first download stops mid-shard
    started = SPAWN.Event()
    child = SPAWN.Process(
        target=fill_and_hang, args=(str(cache_dir), url, options, "node-b" if other_host else None, started)
    )
    child.start()
    processes.append(child)
    assert started.wait(60), "the child never started streaming"
    parts = list((cache_dir / ".shardstream" / "tmp").rglob("*.part"))
    assert len(parts) == 1
    os.kill(child.pid, signal.SIGKILL)  # not reaped yet: a zombie must count as dead too
    cache = ShardCache(str(cache_dir), storage_options=options, heartbeat=0.2, stale_after=1.5)
    t0 = time.monotonic()
    stream, path = cache(url)
    got = stream.read()
    while more := stream.read(1 << 20):
        got += more
    stream.close()
    waited = time.monotonic() - t0
    assert got == data
    assert path is not None and Path(path).read_bytes() == data
    stats = cache.stats
    assert stats.stale_takeovers == 1 and stats.temp_cleaned == 1 and stats.misses == 1
    if other_host:
        assert waited >= 1.0  # only after the heartbeat went silent for stale_after
    else:
        assert waited < 1.5  # the PID check sees the death at once
    assert proxy.gets("/" + url[len("s3://") :]) == 2
    _no_debris(cache_dir)


def test_eviction_spares_a_shard_another_process_reads(
    tmp_path: Path,
    s3_server: SeaweedS3,
    s3_bucket: str,
    proxied: tuple[FaultProxy, dict[str, Any]],
    processes: list[Any],
) -> None:
    _, options = proxied
    blobs = [_shard(i, samples=10, size=10_000) for i in range(4)]
    urls = [s3_server.put_object(s3_bucket, f"ev/shard-{i}.tar", b) for i, b in enumerate(blobs)]
    cache_dir = tmp_path / "cache"
    limit = len(blobs[0]) * 2 + len(blobs[0]) // 2  # room for two shards
    opened, release = SPAWN.Event(), SPAWN.Event()
    reader = SPAWN.Process(target=hold_open, args=(str(cache_dir), urls[0], options, opened, release))
    reader.start()
    processes.append(reader)
    assert opened.wait(60)
    cache = ShardCache(str(cache_dir), cache_size=limit, storage_options=options)
    time.sleep(0.05)
    for url in urls[1:]:
        cache.get_file(url)
        time.sleep(0.05)
    present = sorted(p.name for p in (cache_dir / "s3" / s3_bucket / "ev").iterdir())
    # Each new shard needs one eviction. shard-0 is always the least recently used, but the other
    # process is reading it: shard-1, then shard-2 went instead, and nothing more.
    assert present == ["shard-0.tar", "shard-3.tar"]
    assert cache.stats.evictions == 2
    release.set()
    reader.join(30)
    assert reader.exitcode == 0
