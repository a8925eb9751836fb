"""ShardWriter: write samples into a numbered series of tar shards, rolling over by count and size.

Unlike WebDataset, which checks the size *before* each write and so overshoots ``maxsize`` by up
to one sample, this writer encodes a sample first and starts a new shard when the sample would
push the current one past ``maxsize``. A shard is larger than ``maxsize`` only when it holds a
single sample that alone is larger. Sizes are counted on the uncompressed tar stream (the
compressed size is not known until the compressor flushes); compression almost always shrinks
the stream, so compressed shards also stay within ``maxsize`` in practice.

When it closes, the writer records each shard's sample count, size and samples per extension in
``_info.json`` next to the shards (what ``shardstream ls`` shows without reading the shards), and
each sample's byte offset and size in the shard's sidecar under ``_offsets/``
(see :mod:`shardstream.tar.index`), so every dataset it writes can be read at random
(``ShardDataset``) without an indexing pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import IO, Any

from ..errors import ConfigurationError, SourceError, redact_url
from .index import IndexEntry, write_index
from .writer import END_OF_ARCHIVE, Abortable, TarWriter

__all__ = ["ShardWriter"]

log = logging.getLogger(__name__)


def _split_url(url: str) -> tuple[str, str]:
    head, sep, base = url.rpartition("/")
    return (head + sep if sep else ""), base


class ShardWriter:
    """Writes samples to shards named ``pattern % shard_number`` (drop-in for WebDataset's).

    Args:
        pattern: shard name pattern with one ``%`` placeholder, e.g. ``"out/train-%06d.tar"``; a
            local path or a writable URL.
        maxcount: most samples per shard. Default 100000.
        maxsize: most bytes per shard (uncompressed tar bytes). Default 3e9.
        post: called with each finished shard's name after it is closed (e.g. to upload it).
        start_shard: number of the first shard. Default 0.
        verbose: log each new shard at INFO when true, else at DEBUG. Default 0.
        opener: called with a shard name, returns a writable binary stream to use instead of
            opening the name; the writer closes that stream when the shard is finished.
        index: write ``_info.json`` next to the shards on :meth:`close`. Default True; skipped
            when ``opener`` is given (the names may not be URLs).
        **kw: passed to :class:`TarWriter` (``encoder``, ``compress``, ``mtime``, ``allow_pickle``,
            ``storage_options``, ...).
    """

    def __init__(
        self,
        pattern: str,
        maxcount: int = 100000,
        maxsize: float = 3e9,
        post: Callable[[str], Any] | None = None,
        start_shard: int = 0,
        verbose: int = 0,
        opener: Callable[[str], IO[bytes]] | None = None,
        *,
        index: bool = True,
        **kw: Any,
    ) -> None:
        if maxcount < 1:
            raise ConfigurationError(f"maxcount={maxcount} must be at least 1")
        if maxsize <= END_OF_ARCHIVE:
            raise ConfigurationError(
                f"maxsize={maxsize} is too small; a tar shard needs more than {END_OF_ARCHIVE} bytes"
            )
        try:
            pattern % start_shard
        except TypeError as exc:
            raise ConfigurationError(
                f"pattern={pattern!r} needs exactly one %-placeholder for the shard number, "
                "e.g. 'train-%06d.tar'"
            ) from exc
        self.pattern = pattern
        self.maxcount = maxcount
        self.maxsize = maxsize
        self.post = post
        self.verbose = verbose
        self.opener = opener
        self.kw = kw
        self.index = index and opener is None
        self.shard = start_shard
        self.total = 0
        self.count = 0
        self.size = 0
        self.fname: str | None = None
        self.tarstream: TarWriter | None = None
        self.shards: list[IndexEntry] = []
        self._stream: IO[bytes] | None = None
        self._closed = False
        self.next_stream()

    def next_stream(self) -> None:
        """Finish the current shard and open the next one."""
        self.finish()
        self.fname = self.pattern % self.shard
        log.log(
            logging.INFO if self.verbose else logging.DEBUG,
            "writing shard %s (%d samples so far)",
            self.fname,
            self.total,
        )
        self.shard += 1
        if self.opener is not None:
            self._stream = self.opener(self.fname)
            self.tarstream = TarWriter(self._stream, **self.kw)
        else:
            self.tarstream = TarWriter(self.fname, **self.kw)
        self.count = 0
        self.size = END_OF_ARCHIVE

    def write(self, obj: Mapping[str, Any]) -> int:
        """Write one sample, starting a new shard first if this one is full.

        Returns:
            Bytes the sample added to its shard.
        """
        if self._closed:
            raise ConfigurationError(
                f"ShardWriter({self.pattern!r}) is closed; create a new one to write more"
            )
        if self.tarstream is None:
            self.next_stream()
        assert self.tarstream is not None
        encoded = self.tarstream.encode(obj)
        if self.count > 0 and (self.count >= self.maxcount or self.size + encoded.nbytes > self.maxsize):
            self.next_stream()
            assert self.tarstream is not None
        if self.count == 0 and self.size + encoded.nbytes > self.maxsize:
            log.warning(
                "sample %r alone takes %d bytes, more than maxsize=%d; shard %s will exceed maxsize",
                encoded.key,
                encoded.nbytes + END_OF_ARCHIVE,
                int(self.maxsize),
                redact_url(self.fname),
            )
        written = self.tarstream.write_encoded(encoded)
        self.count += 1
        self.total += 1
        self.size += written
        return written

    def finish(self) -> None:
        """Close the current shard, record it for the index and call ``post`` (use :meth:`close`)."""
        if self.tarstream is None:
            return
        writer, self.tarstream = self.tarstream, None
        writer.close()
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        assert self.fname is not None
        self.shards.append(writer.index_entry(_split_url(self.fname)[1]))
        if callable(self.post):
            self.post(self.fname)

    def close(self) -> None:
        """Finish the last shard and write the index. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.finish()
        if self.index and self.shards and self.fname is not None:
            directory = _split_url(self.fname)[0]
            storage_options = self.kw.get("storage_options")
            try:
                write_index(directory, self.shards, storage_options=storage_options)
            except (ConfigurationError, SourceError) as exc:
                log.warning("could not write the shard index next to %s: %s", redact_url(self.pattern), exc)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()
        self.close()

    def abort(self) -> None:
        """Discard the shard being written (it is never published); the shards finished before
        it stay, and :meth:`close` still indexes them."""
        writer, self.tarstream = self.tarstream, None
        if writer is not None:
            writer.abort()
        stream, self._stream = self._stream, None
        if isinstance(stream, Abortable):
            stream.abort()
        elif stream is not None:
            stream.close()
