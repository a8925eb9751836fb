"""What telemetry learns from the I/O seam: a timed source for the reading stage, and retries.

The reading node of an instrumented pass reads through :class:`TimedSource` (installed in a
copy of its stage, never in the user's), whose opens and reads add to the recorder's I/O time,
byte and open counts. Retries and throttles are counted where they happen, by the sources and
the fetch engine (:data:`shardstream.sources.FAULTS`), at every log level.
"""

from __future__ import annotations

import time
from typing import Any, BinaryIO, Protocol

from ..faults import FAULTS, FaultCounts

__all__ = ["IoCounters", "TimedSource", "retry_counter"]


class IoCounters(Protocol):
    """What the timed source adds to: the recorder's I/O time, bytes and opens."""

    io_ns: int
    io_bytes: int
    opens: int


class TimedStream:
    """A source stream whose ``read``/``readinto`` calls count as I/O time and bytes."""

    def __init__(self, stream: BinaryIO, rec: IoCounters) -> None:
        self._stream, self._rec = stream, rec

    def readinto(self, buffer: Any) -> int:
        t = time.perf_counter_ns()
        n = self._stream.readinto(buffer)  # type: ignore[attr-defined]
        self._rec.io_ns += time.perf_counter_ns() - t
        self._rec.io_bytes += n or 0
        return int(n or 0)

    def read(self, size: int = -1) -> bytes:
        t = time.perf_counter_ns()
        data = self._stream.read(size)
        self._rec.io_ns += time.perf_counter_ns() - t
        self._rec.io_bytes += len(data)
        return data

    def close(self) -> None:
        self._stream.close()

    def __getattr__(self, name: str) -> Any:  # local_path, size, fileno, ... of the real stream
        return getattr(self._stream, name)


class TimedSource:
    """A source whose opens and reads count as I/O (installed in a reading node's stage copy)."""

    def __init__(self, inner: Any, rec: IoCounters) -> None:
        self._inner, self._rec = inner, rec

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> Any:
        t = time.perf_counter_ns()
        try:
            stream = self._inner.open(url, offset=offset, length=length)
        finally:
            self._rec.io_ns += time.perf_counter_ns() - t
        self._rec.opens += 1
        return TimedStream(stream, self._rec)

    def open_ahead(self, url: str) -> _TimedPending | None:
        """The inner source's open started ahead (``None`` when it has none): the time the reading
        stage waits for it in ``result`` counts as I/O, not the open's own time in its thread."""
        start = getattr(self._inner, "open_ahead", None)
        pending = start(url) if start is not None else None
        return None if pending is None else _TimedPending(pending, self._rec)

    def __getattr__(self, name: str) -> Any:  # stat, close, stats, ...
        return getattr(self._inner, name)


class _TimedPending:
    """A pending open (``sources._ahead.PendingOpen``) whose stream is timed like ``TimedSource``'s."""

    def __init__(self, pending: Any, rec: IoCounters) -> None:
        self._pending, self._rec = pending, rec

    def result(self) -> TimedStream:
        t = time.perf_counter_ns()
        try:
            stream = self._pending.result()
        finally:
            self._rec.io_ns += time.perf_counter_ns() - t
        self._rec.opens += 1
        return TimedStream(stream, self._rec)

    def cancel(self) -> None:
        self._pending.cancel()


def retry_counter() -> FaultCounts:
    """This process's retry and throttle counts (:data:`shardstream.sources.FAULTS`), counted
    where the retries happen: a recorder keeps the counts at its start as a baseline."""
    return FAULTS
