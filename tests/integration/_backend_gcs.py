"""The ``gcs`` backend of the Source contract suite: a GCSSource reading fake-gcs-server through a
FaultProxy that counts open connections (so "close releases the connection" is measured at the wire).

Plain objects (no pytest), like ``_backends.py``.
"""

from __future__ import annotations

import itertools

from _backends import Backend
from _servers import FaultProxy

from shardstream.sources.gcs import GCSSource
from shardstream.testing.fakegcs import FakeGCS

__all__ = ["gcs_backend"]

_names = itertools.count()


def gcs_backend(server: FakeGCS) -> Backend:
    """A GCSSource on a fresh bucket of ``server``, through a connection-counting proxy."""
    bucket = server.create_bucket(f"contracts-{next(_names)}")
    proxy = FaultProxy(server.endpoint_url).start()
    source = GCSSource(**{**server.storage_options, "endpoint_url": proxy.url, "retries": 3})

    def put(data: bytes) -> str:
        return server.put_object(bucket, f"obj-{next(_names)}.bin", data)

    return Backend(
        source,
        put,
        f"gs://{bucket}/missing.bin",
        released=lambda: proxy.open_connections == 0,
        cleanup=[source.close, proxy.stop],
    )
