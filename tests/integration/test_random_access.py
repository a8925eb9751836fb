"""Random access into remote tar shards: ShardDataset over HTTP and S3 (SeaweedFS), counted at the server.

Bytes are counted where they are served: the loopback HTTP server records every GET's ``Range``
header; for S3 a counting proxy (``FaultProxy``, pass-through) sits in front of SeaweedFS and
counts the requests per object and the response bytes it forwards. Samples are compared with a
sequential read of the same shards by the streaming reader.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstream as ss
from shardstream.cache import ShardCache

_names = itertools.count()


@pytest.fixture(autouse=True)
def _collect_dropped_datasets() -> Iterator[None]:
    """Datasets a test drops close their fetch sessions when collected: collect now, so no
    thread or socket of this test outlives it (later tests count threads and sockets)."""
    yield
    gc.collect()


def _write(directory: Path, shards: int = 4, per_shard: int = 30) -> list[str]:
    with ss.ShardWriter(str(directory / "rand-%06d.tar"), maxcount=per_shard) as sink:
        for i in range(shards * per_shard):
            sink.write({"__key__": f"r{i:05d}", "bin": bytes([i % 251]) * (300 + 97 * i), "cls": i})
    return [f"rand-{k:06d}.tar" for k in range(shards)]


def _fields(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if k not in ("__url__", "__local_path__")}


def _sequential(directory: Path, names: list[str]) -> list[dict[str, Any]]:
    return [
        _fields(s)
        for s in ss.ShardStream([str(directory / n) for n in names], shuffle_shards=False, cache=None)
    ]


def _index_files(names: list[str]) -> list[str]:
    """The index and the shards' offsets sidecars (what is copied with the shards)."""
    return ["_info.json", *(f"_offsets/{n}.bin" for n in names)]


def _publish_http(http_server: Any, directory: Path, names: list[str]) -> str:
    """Copy the shards, their _info.json and sidecars under a fresh path of the HTTP server; its prefix."""
    prefix = f"ra{next(_names)}"
    for name in [*names, *_index_files(names)]:
        http_server.write(f"{prefix}/{name}", (directory / name).read_bytes())
    return prefix


def test_http_reads_only_the_requested_ranges(http_server: Any, tmp_path: Path) -> None:
    names = _write(tmp_path)
    prefix = _publish_http(http_server, tmp_path, names)
    ds = ss.ShardDataset([http_server.url_for(f"{prefix}/{n}") for n in names])
    assert http_server.gets(f"{prefix}/_info.json") == 1 and not any(
        http_server.gets(f"{prefix}/{n}") for n in names
    )
    picks = [37, 3, 4, 90, 61, 5, 119]  # 3, 4 and 5 are neighbours: one request
    got = ds.__getitems__(picks)
    sequential = _sequential(tmp_path, names)
    assert [_fields(s) for s in got] == [sequential[i] for i in picks]
    ranges = {n: http_server.range_headers(f"{prefix}/{n}") for n in names}
    expected: dict[str, list[str]] = {n: [] for n in names}
    for first, last in ((3, 5), (37, 37), (61, 61), (90, 90), (119, 119)):
        url, offset, _ = ds.locate(first)
        _, end_offset, end_size = ds.locate(last)
        expected[url.rpartition("/")[2]].append(f"bytes={offset}-{end_offset + end_size - 1}")
    assert {n: sorted(r) for n, r in ranges.items()} == {n: sorted(r) for n, r in expected.items()}
    # Read again: the LRU answers, the server sees nothing.
    assert [_fields(s) for s in ds.__getitems__(picks[:3])] == [sequential[i] for i in picks[:3]]
    assert sum(len(r) for r in (http_server.range_headers(f"{prefix}/{n}") for n in names)) == 5


def test_offsets_sidecars_are_read_only_for_the_shards_touched(http_server: Any, tmp_path: Path) -> None:
    names = _write(tmp_path, shards=4, per_shard=30)
    prefix = _publish_http(http_server, tmp_path, names)

    def sidecar_gets() -> list[int]:
        return [http_server.gets(f"{prefix}/_offsets/{n}.bin") for n in names]

    ds = ss.ShardDataset([http_server.url_for(f"{prefix}/{n}") for n in names])
    # Construction reads the index's counts table (one ranged GET: the index is small), nothing else.
    assert http_server.gets(f"{prefix}/_info.json") == 1 and sidecar_gets() == [0, 0, 0, 0]
    sequential = _sequential(tmp_path, names)
    assert _fields(ds[75]) == sequential[75]  # shard 2
    assert sidecar_gets() == [0, 0, 1, 0]
    assert [_fields(s) for s in ds.__getitems__([80, 5, 119, 61])] == [
        sequential[i] for i in (80, 5, 119, 61)
    ]
    assert sidecar_gets() == [1, 0, 1, 1]  # the batch's two new shards, fetched together; shard 2 kept
    assert http_server.gets(f"{prefix}/_info.json") == 1


