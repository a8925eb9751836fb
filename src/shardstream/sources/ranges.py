"""A stream that stops after ``length`` bytes of another: ranged reads where the source cannot bound them.

Used by the file and pipe sources and by cache entries. It forwards ``local_path`` of the wrapped
stream (and ``size``/``etag``, which describe the whole object, as on every source's streams), and
closing it closes the wrapped stream at once.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO, cast

__all__ = ["LimitedReader", "limit"]


class LimitedReader(io.RawIOBase):
    """Delivers at most ``length`` bytes of ``inner`` (fewer if ``inner`` ends first).

    Args:
        inner: a binary stream positioned at the first byte to deliver.
        length: the number of bytes to deliver at most.
    """

    def __init__(self, inner: BinaryIO, length: int) -> None:
        super().__init__()
        self._inner = inner
        self._left = length
        self._readinto = getattr(inner, "readinto", None)
        for name in ("local_path", "size", "etag", "url"):
            value = getattr(inner, name, None)
            if value is not None:
                setattr(self, name, value)

    @property
    def inner(self) -> BinaryIO:
        """The wrapped stream."""
        return self._inner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.closed:
            raise ValueError("read from a closed stream")
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._left)
        if want <= 0:
            return 0
        if self._readinto is not None:
            n = int(self._readinto(view[:want]) or 0)
        else:
            data = self._inner.read(want)
            n = len(data)
            view[:n] = data
        self._left -= n
        return n

    def read(self, size: int = -1, /) -> bytes:
        if size is None or size < 0:
            return self.readall()
        buf = bytearray(min(size, self._left))
        n = self.readinto(buf)
        del buf[n:]
        return bytes(buf)

    def close(self) -> None:
        """Close the wrapped stream now (a command is stopped, a connection dropped)."""
        if not self.closed:
            try:
                self._inner.close()
            finally:
                super().close()


def limit(stream: BinaryIO, length: int | None) -> BinaryIO:
    """``stream`` capped at ``length`` bytes; ``stream`` itself when ``length`` is ``None``."""
    if length is None:
        return stream
    return cast(BinaryIO, LimitedReader(stream, length))
