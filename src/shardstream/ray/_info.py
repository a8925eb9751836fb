"""ShardSetInfo: what a write produced (shard URLs, counts, sizes, the index's URL)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..tar.index import IndexEntry

__all__ = ["ShardSetInfo"]


@dataclass(frozen=True)
class ShardSetInfo:
    """The shards written to ``dst``, in shard-number order, and their ``_info.json``.

    Attributes:
        dst: the directory or URL prefix the shards were written under.
        index_url: the URL of the index written next to them.
        shards: one index entry per shard (``url`` is the basename; ``samples``, ``bytes``,
            ``offsets`` and ``sizes`` of every sample).
    """

    dst: str
    index_url: str
    shards: tuple[IndexEntry, ...]

    @property
    def urls(self) -> list[str]:
        """Full URLs of the shards."""
        return [f"{self.dst.rstrip('/')}/{entry['url']}" for entry in self.shards]

    @property
    def samples(self) -> int:
        """Samples in all shards."""
        return sum(entry["samples"] for entry in self.shards)

    @property
    def bytes(self) -> int:
        """Bytes in all shards."""
        return sum(entry["bytes"] for entry in self.shards)

    @property
    def spec(self) -> str:
        """A brace spec naming every shard (``dst/shard-{000000..000009}.tar``), for readers."""
        urls = self.urls
        if len(urls) <= 1:
            return urls[0] if urls else ""
        first, last = urls[0], urls[-1]
        stem, _, number = first.removesuffix(".tar").rpartition("-")
        last_number = last.removesuffix(".tar").rpartition("-")[2]
        return f"{stem}-{{{number}..{last_number}}}.tar"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``--json`` output (offsets and sizes left out)."""
        return {
            "dst": self.dst,
            "index": self.index_url,
            "spec": self.spec,
            "shards": [
                {"url": url, "samples": e["samples"], "bytes": e["bytes"]}
                for url, e in zip(self.urls, self.shards, strict=True)
            ],
            "samples": self.samples,
            "bytes": self.bytes,
        }

    def __repr__(self) -> str:
        return (
            f"ShardSetInfo(spec={self.spec!r}, shards={len(self.shards)}, samples={self.samples}, "
            f"bytes={self.bytes})"
        )
