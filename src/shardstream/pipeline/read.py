"""The reading stage: shard dicts in, samples out, through a format and a source.

Its state is the shard being read (its number in this epoch's shard list) and the byte offset
where the next sample starts, so a restored reader opens that shard with a ranged read at that
offset and goes on: no sample is read twice or skipped. Positions of single samples
(``tell``/``item_at``) are ``[shard number, byte offset]``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Protocol

from ..errors import StateError
from ..handlers import Handler, reraise_exception
from ..sources import SchemeRouter, Source
from ..tar.grouping import Cursor
from ..tar.samples import TarFormat
from ._units import UnitsNode
from .base import Node, RunContext, Stage, StateDict

__all__ = ["ReadShards", "ShardFormat"]

log = logging.getLogger(__name__)


class ShardFormat(Protocol):
    """What a format provides to the reading stage and the planner (``TarFormat`` is one)."""

    def samples(
        self, source: Source, url: str, *, offset: int = 0, cursor: Cursor | None = None, stream: Any = None
    ) -> Iterator[dict[str, Any]]: ...

    def sample_at(self, source: Source, url: str, offset: int) -> dict[str, Any]: ...

    def count(self, source: Source, url: str) -> int: ...


class _ReadNode(Node):
    def __init__(self, stage: ReadShards, upstream: Node, state: StateDict | None) -> None:
        super().__init__(upstream)
        state = state or {}
        self.stage = stage
        self.cursor = Cursor()
        self.shard = int(state.get("shard", -1))  # number of the shard being read, in upstream order
        self.url: str | None = state.get("url")
        if self.url is None and "offset" in state:  # the shard's URL comes from the shard list
            self.url = _url(upstream.item(self.shard))
        self.cursor.next = int(state.get("offset", -1)) if self.url is not None else -1
        self._listed = upstream.indexable
        self.stopped = False  # the error policy ended the stream
        self.tell = self._tell
        self._it = self._run()

    def _tell(self) -> list[Any]:
        return [self.shard, self.cursor.start]

    def item_at(self, token: Any) -> Any:
        shard, offset = token
        assert self.upstream is not None
        url = _url(self.upstream.item(int(shard)))
        return self.stage.format.sample_at(self.stage.source, url, int(offset))

    def items_at(self, tokens: list[Any]) -> list[Any]:
        """Many samples by position: one forward pass per shard, from its first wanted offset
        (a shuffle buffer of 1,000 samples spread over a few shards costs a few reads, not 1,000)."""
        assert self.upstream is not None
        wanted: dict[int, set[int]] = {}
        for shard, offset in tokens:
            wanted.setdefault(int(shard), set()).add(int(offset))
        found: dict[tuple[int, int], Any] = {}
        stage, cursor = self.stage, Cursor()
        for shard, offsets in wanted.items():
            url = _url(self.upstream.item(shard))
            samples = stage.format.samples(stage.source, url, offset=min(offsets), cursor=cursor)
            try:
                remaining = len(offsets)
                for sample in samples:
                    if cursor.start in offsets:
                        found[shard, cursor.start] = sample
                        remaining -= 1
                        if remaining == 0:
                            break
            finally:
                samples.close()  # type: ignore[attr-defined]
        missing = [t for t in tokens if (int(t[0]), int(t[1])) not in found]
        if missing:
            raise StateError(
                f"no sample starts at the saved positions {missing[:3]} (shard number, byte offset); "
                "the shards changed since the state was saved: restore with the same shards"
            )
        return [found[int(s), int(o)] for s, o in tokens]

    def state_dict(self) -> StateDict:
        if self.url is None or self.cursor.next < 0:
            return {"shard": self.shard}
        if self._listed:  # the shard list restores to the same list: its number is enough
            return {"shard": self.shard, "offset": self.cursor.next}
        return {"shard": self.shard, "url": self.url, "offset": self.cursor.next}

    def _run(self) -> Iterator[dict[str, Any]]:
        if self.url is not None and self.cursor.next >= 0:
            yield from self._read(self.url, None, self.cursor.next)
            if self.stopped:
                return
        assert self.upstream is not None
        log_shards = self.stage.log_shards
        for shard in self.upstream:
            if self.stopped:
                return
            self.shard += 1
            if log_shards:
                log.info("opening shard %s", _url(shard))
            stream = shard.get("stream") if isinstance(shard, dict) else None
            yield from self._read(_url(shard), stream, 0)

    def _read(self, url: str, stream: Any, offset: int) -> Iterator[dict[str, Any]]:
        stage = self.stage
        self.url = url
        self.cursor.start = self.cursor.next = offset
        try:
            yield from stage.format.samples(
                stage.source, url, offset=offset, cursor=self.cursor, stream=stream
            )
        except Exception as exn:
            # A tar stream cannot be resynchronised after a bad header: the rest of the shard
            # is skipped (the samples already read are kept) and the skip is counted.
            go_on = stage.handler(exn)
            stage.stats.record(exn)
            if not go_on:
                self.stopped = True
        self.url = None


def _url(shard: Any) -> str:
    return shard["url"] if isinstance(shard, dict) else str(shard)


class ReadShards(Stage):
    """Open each shard from upstream and yield its samples.

    Errors while opening or reading a shard go to ``handler``: with a skip policy the rest of
    that shard is skipped, the samples already read are kept, and ``stats.skipped`` counts it.

    Args:
        format: the shard format (default :class:`~shardstream.tar.TarFormat`).
        source: where shards are opened (default: every scheme, no cache, ``pipe:`` refused).
        handler: error policy (default: raise).
        log_shards: log every shard as it is opened (INFO).
    """

    def __init__(
        self,
        format: ShardFormat | None = None,  # noqa: A002 - the natural name
        source: Source | None = None,
        handler: Handler = reraise_exception,
        *,
        log_shards: bool = False,
    ) -> None:
        self.log_shards = log_shards
        self.format: ShardFormat = format if format is not None else TarFormat()
        self.source: Source = source if source is not None else SchemeRouter()
        self.handler = handler

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("ReadShards needs a shard list before it (e.g. SimpleShardList(urls))")
        if state and "units" in state:  # restored elastically: the runs of samples it was dealt
            return UnitsNode(self, state)
        return _ReadNode(self, upstream, state)

    def __repr__(self) -> str:
        return f"ReadShards({self.format!r}, source={type(self.source).__name__})"
