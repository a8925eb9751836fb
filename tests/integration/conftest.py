"""Session-wide loopback servers for integration tests: SeaweedFS S3, an HTTP file server, and
fault-injecting proxies. See ``_servers.py`` for what each object offers.

Fixtures:
    s3_server: a running :class:`SeaweedS3` (session). ``.endpoint_url``, ``.access_key``,
        ``.secret_key``, ``.storage_options`` (dict for ``s3://`` sources), ``.options_for(...)``,
        ``.create_bucket(name)``, ``.put_object(bucket, key, data) -> url``, ``.get_object``,
        ``.client()`` (boto3), ``.alt_*`` (a second identity limited to ``.alt_bucket``),
        ``.public_bucket`` (anonymous read).
    s3_bucket: a fresh, empty bucket name on ``s3_server`` for one test.
    http_server: a running :class:`HTTPFileServer` over a temp dir (session). ``.write(path,
        data) -> url``, ``.url_for(path)``, ``.gets(path)``, ``.requests``, ``.range_headers(path)``,
        ``.fail(path, status, times)``.
    fault_proxy: a factory ``fault_proxy(upstream_url) -> FaultProxy`` (started; stopped after the
        test). ``.url``, ``.plan(Cut(n), Stall(n, s), None, ...)``, ``.connections``, ``.gets(path)``.

Counting fetches ("each shard fetched exactly once"): ``http_server.gets("dir/shard.tar")``
counts GETs at the server (all processes); for S3 put a ``fault_proxy(s3_server.endpoint_url)``
in front and use ``s3_server.options_for(endpoint_url=proxy.url)``, then
``proxy.gets(f"{bucket}/{key}")``; in-process, ``get_source(url, opts).requests[url]`` counts the
GETs (resumes included) an ``S3Source`` sent. Cached sources are closed after every test.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _servers import FaultProxy, SeaweedS3  # noqa: E402

_bucket_numbers = itertools.count()


@pytest.fixture
def s3_bucket(s3_server: SeaweedS3, request: pytest.FixtureRequest) -> str:
    """A new empty bucket for one test."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    return s3_server.create_bucket(f"t{next(_bucket_numbers)}-{stem}")


@pytest.fixture
def fault_proxy() -> Iterator[Callable[[str], FaultProxy]]:
    """Factory for fault-injecting proxies in front of an upstream URL; all stopped after the test."""
    proxies: list[FaultProxy] = []

    def make(upstream: str) -> FaultProxy:
        proxy = FaultProxy(upstream).start()
        proxies.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in proxies:
            proxy.stop()
