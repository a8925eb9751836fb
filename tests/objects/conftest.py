"""Fixtures for the single-object dataset tests: a fresh bucket filled with small samples."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from _prefix import Prefix, fill
from _servers import SeaweedS3

_numbers = itertools.count()


@pytest.fixture
def s3_bucket(s3_server: SeaweedS3, request: pytest.FixtureRequest) -> str:
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return s3_server.create_bucket(f"o{next(_numbers)}-{stem}")


@pytest.fixture
def samples40(s3_server: SeaweedS3, s3_bucket: str) -> Iterator[Prefix]:
    yield fill(s3_server, s3_bucket, "train/", 40)
