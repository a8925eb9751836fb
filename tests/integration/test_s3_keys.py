"""S3 keys with reserved characters, spaces and non-ASCII text, end to end against SeaweedFS.

An ``s3://`` URL has no query string or fragment: everything after the bucket is the key, and the
key is percent-encoded only on the wire. Each key here is created by boto3 (the reference client)
and read back by shardstream as a shard, as single objects (with listing), through the cache, and
written by shardstream and read back by boto3.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from _servers import SeaweedS3

import shardstream as ss
from shardstream.sources import create_url, open_url, stat_url
from shardstream.tar import TarWriter

pytestmark = pytest.mark.s3

#: Every character RFC 3986 reserves, the ones that need escaping, a space and non-ASCII text.
ODD = [" ", "!", "#", "$", "&", "'", "(", ")", "*", "+", ",", ";", "=", "?", "@", "[", "]", "%", "~", "ü日本"]
STEMS = [f"k{i:02d}{c}x" for i, c in enumerate(ODD)] + ["q?x=1", "frag#top", "pct%20lit", "two  spaces"]


def _shard(stem: str) -> bytes:
    buf = io.BytesIO()
    with TarWriter(buf) as tar:
        tar.write({"__key__": "s0", "txt": f"first of {stem}"})
        tar.write({"__key__": "s1", "txt": f"second of {stem}"})
    return buf.getvalue()


def test_shards_with_odd_keys_read_as_written(s3_server: SeaweedS3, s3_bucket: str) -> None:
    urls = [s3_server.put_object(s3_bucket, f"odd dir/{stem}.tar", _shard(stem)) for stem in STEMS]
    assert urls[0] == f"s3://{s3_bucket}/odd dir/{STEMS[0]}.tar"
    opts = s3_server.storage_options
    for url in urls[:3]:
        assert stat_url(url, storage_options=opts).size > 0
    ds = ss.ShardStream(urls, shuffle_shards=False, storage_options=opts, cache=None)
    got = [(s["__url__"], s["txt"].decode()) for s in ds]
    want = [(u, f"{w} of {stem}") for u, stem in zip(urls, STEMS, strict=True) for w in ("first", "second")]
    assert got == want


def test_objects_with_odd_keys_are_listed_and_read(s3_server: SeaweedS3, s3_bucket: str) -> None:
    client = s3_server.client()
    for stem in STEMS:
        client.put_object(Bucket=s3_bucket, Key=f"objs/{stem}.txt", Body=f"text {stem}".encode())
        client.put_object(Bucket=s3_bucket, Key=f"objs/{stem}.cls", Body=str(len(stem)).encode())
    opts = s3_server.storage_options
    ds = ss.ObjectDataset(f"s3://{s3_bucket}/objs/", storage_options=opts)
    assert sorted(ds.keys) == sorted(STEMS)
    by_key = {s["__key__"]: s for s in ds.__getitems__(list(range(len(ds))))}
    for stem in STEMS:
        assert by_key[stem]["txt"] == f"text {stem}".encode()
        assert by_key[stem]["cls"] == str(len(stem)).encode()
    stream = ss.ObjectStream(f"s3://{s3_bucket}/objs/", storage_options=opts, shuffle=False)
    assert sorted(s["__key__"] for s in stream) == sorted(STEMS)


def test_written_keys_are_the_urls_keys(s3_server: SeaweedS3, s3_bucket: str) -> None:
    opts = s3_server.storage_options
    for stem in ["w?a=b", "w#c", "w %41 ü", "w+plus"]:
        url = f"s3://{s3_bucket}/out/{stem}.tar"
        with create_url(url, storage_options=opts) as out:
            out.write(stem.encode())
        assert s3_server.get_object(s3_bucket, f"out/{stem}.tar") == stem.encode()  # boto3 reads that key
        with open_url(url, storage_options=opts) as stream:
            assert stream.read() == stem.encode()


def test_cache_keeps_odd_keys_apart(s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    # "q" and "q?x=1" are different objects: cut at '?', both would be cached under one name.
    stems = ["q", "q?x=1", "q#x"]
    urls = [s3_server.put_object(s3_bucket, f"c/{stem}.tar", _shard(stem)) for stem in stems]
    opts = s3_server.storage_options
    policy = ss.CachePolicy(str(tmp_path / "cache"))
    for _ in range(2):  # a miss that fills, then hits
        ds = ss.ShardStream(urls, shuffle_shards=False, storage_options=opts, cache=policy)
        assert [s["txt"].decode() for s in ds][::2] == [f"first of {stem}" for stem in stems]
    cached = sorted(p.name for p in (tmp_path / "cache" / "s3").rglob("*.tar"))
    assert cached == ["q%23x.tar", "q%3Fx=1.tar", "q.tar"]
