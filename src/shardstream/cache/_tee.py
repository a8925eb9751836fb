"""Stream while filling: a thread copies the source into the temp file; readers follow it.

The consumer of a cold shard reads the temp file right behind the writer, so it gets the first
samples as soon as their bytes arrive, and the download runs at network speed rather than at the
consumer's pace (other processes waiting for the shard are not held up by a slow training loop).
If the consumer stops early, the copy still completes and is published. An error of the copy
(the source failed, the size did not match) travels to the reader as a value and is raised
where the reader reaches the missing bytes; the reader sees end-of-file only after the whole
shard was verified, never a silently truncated shard.

The copy thread is fork-aware (see :mod:`shardstream.forks`): it starts through the
fork gate and writes, hashes and publishes inside busy regions, so a DataLoader fork finds it
waiting in a network read or parked at the gate, never holding a lock or mid-publish.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from ..forks import gate

__all__ = ["Fill", "TeeReader"]

log = logging.getLogger("shardstream.cache")

_FIRST_CHUNK = 64 << 10  # small first reads: the first sample is readable sooner
_MAX_CHUNK = 1 << 20


class Fill:
    """Copies ``src`` into the open file ``fd`` on a daemon thread.

    Args:
        src: the source stream (closed when the copy ends).
        fd: a writable file descriptor of the temp file (closed when the copy ends).
        label: for the thread name and logs.
        finish: called with ``(bytes written, md5 hex or None)`` after the last byte; it verifies
            and publishes, and raises to report bad data to the readers.
        cleanup: called after a failure (after ``fd`` is closed) to remove the temp file.
        md5: also compute the MD5 of the data (for ETag checks).
    """

    def __init__(
        self,
        src: BinaryIO,
        fd: int,
        *,
        label: str,
        finish: Callable[[int, str | None], None],
        cleanup: Callable[[], None],
        md5: bool = False,
    ) -> None:
        self._src = src
        self._fd = fd
        self._finish = finish
        self._cleanup = cleanup
        self._md5 = hashlib.md5(usedforsecurity=False) if md5 else None
        self.cond = threading.Condition()
        self.written = 0
        self.done = False
        self.error: BaseException | None = None
        self._label = label

    def start(self) -> Fill:
        """Start the copy on a daemon thread (through the fork gate, see ``shardstream.forks``)."""
        gate.start(self._run, name=f"shardstream-fill {self._label}")
        return self

    def _copy(self) -> None:
        buf = bytearray(_MAX_CHUNK)
        size = _FIRST_CHUNK
        readinto: Callable[[Any], int] | None = getattr(self._src, "readinto", None)
        while True:
            view = memoryview(buf)[:size]
            if readinto is not None:
                n = readinto(view) or 0
            else:
                data = self._src.read(size)
                n = len(data)
                view[:n] = data
            if n == 0:
                return
            with gate.busy():  # a fork waits for this, not for the network read above
                chunk = view[:n]
                while chunk:
                    chunk = chunk[os.write(self._fd, chunk) :]
                if self._md5 is not None:
                    self._md5.update(view[:n])
                with self.cond:
                    self.written += n
                    self.cond.notify_all()
            size = min(size * 2, _MAX_CHUNK)

    def _run(self) -> None:
        fd_open = True
        try:
            try:
                self._copy()
            finally:
                self._src.close()
            with gate.busy():
                os.close(self._fd)
                fd_open = False
                self._finish(self.written, self._md5.hexdigest() if self._md5 is not None else None)
        except BaseException as exc:
            with gate.busy():
                if fd_open:
                    os.close(self._fd)
                self.error = exc
                try:
                    self._cleanup()
                except Exception:
                    log.exception("cache: cleanup after a failed fill failed")
        finally:
            with self.cond:
                self.done = True
                self.cond.notify_all()

    def wait(self) -> None:
        """Block until the copy ended; raise its error if it failed."""
        with self.cond:
            while not self.done:
                self.cond.wait()
        if self.error is not None:
            raise self.error


class TeeReader(io.RawIOBase):
    """Reads the temp file of a :class:`Fill` up to what has been written so far.

    Args:
        fill: the running copy.
        path: the temp file (opened now; the descriptor stays valid after the rename).
        on_close: called once when the reader is closed (releases the reader's lease).
        local_path: where the entry is published once complete (the ``local_path`` attribute).
    """

    def __init__(
        self, fill: Fill, path: str, on_close: Callable[[], None], *, local_path: str | None = None
    ) -> None:
        super().__init__()
        self._fill = fill
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()
        self._pos = 0
        self._on_close: Callable[[], None] | None = on_close
        self.local_path = local_path

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if not len(view):
            return 0
        fill = self._fill
        with fill.cond:
            while self._pos >= fill.written and not fill.done:
                fill.cond.wait()
            available = fill.written - self._pos
            error = fill.error
        if available <= 0:
            if error is not None:
                raise error
            return 0
        n = self._file.readinto(view[: min(len(view), available)]) or 0
        self._pos += n
        return n

    def skip_to(self, offset: int) -> None:
        """Continue reading at byte ``offset``: reads block until the copy has written past it.

        The temp file is random-access, so nothing is read to get there; an ``offset`` past the
        end gives end-of-file once the copy is complete and verified.
        """
        self._file.seek(offset)
        self._pos = offset

    def wait(self) -> None:
        """Block until the whole shard is in the cache (raises the fill's error)."""
        self._fill.wait()

    def close(self) -> None:
        if not self.closed:
            self._file.close()
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()
        super().close()
