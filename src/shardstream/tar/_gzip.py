"""Streaming gzip decompression for tar shards, inflating at most one buffer at a time."""

from __future__ import annotations

import zlib
from typing import Protocol

__all__ = ["GzipReader", "Readable"]


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class GzipReader:
    """Decompresses a gzip stream (possibly several concatenated members) on demand.

    ``read(n)`` returns at most ``n`` bytes (empty only at the end). Each step inflates at most
    ``blocksize`` bytes: deflate expands ~1000:1, so 1 MiB of input could become 1 GiB at once.
    """

    def __init__(self, raw: Readable, first: bytes, blocksize: int) -> None:
        self._raw = raw
        self._pending = first
        self._blocksize = blocksize
        self._zobj = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._out = b""
        self._out_pos = 0
        self._eof = False

    def _decompress_more(self) -> bool:
        while not self._eof:
            zobj = self._zobj
            if zobj.unconsumed_tail:
                data = zobj.unconsumed_tail
            elif self._pending:
                data, self._pending = self._pending, b""
            else:
                data = self._raw.read(self._blocksize)
            if not data and zobj.eof:
                self._eof = True
                break
            out = zobj.decompress(data, self._blocksize)
            if zobj.eof and zobj.unused_data:
                # Concatenated gzip members: start a new decompressor on the remainder.
                self._pending = zobj.unused_data
                self._zobj = zlib.decompressobj(16 + zlib.MAX_WBITS)
            if out:
                self._out, self._out_pos = out, 0
                return True
            if not data and not zobj.eof:
                raise EOFError("compressed stream ended before the end-of-stream marker")
        return False

    def read(self, n: int = -1) -> bytes:
        if self._out_pos >= len(self._out) and not self._decompress_more():
            return b""
        end = len(self._out) if n < 0 else self._out_pos + n
        chunk = self._out[self._out_pos : end]
        self._out_pos += len(chunk)
        return chunk
