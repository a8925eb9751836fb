"""Where each part of a cache entry lives on disk.

Published shards sit at their readable names under the cache root, so ``ls`` shows only complete
files; all bookkeeping lives under ``.shardstream/`` (cache names never start with a dot)::

    <root>/s3/b1/train-000.tar                         complete, verified shards
    <root>/.shardstream/meta/s3/b1/train-000.tar.json  size, ETag, URL: marks the entry as ours
    <root>/.shardstream/lock/s3/b1/train-000.tar.lock  fill lock (owner JSON, heartbeat)
    <root>/.shardstream/lease/s3/b1/train-000.tar/     one file per live reader
    <root>/.shardstream/tmp/s3/b1/train-000.tar~<host>~<pid>~<start>~<token>.part
    <root>/.shardstream/evict.lock                     serialises eviction passes
    <root>/.shardstream/stats/<host>~<pid>~<start>.json  one process's hit/miss counters
"""

from __future__ import annotations

import os

from .owner import Owner

__all__ = ["BOOK", "Layout"]

BOOK = ".shardstream"


class Layout:
    """Paths of a cache rooted at ``root`` (names are ``/``-separated relative paths)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.book = os.path.join(self.root, BOOK)

    def _join(self, base: str, name: str, suffix: str = "") -> str:
        return os.path.join(base, *name.split("/")) + suffix

    def data(self, name: str) -> str:
        return self._join(self.root, name)

    def meta(self, name: str) -> str:
        return self._join(os.path.join(self.book, "meta"), name, ".json")

    def lock(self, name: str) -> str:
        return self._join(os.path.join(self.book, "lock"), name, ".lock")

    def leases(self, name: str) -> str:
        return self._join(os.path.join(self.book, "lease"), name)

    def tmp(self, name: str, owner: Owner) -> str:
        return self._join(os.path.join(self.book, "tmp"), name, f"~{owner.tag()}.part")

    @property
    def tmp_root(self) -> str:
        return os.path.join(self.book, "tmp")

    @property
    def counters(self) -> str:
        """Directory of per-process counter files (see :class:`.stats.CounterFile`)."""
        return os.path.join(self.book, "stats")

    @property
    def evict_lock(self) -> str:
        return os.path.join(self.book, "evict.lock")

    def name_of_tmp(self, path: str) -> tuple[str, str] | None:
        """``(entry name, owner tag)`` of a temp file path, or ``None`` if it is not one."""
        rel = os.path.relpath(path, self.tmp_root).replace(os.sep, "/")
        if not rel.endswith(".part") or "~" not in rel:
            return None
        name, _, tag = rel[: -len(".part")].partition("~")
        return name, tag
