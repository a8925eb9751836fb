"""Writing ``az://`` blobs: a block blob streamed block by block and committed on close only.

Each ``block_size`` bytes written become one Put Block (``?comp=block&blockid=...``); ``close()``
sends Put Block List, which makes the blob visible at once with exactly those blocks. A blob
smaller than one block is sent with one Put Blob at close. Nothing is visible before close:
:meth:`AzureWriter.abort` (or an exception leaving the ``with`` block) sends nothing more and
commits nothing. Its uploaded blocks stay uncommitted, invisible to readers and listings, and
the service discards uncommitted blocks after a week, so there is nothing to delete.

Block ids are ``base64("<16 random hex digits>-<8-digit number>")``: all of one length (as the
service requires), and distinct between two writers of the same blob. A block cut by the network
is uploaded again under the same id (Put Block is idempotent by id).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar
from xml.sax.saxutils import escape

from ..errors import redact_url
from .base import PartedWriter

__all__ = ["AzureWriter", "BlockTarget"]

_Bytes = bytes | bytearray | memoryview
_T = TypeVar("_T")


class BlockTarget(Protocol):
    """What an :class:`AzureWriter` needs of its source (an :class:`~.azure.AzureSource`)."""

    @property
    def block_size(self) -> int:
        """Bytes per uploaded block."""
        ...

    def exchange(
        self,
        method: str,
        url: str,
        *,
        action: str,
        headers: Mapping[str, str] | None = None,
        query: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        container: bool = False,
    ) -> object:
        """One request, whole answer read; raises shardstream errors."""
        ...

    def retrying(self, call: Callable[[], _T], url: str) -> _T:
        """``call()`` retried on transient errors."""
        ...


class AzureWriter(PartedWriter):
    """A write-only stream that uploads ``url`` as a block blob, visible on ``close()`` only.

    At most one block is held in memory.

    Args:
        source: the source whose credentials and connections the requests use.
        url: ``az://container/blob``.
    """

    def __init__(self, source: BlockTarget, url: str) -> None:
        super().__init__()
        self._source = source
        self.url = url
        self._buffer = bytearray()
        self._blocks: list[str] = []
        self._stem = os.urandom(8).hex()
        self.size = 0

    def __repr__(self) -> str:
        return f"AzureWriter({redact_url(self.url)!r}, blocks={len(self._blocks)})"

    def _put(self, query: Sequence[tuple[str, str]], body: bytes, headers: Mapping[str, str]) -> None:
        source = self._source
        source.retrying(
            lambda: source.exchange("PUT", self.url, action="write", query=query, body=body, headers=headers),
            self.url,
        )

    def _put_block(self, data: bytes) -> None:
        block = base64.b64encode(f"{self._stem}-{len(self._blocks):08d}".encode()).decode()
        self._put([("comp", "block"), ("blockid", block)], data, {})
        self._blocks.append(block)

    def _part_size(self) -> int:
        return self._source.block_size

    def _send_part(self, size: int) -> None:
        with memoryview(self._buffer) as whole:
            chunk = bytes(whole[:size])  # no export left to block the del below
        self._put_block(chunk)
        del self._buffer[:size]

    def _finish(self) -> None:
        """Upload what is buffered and commit the blocks; the blob is visible afterwards."""
        if not self._blocks:
            self._put([], bytes(self._buffer), {"x-ms-blob-type": "BlockBlob"})
            return
        if self._buffer:
            self._put_block(bytes(self._buffer))
        listing = "".join(f"<Latest>{escape(b)}</Latest>" for b in self._blocks)
        body = f'<?xml version="1.0" encoding="utf-8"?><BlockList>{listing}</BlockList>'
        self._put([("comp", "blocklist")], body.encode(), {"Content-Type": "application/xml"})

    def abort(self) -> None:
        """Discard everything written: nothing is committed (uploaded blocks stay uncommitted
        and are discarded by the service)."""
        self._buffer = bytearray()
        self._blocks = []
        if not self.closed:
            self._close_unpublished()
