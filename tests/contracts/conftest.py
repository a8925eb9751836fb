"""Fixtures of the Source contract suite: ``backend`` runs each test against every source.

The cloud stores run against their emulators (fake-gcs-server, Azurite, the Hub stand-in in
``shardstream.testing``); the fsspec fallback against a real FTP server (pyftpdlib).

The network backends use the same loopback servers as the integration tests (``_servers.py``):
an HTTP file server and SeaweedFS, each behind a :class:`FaultProxy` that counts open
connections, so "close releases the connection" is measured at the wire. Servers start once per
session and only when a case needs them (``s3`` cases carry the ``s3`` marker).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from _backends import (  # noqa: E402
    Backend,
    cached_backend,
    file_backend,
    http_backend,
    memory_backend,
    pipe_backend,
    s3_backend,
)

from shardstream.sources import SchemeRouter  # noqa: E402
from shardstream.sources.http import HTTPSource  # noqa: E402

BACKENDS = [
    "file",
    "memory",
    "http",
    pytest.param("s3", marks=pytest.mark.s3),
    "gcs",
    "azure",
    "hf",
    "fsspec",
    "pipe",
    "router-http",
    "cached-http-cold",
    "cached-http-warm",
    "cached-file",
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each source of the contract suite in turn."""
    kind: str = request.param
    if kind == "file":
        made = file_backend(tmp_path)
    elif kind == "memory":
        made = memory_backend()
    elif kind in ("http", "router-http"):
        source = SchemeRouter() if kind == "router-http" else HTTPSource(retries=3)
        made = http_backend(request.getfixturevalue("http_server"), source)
    elif kind == "s3":
        made = s3_backend(request.getfixturevalue("s3_server"))
    elif kind == "gcs":
        from _backend_gcs import gcs_backend

        made = gcs_backend(request.getfixturevalue("gcs_server"))
    elif kind == "azure":
        from _backend_azure import azure_backend

        made = azure_backend(request.getfixturevalue("azurite_server"))
    elif kind == "hf":
        from _backend_hf import hf_backend

        made = hf_backend(request.getfixturevalue("hub_server"))
    elif kind == "fsspec":
        from _backend_fsspec import fsspec_backend

        made = fsspec_backend(request.getfixturevalue("ftp_server"))
    elif kind == "pipe":
        made = pipe_backend(tmp_path)
    elif kind.startswith("cached-http"):
        inner = http_backend(request.getfixturevalue("http_server"), SchemeRouter())
        made = cached_backend(inner, tmp_path / "cache", warm=kind.endswith("warm"))
    else:
        made = cached_backend(file_backend(tmp_path), tmp_path / "cache", warm=False)
    try:
        yield made
    finally:
        for cleanup in made.cleanup:
            cleanup()