def test_s3_random_access_counted_at_a_proxy(
    s3_server: Any, s3_bucket: str, fault_proxy: Any, tmp_path: Path
) -> None:
    names = _write(tmp_path)
    for name in [*names, *_index_files(names)]:
        s3_server.put_object(s3_bucket, f"data/{name}", (tmp_path / name).read_bytes())
    proxy = fault_proxy(s3_server.endpoint_url)
    options = s3_server.options_for(endpoint_url=proxy.url)
    ds = ss.ShardDataset([f"s3://{s3_bucket}/data/{n}" for n in names], storage_options=options)
    picks = [100, 7, 66, 31, 45, 12, 88, 119, 0, 59]  # no two neighbours: one request each
    assert proxy.gets(f"{s3_bucket}/data/_info.json") == 1
    assert not any(proxy.gets(f"{s3_bucket}/data/_offsets/{n}.bin") for n in names)
    for i in picks:  # the shards' sidecars: read here, so that the batch below is samples only
        ds.locate(i)
    assert [proxy.gets(f"{s3_bucket}/data/_offsets/{n}.bin") for n in names] == [1, 1, 1, 1]
    index_bytes = _settled(lambda: proxy.response_bytes, 0)
    got = ds.__getitems__(picks)
    sequential = _sequential(tmp_path, names)
    assert [_fields(s) for s in got] == [sequential[i] for i in picks]
    assert [s["__url__"] for s in got] == [ds.locate(i)[0] for i in picks]
    per_shard = {n: sum(1 for i in picks if ds.locate(i)[0].endswith(n)) for n in names}
    assert {n: proxy.gets(f"{s3_bucket}/data/{n}") for n in names} == per_shard
    wanted = sum(ds.locate(i)[2] for i in picks)
    served = _settled(lambda: proxy.response_bytes - index_bytes, wanted)
    # every byte served is a requested sample's, plus one response head (< 1 KiB) per request
    assert wanted <= served <= wanted + 1024 * len(picks)

    from shardstream import wids

    listing = wids.ShardListDataset(
        [{"url": f"s3://{s3_bucket}/data/{n}", "nsamples": 30} for n in names],
        storage_options=options,
        transformations=[],
    )
    sample = listing[45]
    assert sample[".bin"].read() == sequential[45]["bin"] and sample["__shardindex__"] == 15


