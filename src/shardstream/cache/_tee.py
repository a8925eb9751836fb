"""Stream while filling: a thread copies the source into the temp file; readers follow it.

The consumer of a cold shard reads the temp file right behind the writer, so it gets the first
samples as soon as their bytes arrive, and the download runs at network speed rather than at the
consumer's pace (other processes waiting for the shard are not held up by a slow training loop).
If the consumer stops early, the copy still completes and is published. An error of the copy
(the source failed, the size did not match) travels to the reader as a value and is raised
where the reader reaches the missing bytes; the reader sees end-of-file only after the whole
shard was verified, never a silently truncated shard.

A full filesystem (``ENOSPC``, a quota, a file-size limit) is not an error of the shard: the copy
stops, the temp file is removed (the reader keeps its bytes through its open descriptor), the fill
reports it through ``on_full``, and the reader continues from the source itself at the first byte
the cache did not get, so the epoch goes on and no partial entry is left behind.

The copy thread is fork-aware (see :mod:`shardstream.forks`): it starts through the
fork gate and writes, hashes and publishes inside busy regions, so a DataLoader fork finds it
waiting in a network read or parked at the gate, never holding a lock or mid-publish.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from ..forks import gate

__all__ = ["FULL_ERRNOS", "Fill", "TeeReader", "is_full"]

log = logging.getLogger("shardstream.cache")

_FIRST_CHUNK = 64 << 10  # small first reads: the first sample is readable sooner
_MAX_CHUNK = 1 << 20

#: Errors that mean "the cache's filesystem has no room", not "the data is bad".
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the filesystem (or a quota or file-size limit) has no room left."""
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


def _read_into(stream: BinaryIO, view: memoryview) -> int:
    """Fill ``view`` from ``stream`` with one call (``readinto`` where the stream has it: sources
    may hand out plain ``read``-only streams); the number of bytes, 0 at the end."""
    readinto: Callable[[Any], int] | None = getattr(stream, "readinto", None)
    if readinto is not None:
        return readinto(view) or 0
    data = stream.read(len(view))
    view[: len(data)] = data
    return len(data)


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
        on_full: called with the ``OSError`` when the filesystem has no room (after ``cleanup``);
            the copy then ends without an error and readers continue from the source.
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
        on_full: Callable[[OSError], None] | None = None,
    ) -> None:
        self._src = src
        self._on_full = on_full
        self.full = False  # the copy stopped for lack of room: readers go on from the source
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
        while True:
            view = memoryview(buf)[:size]
            n = _read_into(self._src, view)
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
                full = is_full(exc) and self._on_full is not None
                if full:
                    self.full = True
                else:
                    self.error = exc
                try:
                    self._cleanup()
                except Exception:
                    log.exception("cache: cleanup after a failed fill failed")
                if full and self._on_full is not None and isinstance(exc, OSError):
                    self._on_full(exc)
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
        reopen: opens the source at a byte offset; used to go on reading when the fill stopped
            for lack of room (without it, such a reader ends with the filesystem's error).
    """

    def __init__(
        self,
        fill: Fill,
        path: str,
        on_close: Callable[[], None],
        *,
        local_path: str | None = None,
        reopen: Callable[[int], BinaryIO] | None = None,
    ) -> None:
        super().__init__()
        self._fill = fill
        self._reopen = reopen
        self._direct: BinaryIO | None = None  # the source itself, after a full filesystem
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
        if self._direct is not None:
            return self._read_direct(view)
        fill = self._fill
        with fill.cond:
            while self._pos >= fill.written and not fill.done:
                fill.cond.wait()
            available = fill.written - self._pos
            error = fill.error
        if available <= 0:
            if error is not None:
                raise error
            if fill.full:
                if self._reopen is None:
                    raise OSError(errno.ENOSPC, "the cache's filesystem is full; cannot reopen the shard")
                self._direct = self._reopen(self._pos)
                return self._read_direct(view)
            return 0
        n = self._file.readinto(view[: min(len(view), available)]) or 0
        self._pos += n
        return n

    def _read_direct(self, view: memoryview) -> int:
        assert self._direct is not None
        n = _read_into(self._direct, view)
        self._pos += n
        return n

    def skip_to(self, offset: int) -> None:
        """Continue reading at byte ``offset``: reads block until the copy has written past it.

        The temp file is random-access, so nothing is read to get there; an ``offset`` past the
        end gives end-of-file once the copy is complete and verified.
        """
        if self._direct is not None:
            self._direct.close()
            self._direct = None  # reopened at the new offset by the next read
        self._file.seek(offset)
        self._pos = offset

    def wait(self) -> None:
        """Block until the whole shard is in the cache (raises the fill's error)."""
        self._fill.wait()

    def close(self) -> None:
        if not self.closed:
            self._file.close()
            if self._direct is not None:
                self._direct.close()
                self._direct = None
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()
        super().close()
