"""The fsspec fallback source (``ftp://`` through fsspec) as a backend of the Source contract suite."""

from __future__ import annotations

import itertools

from _backends import Backend
from _ftp import FTPServer

from shardstream.errors import ShardNotFoundError
from shardstream.sources import get_source

__all__ = ["fsspec_backend"]

_names = itertools.count()


def fsspec_backend(server: FTPServer) -> Backend:
    """The fallback source for ``ftp://``, reading a real FTP server."""
    source = get_source(server.url("x"), server.storage_options)

    def put(data: bytes) -> str:
        name = f"contracts/obj-{next(_names)}.bin"
        path = server.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return server.url(name)

    return Backend(
        source,
        put,
        server.url("contracts/missing.bin"),
        released=lambda: server.data_connections() == 0,
        missing_error=ShardNotFoundError,
    )
