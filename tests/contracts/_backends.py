"""Backends for the Source contract suite: each source under test, with how to put, miss and check.

Plain objects (no pytest), so other suites and benchmarks can build the same backends.
"""

from __future__ import annotations

import itertools
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from _servers import FaultProxy, HTTPFileServer, SeaweedS3

from shardstream.cache import CachedSource, ShardCache
from shardstream.errors import PipeCommandError, ShardNotFoundError, SourceError
from shardstream.sources import SchemeRouter, Source
from shardstream.sources.file import FileSource
from shardstream.sources.memory import MemorySource, memory_store
from shardstream.sources.pipe import PipeSource

__all__ = [
    "Backend",
    "cached_backend",
    "file_backend",
    "http_backend",
    "memory_backend",
    "open_fds",
    "pipe_backend",
    "s3_backend",
]

_names = itertools.count()


def open_fds() -> set[str]:
    """Open file descriptors of this process that are not sockets (files, pipes)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not target.startswith(("socket:", "anon_inode:")):
            found.add(f"{fd}->{target}")
    return found


def _no_local_path(url: str) -> str | None:
    return None


def _always() -> bool:
    return True


@dataclass
class Backend:
    """One source under test and what the suite needs to know about it.

    Attributes:
        source: the Source under test.
        put: stores bytes under a fresh name and returns its URL.
        missing: a URL of an object that does not exist.
        released: extra check, after a partly read stream was closed, that its resources are
            gone (connection, child process, lease); open non-socket fds are always checked.
        knows_size: ``stat`` reports the size (pipes cannot).
        missing_error: what opening (or, for pipes, reading) a missing object raises.
        missing_on_open: the error comes from ``open`` (pipes report it when the output ends).
        local_path: the ``local_path`` a stream of ``url`` must carry (``None``: none).
        cleanup: called after the test.
    """

    source: Source
    put: Callable[[bytes], str]
    missing: str
    released: Callable[[], bool] = _always
    knows_size: bool = True
    missing_error: type[SourceError] = ShardNotFoundError
    missing_on_open: bool = True
    local_path: Callable[[str], str | None] = _no_local_path
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)


def file_backend(root: Path) -> Backend:
    def put(data: bytes) -> str:
        path = root / f"obj-{next(_names)}.bin"
        path.write_bytes(data)
        return str(path)

    return Backend(FileSource(), put, str(root / "missing.bin"), local_path=lambda url: url)


def memory_backend() -> Backend:
    urls: list[str] = []

    def put(data: bytes) -> str:
        url = f"memory://contracts/obj-{next(_names)}.bin"
        memory_store[url] = data
        urls.append(url)
        return url

    def cleanup() -> None:
        for url in urls:
            memory_store.pop(url, None)

    return Backend(MemorySource(), put, "memory://contracts/missing.bin", cleanup=[cleanup])


def http_backend(server: HTTPFileServer, source: Source) -> Backend:
    """``source`` reading from ``server`` through a proxy that counts open connections."""
    proxy = FaultProxy(server.url).start()

    def put(data: bytes) -> str:
        path = f"contracts/obj-{next(_names)}.bin"
        server.write(path, data)
        return f"{proxy.url}/{path}"

    return Backend(
        source,
        put,
        f"{proxy.url}/contracts/missing.bin",
        released=lambda: proxy.open_connections == 0,
        cleanup=[source.close, proxy.stop],
    )


def s3_backend(server: SeaweedS3) -> Backend:
    """An S3Source reading SeaweedFS through a proxy that counts open connections."""
    from shardstream.sources.s3 import S3Source

    bucket = server.create_bucket(f"contracts-{next(_names)}")
    proxy = FaultProxy(server.endpoint_url).start()
    source = S3Source(**server.options_for(endpoint_url=proxy.url, retries=3))

    def put(data: bytes) -> str:
        url: str = server.put_object(bucket, f"obj-{next(_names)}.bin", data)
        return url

    return Backend(
        source,
        put,
        f"s3://{bucket}/missing.bin",
        released=lambda: proxy.open_connections == 0,
        cleanup=[source.close, proxy.stop],
    )


def pipe_backend(root: Path) -> Backend:
    known = {p.pid for p in psutil.Process().children(recursive=True)}  # session servers

    def put(data: bytes) -> str:
        path = root / f"obj-{next(_names)}.bin"
        path.write_bytes(data)
        return f"pipe:cat {shlex.quote(str(path))}"

    def released() -> bool:
        return not [p for p in psutil.Process().children(recursive=True) if p.pid not in known]

    return Backend(
        PipeSource(),
        put,
        f"pipe:cat {shlex.quote(str(root / 'missing.bin'))}",
        released=released,
        knows_size=False,
        missing_error=PipeCommandError,
        missing_on_open=False,
    )


def cached_backend(inner: Backend, cache_dir: Path, *, warm: bool) -> Backend:
    """A CachedSource over a SchemeRouter, storing through ``inner`` (whose URLs it reads)."""
    cache = ShardCache(str(cache_dir))
    source = CachedSource(SchemeRouter(), cache)

    def put(data: bytes) -> str:
        url = inner.put(data)
        if warm:  # fill the entry now (EOF comes after it is published): every open is a hit
            with source.open(url) as stream:
                assert stream.read() == data
        return url

    def released() -> bool:
        leases = cache_dir / ".shardstream" / "lease"
        return not [p for p in leases.rglob("*") if p.is_file()]

    def local_path(url: str) -> str | None:
        local = inner.local_path(url)  # local files are read in place, never copied
        return local if local is not None else cache.path_for(url)

    return Backend(
        source,
        put,
        inner.missing,
        released=released,
        local_path=local_path,
        cleanup=inner.cleanup,
        extras={"cache": cache},
    )
