"""Fixtures for the single-object dataset tests: a fresh bucket filled with small samples."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from _servers import SeaweedS3

_numbers = itertools.count()


@dataclass
class Prefix:
    """A prefix of ``n`` samples ``{i:05d}.txt`` + ``{i:05d}.cls`` under ``url``."""

    url: str
    bucket: str
    prefix: str
    n: int
    s3: SeaweedS3

    def key(self, i: int) -> str:
        return f"{i:05d}"

    def expected(self, i: int) -> dict[str, bytes]:
        return {"txt": f"text of sample {i} ".encode() * (1 + i % 7), "cls": str(i % 10).encode()}


def fill(s3: SeaweedS3, bucket: str, prefix: str, n: int) -> Prefix:
    p = Prefix(f"s3://{bucket}/{prefix}", bucket, prefix, n, s3)
    client = s3.client()
    for i in range(n):
        for ext, data in p.expected(i).items():
            client.put_object(Bucket=bucket, Key=f"{prefix}{p.key(i)}.{ext}", Body=data)
    return p


@pytest.fixture
def s3_bucket(s3_server: SeaweedS3, request: pytest.FixtureRequest) -> str:
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return s3_server.create_bucket(f"o{next(_numbers)}-{stem}")


@pytest.fixture
def samples40(s3_server: SeaweedS3, s3_bucket: str) -> Iterator[Prefix]:
    yield fill(s3_server, s3_bucket, "train/", 40)
