"""The shard-reading stage: ``{"url": ...}`` dicts in, samples out (open, read tar, group)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, BinaryIO

from ..pipeline.base import Stage
from ..handlers import Handler, reraise_exception
from ..sources import open_url, scheme_of
from ..sources.file import local_path
from .grouping import group_samples
from .reader import DEFAULT_BLOCKSIZE, iter_members

__all__ = ["Opener", "TarSamples", "tarfile_samples", "tarfile_to_samples"]

log = logging.getLogger(__name__)

#: Opens a shard URL: returns the stream and, when the bytes are in a local file, its path.
Opener = Callable[[str], tuple[BinaryIO, str | None]]


class TarSamples(Stage):
    """Open each shard, read its tar members and group them into samples.

    Errors while opening or reading a shard go to ``handler``: with a skip policy the rest of
    that shard is skipped (a tar stream cannot be resynchronised after a bad header), the
    samples already read are kept, and ``stats.skipped`` counts the shard.

    Args:
        handler: error policy (default: raise).
        select_files / rename_files: member-name hooks, as in WebDataset.
        storage_options: options for the URL's source (endpoint, credentials, ...).
        allow_pipe: allow ``pipe:`` URLs (they run shell commands).
        opener: replaces the default opener (the shard cache plugs in here).
        blocksize: bytes per read from the stream.
    """

    def __init__(
        self,
        handler: Handler = reraise_exception,
        select_files: Callable[[str], bool] | None = None,
        rename_files: Callable[[str], str] | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        allow_pipe: bool = False,
        opener: Opener | None = None,
        blocksize: int = DEFAULT_BLOCKSIZE,
    ) -> None:
        self.handler = handler
        self.select_files = select_files
        self.rename_files = rename_files
        self.storage_options = dict(storage_options or {})
        self.allow_pipe = allow_pipe
        self.opener = opener
        self.blocksize = blocksize

    def open(self, url: str) -> tuple[BinaryIO, str | None]:
        if self.opener is not None:
            return self.opener(url)
        stream = open_url(url, storage_options=self.storage_options, allow_pipe=self.allow_pipe)
        return stream, (local_path(url) if scheme_of(url) == "file" else None)

    def run(self, src: Iterator[Any]) -> Iterator[dict[str, Any]]:
        for shard in src:
            url = shard["url"] if isinstance(shard, dict) else str(shard)
            try:
                if isinstance(shard, dict) and shard.get("stream") is not None:
                    stream, path = shard["stream"], shard.get("local_path")
                else:
                    stream, path = self.open(url)
            except Exception as exn:
                if self.handle(self.handler, exn):
                    continue
                break
            try:
                yield from group_samples(
                    iter_members(stream, url, blocksize=self.blocksize),
                    url,
                    local_path=path,
                    select_files=self.select_files,
                    rename_files=self.rename_files,
                )
            except Exception as exn:
                if self.handle(self.handler, exn):
                    continue
                break
            finally:
                # Closed here, not in __del__: an early stop (break, slice, worker shutdown)
                # closes this generator, which releases the stream at once.
                stream.close()


def tarfile_to_samples(
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    **kw: Any,
) -> TarSamples:
    """Stage factory: ``wds.tarfile_to_samples()`` turns shard dicts into samples."""
    return TarSamples(handler, select_files, rename_files, **kw)


def tarfile_samples(
    src: Iterable[Any],
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Function form of :func:`tarfile_to_samples` (WebDataset's ``tarfile_samples``)."""
    return TarSamples(handler, select_files, rename_files)(src)
