"""Whole shards over the network: written with TarWriter to s3://, read back as samples through
a connection-cutting proxy, and streamed by DataLoader workers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _components import require_module
from _servers import Cut, FaultProxy, SeaweedS3

import shardstream.tar.samples as tar_samples
import shardstream.tar.writer as tar_writer
from shardstream.sources import SchemeRouter

pytestmark = pytest.mark.s3

ProxyFactory = Callable[[str], FaultProxy]


def _sample(shard: int, i: int) -> dict[str, Any]:
    rng = bytes((shard * 31 + i * 7 + k) % 256 for k in range(256))
    return {"__key__": f"s{shard:02d}-{i:05d}", "txt": f"sample {shard} {i}", "bin": rng * (1 + i % 40)}


def _write_shards(s3: SeaweedS3, bucket: str, shards: int, per_shard: int) -> list[str]:
    urls = []
    for shard in range(shards):
        url = f"s3://{bucket}/shards/shard-{shard:06d}.tar"
        with tar_writer.TarWriter(url, storage_options=s3.options_for(part_size=5 << 20)) as sink:
            for i in range(per_shard):
                sink.write(_sample(shard, i))
        urls.append(url)
    return urls


def _read(urls: list[str], opts: dict[str, Any]) -> Iterator[tuple[str, bytes, bytes]]:
    fmt, source = tar_samples.TarFormat(), SchemeRouter(opts)
    for sample in (s for url in urls for s in fmt.samples(source, url)):
        yield sample["__key__"], bytes(sample["txt"]), bytes(sample["bin"])


def _expected(shards: range, per_shard: int) -> list[tuple[str, bytes, bytes]]:
    out = []
    for shard in shards:
        for i in range(per_shard):
            s = _sample(shard, i)
            out.append((s["__key__"], s["txt"].encode(), s["bin"]))
    return out


def test_samples_survive_cuts_at_many_offsets(
    s3_server: SeaweedS3, s3_bucket: str, fault_proxy: ProxyFactory
) -> None:
    urls = _write_shards(s3_server, s3_bucket, shards=2, per_shard=600)  # ~3 MB each, multipart
    proxy = fault_proxy(s3_server.endpoint_url)
    proxy.plan(*(Cut(n) for n in (10, 500, 70_000, 1_000_001, 250_000, 2_000_000, 123_457)))
    opts = s3_server.options_for(endpoint_url=proxy.url, retries=20)
    got = list(_read(urls, opts))
    assert got == _expected(range(2), 600)  # nothing lost, nothing duplicated, in order
    assert proxy.connections >= 7


def test_dataloader_workers_stream_from_s3(s3_server: SeaweedS3, s3_bucket: str) -> None:
    torch_data = require_module("torch.utils.data", "the PyTorch DataLoader paths", package="torch")
    urls = _write_shards(s3_server, s3_bucket, shards=4, per_shard=50)
    opts = s3_server.storage_options

    class Shards(torch_data.IterableDataset):  # type: ignore[misc]
        def __iter__(self) -> Iterator[tuple[str, bytes, bytes]]:
            info = torch_data.get_worker_info()
            mine = urls[info.id :: info.num_workers] if info is not None else urls
            yield from _read(mine, opts)

    loader = torch_data.DataLoader(Shards(), batch_size=None, num_workers=2)
    got = sorted(tuple(item) for item in loader)  # default collation turns tuples into lists
    assert got == sorted(_expected(range(4), 50))
