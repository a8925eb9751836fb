"""The reading stage: shard dicts in, samples out, through a format and a source.

Its state is the shard being read (its number in this epoch's shard list) and the byte offset
where the next sample starts, so a restored reader opens that shard with a ranged read at that
offset and goes on: no sample is read twice or skipped. Positions of single samples
(``tell``/``item_at``) are ``[shard number, byte offset]``.

Read-ahead: while a shard is read, the next one is already taken from the shard list and, when
the source can (``open_ahead``: the object stores and ``http(s)://`` through the default source, not
through the shard cache), opened in a thread, so the next request's round trip passes while this
shard is parsed. The shard taken ahead is part of the state (``"ahead"``): the shard list's own
state is already past it, and a restored reader reads it next, from its start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Protocol

from ..errors import StateError, redact_url
from ..handlers import Handler, reraise_exception
from ..pipeline.base import Node, RunContext, Stage, StateDict
from ..sources import SchemeRouter, Source
from ..tar.grouping import Cursor
from ..tar.samples import TarFormat
from ._reading import Pin, ReadingNode, pin_of, pinned, verified
from .runs import UnitsNode

__all__ = ["ReadShards", "ShardFormat", "ahead_url", "open_ahead"]

log = logging.getLogger(__name__)


class ShardFormat(Protocol):
    """What a format provides to the reading stage and the planner (``TarFormat`` is one)."""

    def samples(
        self, source: Source, url: str, *, offset: int = 0, cursor: Cursor | None = None, stream: Any = None
    ) -> Iterator[dict[str, Any]]: ...

    def sample_at(self, source: Source, url: str, offset: int) -> dict[str, Any]: ...

    def count(self, source: Source, url: str) -> int: ...


class _ReadNode(ReadingNode):
    stage: ReadShards

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
        self._pin = pin_of(state) if self.cursor.next >= 0 else None
        self._listed = upstream.indexable
        # The next shard, already taken from upstream (read-ahead), and its open in progress.
        self._next: Any = ahead_url(state, upstream)
        self._opening: Any = None  # a pending open (sources._ahead.PendingOpen) of ``_next``
        self.stopped = False  # the error policy ended the stream
        self.tell = self._tell
        self._it = self._run()

    def _tell(self) -> tuple[int, int]:
        return self.shard, self.cursor.start

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
        state: StateDict = {"shard": self.shard}
        if self.url is not None and self.cursor.next >= 0:
            if not self._listed:  # a listed upstream restores to the same list: the number is enough
                state["url"] = self.url
            state["offset"] = self.cursor.next
            pinned(state, self.cursor)
        if self._next is not None:
            state["ahead"] = True if self._listed else _url(self._next)
        return state

    def _run(self) -> Iterator[dict[str, Any]]:
        try:
            if self.url is not None and self.cursor.next >= 0:
                pin, self._pin = self._pin, None
                yield from self._read(self.url, None, self.cursor.next, pin=pin)
            assert self.upstream is not None
            shards = iter(self.upstream)
            log_shards = self.stage.log_shards
            while not self.stopped:
                shard = self._next if self._next is not None else next(shards, _END)
                if shard is _END:
                    return
                opening, self._opening, self._next = self._opening, None, None
                self.shard += 1
                if self.stage.read_ahead:
                    self._take_next(shards)
                if log_shards:
                    log.info("opening shard %s", redact_url(_url(shard)))
                stream = shard.get("stream") if isinstance(shard, dict) else None
                yield from self._read(_url(shard), stream, 0, opening)
        finally:
            # An early stop: the shard taken ahead is not read. Its open is cancelled, and a
            # stream that came with it from upstream (a ``url_opener`` stage) is closed.
            if self._opening is not None:
                self._opening.cancel()
                self._opening = None
            stream = self._next.get("stream") if isinstance(self._next, dict) else None
            if stream is not None:
                stream.close()

    def _take_next(self, shards: Iterator[Any]) -> None:
        """Take the shard after the current one from upstream now, and start opening it when the
        source can (a shard that comes with its own stream, or a local one, is not opened)."""
        shard = next(shards, _END)
        if shard is _END:
            return
        self._next = shard
        if not (isinstance(shard, dict) and shard.get("stream") is not None):
            self._opening = open_ahead(self.stage, _url(shard))

    def _read(
        self, url: str, stream: Any, offset: int, opening: Any = None, pin: Pin | None = None
    ) -> Iterator[dict[str, Any]]:
        stage = self.stage
        self.url = url
        self.cursor.start = self.cursor.next = offset
        try:
            if opening is not None:
                stream = opening.result()  # the open's error, if any, is handled below
            if pin is None:
                yield from stage.format.samples(
                    stage.source, url, offset=offset, cursor=self.cursor, stream=stream
                )
            else:  # a restore: read from the sample before the saved offset and check it
                samples = stage.format.samples(stage.source, url, offset=pin[1], cursor=self.cursor)
                yield from verified(samples, self.cursor, url, pin, offset)
        except StateError:
            raise  # not the shard's fault: no error policy skips it
        except Exception as exn:
            # A tar stream cannot be resynchronised after a bad header: the rest of the shard
            # is skipped (the samples already read are kept) and the skip is counted.
            go_on = stage.handler(exn)
            stage.stats.record(exn)
            if not go_on:
                self.stopped = True
        self.url = None


_END = object()


def ahead_url(state: StateDict, upstream: Node) -> str | None:
    """The URL of the shard a saved reader state had taken ahead of its turn, or ``None``
    (``"ahead"`` is ``True`` for a shard list the reader can index, else the URL itself)."""
    ahead = state.get("ahead")
    if ahead is None:
        return None
    return _url(upstream.item(int(state.get("shard", -1)) + 1)) if ahead is True else str(ahead)


def open_ahead(stage: Any, url: str) -> Any:
    """Start opening all of shard ``url`` for ``stage`` (a reading stage: ``format``, ``source``,
    ``read_ahead``) now, in a thread: a pending open (``result()``, ``cancel()``). ``None`` when
    ``read_ahead`` is off, where the source offers no ``open_ahead`` (local files, the shard
    cache, custom sources), or for a format other than tar (which may open something else than
    the URL's bytes)."""
    start = getattr(stage.source, "open_ahead", None)
    if start is None or not stage.read_ahead or not isinstance(stage.format, TarFormat):
        return None
    return start(url)


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
        read_ahead: open the next shard while this one is read (default True), where the
            source offers ``open_ahead`` (object stores and ``http(s)://`` through the default
            source; not through the shard cache or a custom source). The next shard's request
            round trip then passes while this shard is parsed.
    """

    kind = "read"
    label = "read"

    def __init__(
        self,
        format: ShardFormat | None = None,  # noqa: A002 - the natural name
        source: Source | None = None,
        handler: Handler = reraise_exception,
        *,
        log_shards: bool = False,
        read_ahead: bool = True,
    ) -> None:
        self.log_shards = log_shards
        self.read_ahead = read_ahead
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
