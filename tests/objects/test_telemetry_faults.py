"""Telemetry counts retries and throttles where they happen, at every log level: injected 503
SlowDowns and cuts, for shards and for single objects, against SeaweedFS behind a fault proxy;
ObjectStream also reports its bytes and GETs, with its reader classed as I/O."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from _prefix import Prefix
from _servers import SeaweedS3
from _slowdown import SlowDownProxy

import shardstream as ss
from shardstream.tar import TarWriter

pytestmark = pytest.mark.s3


@pytest.fixture
def quiet() -> Iterator[None]:
    """No log line reaches any handler: the counts cannot come from log lines."""
    logger = logging.getLogger("shardstream")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def test_object_stream_counts_throttles_retries_bytes_and_gets(samples40: Prefix, quiet: None) -> None:
    with SlowDownProxy(samples40.s3.endpoint_url) as proxy:
        opts = samples40.s3.options_for(endpoint_url=proxy.url)
        stream = ss.ObjectStream(
            samples40.url, storage_options=opts, shuffle=False, window=8
        ).with_telemetry()
        proxy.plans.extend(["slowdown"] * 5)
        samples = list(stream)
        stats = stream.stats()
    assert len(samples) == 40 and proxy.slowdowns == 5
    assert stats["throttles"] == 5 and stats["retries"] == 5  # one retry per 503, none from logs
    expected = sum(len(v) for i in range(40) for v in samples40.expected(i).values())
    assert stats["bytes"] == expected and stats["opens"] == 80  # two objects per sample
    kinds = {s["stage"]: s["kind"] for s in stats["stages"]}
    assert kinds == {"0:io": "io", "0:read objects assemble": "assemble"}


def test_shard_reads_count_throttles_and_retries(s3_server: SeaweedS3, s3_bucket: str, quiet: None) -> None:
    buf = io.BytesIO()
    with TarWriter(buf) as tar:
        for i in range(50):
            tar.write({"__key__": f"{i:03d}", "bin": bytes(2000)})
    s3_server.put_object(s3_bucket, "t/shard-0.tar", buf.getvalue())
    with SlowDownProxy(s3_server.endpoint_url) as proxy:
        opts = s3_server.options_for(endpoint_url=proxy.url)
        ds = ss.ShardStream(
            f"s3://{s3_bucket}/t/shard-0.tar", storage_options=opts, cache=None
        ).with_telemetry()
        proxy.plans.extend(["slowdown", "slowdown", ("cut", 30_000)])
        assert len(list(ds)) == 50
        stats = ds.stats()
    assert proxy.slowdowns == 2 and proxy.cuts == 1
    assert stats["throttles"] == 2 and stats["retries"] == 3
