"""Measure candidate S3 clients against a local SeaweedFS: MB/s and client CPU-seconds per GB.

Run: ``PYTHONPATH=src .venv/bin/python tests/integration/_measure_s3_clients.py [--mb 50 --objects 3
--rounds 3]``. Starts its own SeaweedFS in a temp dir and stops it at the end. The result is
recorded in the comment at the top of ``src/shardstream/sources/s3.py``.
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _servers import SeaweedS3  # noqa: E402

CHUNK = 1 << 20


def _signed_headers(s3: SeaweedS3, bucket: str, key: str) -> tuple[str, dict[str, str]]:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = f"{s3.endpoint_url}/{bucket}/{key}"
    req = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    S3SigV4Auth(Credentials(s3.access_key, s3.secret_key), "s3", s3.region).add_auth(req)
    return url, dict(req.headers.items())


def boto3_reader(s3: SeaweedS3) -> Callable[[str, str], int]:
    client = s3.client()

    def read(bucket: str, key: str) -> int:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        n = 0
        while chunk := body.read(CHUNK):
            n += len(chunk)
        body.close()
        return n

    return read


def obstore_reader(s3: SeaweedS3) -> Callable[[str, str], int]:
    import obstore
    from obstore.store import S3Store

    stores: dict[str, Any] = {}

    def read(bucket: str, key: str) -> int:
        store = stores.get(bucket)
        if store is None:
            store = stores[bucket] = S3Store(
                bucket, endpoint=s3.endpoint_url, region=s3.region,
                access_key_id=s3.access_key, secret_access_key=s3.secret_key,
                virtual_hosted_style_request=False, client_options={"allow_http": True},
            )  # fmt: skip
        n = 0
        for chunk in obstore.get(store, key).stream(min_chunk_size=CHUNK):
            n += len(memoryview(chunk))
        return n

    return read


def urllib3_reader(s3: SeaweedS3) -> Callable[[str, str], int]:
    import urllib3

    pool = urllib3.PoolManager(maxsize=4)
    buf = bytearray(CHUNK)

    def read(bucket: str, key: str) -> int:
        url, headers = _signed_headers(s3, bucket, key)
        resp = pool.request("GET", url, headers=headers, preload_content=False)
        n = 0
        while got := resp.readinto(buf):
            n += got
        resp.release_conn()
        return n

    return read


def httpclient_reader(s3: SeaweedS3) -> Callable[[str, str], int]:
    """What shardstream does: botocore presigns (config, credentials, endpoint), http.client reads."""
    from botocore.config import Config

    host, port = s3.endpoint_url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port))
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    import boto3

    signer = boto3.client(
        "s3", endpoint_url=s3.endpoint_url, region_name=s3.region,
        aws_access_key_id=s3.access_key, aws_secret_access_key=s3.secret_key,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )  # fmt: skip

    def read(bucket: str, key: str) -> int:
        url = signer.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})
        conn.request("GET", url.split(s3.endpoint_url, 1)[1])
        resp = conn.getresponse()
        n = 0
        while got := resp.readinto(view):
            n += got
        return n

    return read


def shardstream_reader(s3: SeaweedS3) -> Callable[[str, str], int]:
    """The real thing: shardstream's S3Source (presign + pooled http.client + resumable reader)."""
    from shardstream.sources.s3 import S3Source

    source = S3Source(**s3.storage_options)
    buf = bytearray(CHUNK)

    def read(bucket: str, key: str) -> int:
        n = 0
        with source.open(f"s3://{bucket}/{key}") as stream:
            while got := stream.readinto(buf):
                n += got
        return n

    return read


CLIENTS = {
    "boto3": boto3_reader,
    "obstore": obstore_reader,
    "urllib3+sigv4": urllib3_reader,
    "http.client+sigv4": httpclient_reader,
    "shardstream S3Source": shardstream_reader,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--objects", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, SeaweedS3(tmp) as s3:
        bucket = s3.create_bucket("bench")
        keys = []
        for i in range(args.objects):
            keys.append(f"obj-{i}.bin")
            s3.put_object(bucket, keys[-1], os.urandom(args.mb << 20))
        total = args.mb * args.objects * args.rounds
        print(f"{args.objects} objects x {args.mb} MB x {args.rounds} rounds; cores={os.cpu_count()}")
        readers = {name: make(s3) for name, make in CLIENTS.items()}
        for read in readers.values():  # warm-up: connections, credential resolution
            read(bucket, keys[0])
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in CLIENTS}
        for _ in range(args.rounds):  # interleave clients so background load hits all alike
            for name, read in readers.items():
                wall, cpu = time.perf_counter(), time.process_time()
                for key in keys:
                    assert read(bucket, key) == args.mb << 20
                results[name].append((time.perf_counter() - wall, time.process_time() - cpu))
        for name, rows in results.items():
            wall = sum(r[0] for r in rows)
            cpu = sum(r[1] for r in rows)
            print(
                f"{name:20s} {total / wall:8.1f} MB/s   {cpu / (total / 1024):6.2f} CPU-s/GB (client process)"
            )
        # Per-request cost: many small objects (small shards, index files, resumes).
        small = [f"small-{i}.bin" for i in range(50)]
        for key in small:
            s3.put_object(bucket, key, os.urandom(64 << 10))
        print(f"{len(small)} objects x 64 KB x {args.rounds} rounds")
        for name, read in readers.items():
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(args.rounds):
                for key in small:
                    read(bucket, key)
            n = len(small) * args.rounds
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"{name:20s} {n / wall:8.1f} GET/s  {cpu / n * 1e3:6.2f} CPU-ms/GET")


if __name__ == "__main__":
    main()
