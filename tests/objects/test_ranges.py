"""ShardDataset's ranged GETs through the fetch engine against SeaweedFS behind a proxy that answers
503 SlowDown and cuts responses: a throttled range is retried and its sample delivered once, a cut
range resumes within the range (the ``Range`` headers are read at the proxy)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import SeaweedS3
from _slowdown import SlowDownProxy

import shardstream as ss


@pytest.fixture(autouse=True)
def _collect_dropped_datasets() -> Iterator[None]:
    """Datasets a test drops close their fetch sessions when collected: collect now, so no
    thread or socket of this test outlives it (later tests count threads and sockets)."""
    yield
    gc.collect()


pytestmark = pytest.mark.s3


def _shards(s3_server: SeaweedS3, bucket: str, tmp_path: Path) -> tuple[list[str], list[bytes]]:
    """Two shards of 10 samples (one 8-9 KB ``bin`` field each) in ``bucket``; URLs and payloads."""
    payloads = [bytes([i]) * (8000 + 97 * i) for i in range(20)]
    with ss.ShardWriter(str(tmp_path / "r-%06d.tar"), maxcount=10) as sink:
        for i, payload in enumerate(payloads):
            sink.write({"__key__": f"k{i:03d}", "bin": payload})
    names = [
        "r-000000.tar",
        "r-000001.tar",
        "_info.json",
        "_offsets/r-000000.tar.bin",
        "_offsets/r-000001.tar.bin",
    ]
    for name in names:
        s3_server.put_object(bucket, f"ra/{name}", (tmp_path / name).read_bytes())
    return [f"s3://{bucket}/ra/{n}" for n in names[:2]], payloads


def _keys(samples: list[Any]) -> list[tuple[str, bytes]]:
    return [(s["__key__"], s["bin"]) for s in samples]


def test_a_throttled_ranged_get_is_retried_and_its_sample_delivered_once(
    s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path
) -> None:
    urls, payloads = _shards(s3_server, s3_bucket, tmp_path)
    with SlowDownProxy(s3_server.endpoint_url) as proxy:
        ds = ss.ShardDataset(urls, storage_options=s3_server.options_for(endpoint_url=proxy.url))
        picks = [3, 15, 7, 12]  # no neighbours: four ranges
        for i in picks:  # the two shards' offsets sidecars, read before the batch
            ds.locate(i)
        before = ds.read_stats.requests
        proxy.gets.clear()
        proxy.ranges.clear()
        proxy.plans.extend(["slowdown", "slowdown"])  # the first two ranged GETs of the batch
        got = ds.__getitems__(picks)
        assert _keys(got) == [(f"k{i:03d}", payloads[i]) for i in picks]  # each once, in order
        assert proxy.slowdowns == 2 and sum(proxy.gets.values()) == len(picks) + 2
        assert ds.read_stats.throttles == 2 and ds.read_stats.requests - before == len(picks) + 2
        assert all(r is not None and r.startswith("bytes=") for _, r in proxy.ranges)


def test_a_cut_mid_range_resumes_within_the_range(
    s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path
) -> None:
    urls, payloads = _shards(s3_server, s3_bucket, tmp_path)
    with SlowDownProxy(s3_server.endpoint_url) as proxy:
        ds = ss.ShardDataset(urls, storage_options=s3_server.options_for(endpoint_url=proxy.url))
        url, offset, size = ds.locate(13)
        path = url.removeprefix("s3:/")
        proxy.ranges.clear()
        # The epoll loop's GET is cut (its bytes are dropped: it is retried on the blocking
        # path), then the blocking GET is cut after 3000 bytes: the third asks for the rest.
        proxy.plans.extend([("cut", 1000), ("cut", 3000)])
        assert _keys([ds[13]]) == [("k013", payloads[13])]
        last = offset + size - 1
        assert proxy.ranges == [
            (path, f"bytes={offset}-{last}"),
            (path, f"bytes={offset}-{last}"),
            (path, f"bytes={offset + 3000}-{last}"),
        ]
        assert proxy.cuts == 2 and ds.read_stats.requests == 1 + 3  # (1: the sidecar, read by locate)