def test_distributed_sampler_covers_every_sample_once(http_server: Any, tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, DistributedSampler

    names = _write(tmp_path, shards=3, per_shard=20)
    prefix = _publish_http(http_server, tmp_path, names)
    ds = ss.ShardDataset(
        [http_server.url_for(f"{prefix}/{n}") for n in names], transform=lambda s: s["__key__"]
    )
    samplers = [DistributedSampler(ds, num_replicas=2, rank=r, shuffle=True, seed=5) for r in range(2)]
    shares = [list(s) for s in samplers]
    assert sorted(shares[0] + shares[1]) == list(range(60)) and len(shares[0]) == len(shares[1]) == 30
    # One rank's share through a real 2-worker DataLoader (the dataset pickled into each worker,
    # its connections opened there).
    loader = DataLoader(ds, batch_size=4, sampler=samplers[0], num_workers=2, collate_fn=list)
    keys = [k for batch in loader for k in batch]
    assert keys == [f"r{i:05d}" for i in shares[0]]


def test_ss_loader_runs_a_sampled_order(http_server: Any, tmp_path: Path) -> None:
    import torch

    names = _write(tmp_path, shards=2, per_shard=20)
    prefix = _publish_http(http_server, tmp_path, names)
    ds = ss.ShardDataset([http_server.url_for(f"{prefix}/{n}") for n in names], transform=lambda s: s["cls"])
    order = [int(i) for i in torch.randperm(40, generator=torch.Generator().manual_seed(1))]
    loader = ss.Loader(ss.DataPipeline(lambda: ds.iterate(order, batch_size=8)), batch_size=10, num_threads=2)
    with loader:
        labels = [int(x) for batch in loader for x in batch]
    assert labels == order


def test_a_cached_shard_is_read_in_place_and_others_are_not_filled(http_server: Any, tmp_path: Path) -> None:
    names = _write(tmp_path, shards=2, per_shard=20)
    prefix = _publish_http(http_server, tmp_path, names)
    urls = [http_server.url_for(f"{prefix}/{n}") for n in names]
    cache_dir = tmp_path / "cache"
    ShardCache(str(cache_dir)).get_file(urls[0])  # filled by someone else (a streaming run, say)
    assert http_server.gets(f"{prefix}/{names[0]}") == 1
    ds = ss.ShardDataset(urls, cache=str(cache_dir))
    sequential = _sequential(tmp_path, names)
    assert [_fields(s) for s in ds.__getitems__([3, 17, 25])] == [sequential[i] for i in (3, 17, 25)]
    assert http_server.gets(f"{prefix}/{names[0]}") == 1  # shard 0: read from the cache entry
    assert http_server.range_headers(f"{prefix}/{names[1]}") == [
        f"bytes={ds.locate(25)[1]}-{ds.locate(25)[1] + ds.locate(25)[2] - 1}"
    ]
    assert ds.read_stats.cache_hits == 2 and ShardCache(str(cache_dir)).info(urls[1]) is None


@pytest.mark.parametrize("workers", [0, 2])
def test_errors_name_the_url_and_go_to_the_handler(http_server: Any, tmp_path: Path, workers: int) -> None:
    from torch.utils.data import DataLoader

    names = _write(tmp_path, shards=2, per_shard=10)
    prefix = _publish_http(http_server, tmp_path, names)
    urls = [http_server.url_for(f"{prefix}/{n}") for n in names]
    ds = ss.ShardDataset(urls, handler=ss.ignore_and_continue, transform=lambda s: s["__key__"])
    http_server.fail(f"{prefix}/{names[1]}", 404, times=1)
    keys = [k for b in DataLoader(ds, batch_size=5, num_workers=workers, collate_fn=list) for k in b]
    assert len(keys) == 20 and keys[:10] == [f"r{i:05d}" for i in range(10)]
    strict = ss.ShardDataset(urls)
    http_server.fail(f"{prefix}/{names[1]}", 404, times=1)
    with pytest.raises(ss.SourceError, match=names[1]):
        strict[12]


@pytest.mark.parametrize("scheme", [pytest.param("s3", marks=pytest.mark.s3), "http"])
def test_ranged_get_many_reads_exactly_the_ranges_and_nothing_else(
    scheme: str, request: pytest.FixtureRequest, fault_proxy: Any
) -> None:
    """The fetch engine's ranged GETs (S3: the epoll loop; HTTP: the source's ranged open on the
    session's threads) return exactly each range, and the server sends only those bytes."""
    from shardstream.objects import RangeFetcher
    from shardstream.sources import SchemeRouter

    data = bytes(range(256)) * 4096  # 1 MiB
    if scheme == "s3":
        s3_server, s3_bucket = request.getfixturevalue("s3_server"), request.getfixturevalue("s3_bucket")
        s3_server.put_object(s3_bucket, "blob.bin", data)
        proxy = fault_proxy(s3_server.endpoint_url)
        router = SchemeRouter(s3_server.options_for(endpoint_url=proxy.url))
        url, path = f"s3://{s3_bucket}/blob.bin", f"{s3_bucket}/blob.bin"
    else:
        http_server = request.getfixturevalue("http_server")
        path = f"ranged{next(_names)}/blob.bin"
        http_server.write(path, data)
        proxy = fault_proxy(http_server.url)
        router = SchemeRouter()
        url = f"{proxy.url}/{path}"
    wanted: list[tuple[str, int, int | None]] = [
        (url, 0, 1000),
        (url, 123_457, 54_321),
        (url, len(data) - 700, 5000),  # the object ends first
        (url, 500_000, 1),
    ]
    fetcher = RangeFetcher(router, window=4)
    try:
        for _ in range(2):  # the session kept between batches serves the second one
            before = proxy.response_bytes
            got = fetcher.fetch(wanted)
            assert got == [data[o : o + (n or 0)] for _, o, n in wanted]
            size = sum(len(b) for b in got if isinstance(b, bytes))
            served = _settled(lambda start=before: proxy.response_bytes - start, size)
            assert size <= served <= size + 1024 * len(wanted)  # + one response head each
        assert proxy.gets(path) == 2 * len(wanted) and fetcher.requests == 2 * len(wanted)
    finally:
        fetcher.close()


def _settled(count: Callable[[], int], at_least: int, timeout: float = 5.0) -> int:
    """``count()`` once the proxy has added up what it relayed: it counts after each send, so
    the client can hold the bytes a moment before the proxy's counter does."""
    deadline = time.monotonic() + timeout
    value = count()
    while value < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
        value = count()
    time.sleep(0.05)  # and nothing more arrives after it
    return count()
