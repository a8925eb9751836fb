"""Local files: plain paths and ``file://`` URLs, read in place.

Streams carry ``local_path`` (the file's path; for a ranged stream, the whole file's path), so a
reader can record where the bytes live without copying them.
"""

from __future__ import annotations

import os
from typing import BinaryIO, cast
from urllib.parse import unquote, urlparse

from ..errors import AccessDeniedError, ShardNotFoundError, SourceError
from .base import ObjectInfo, SourceBase, check_range
from .ranges import limit

__all__ = ["FileSource", "local_path"]


def local_path(url: str) -> str:
    """The filesystem path of a plain path or ``file://`` URL."""
    if url.startswith("file:"):
        parsed = urlparse(url)
        return (
            unquote(parsed.path) if parsed.netloc in ("", "localhost") else f"//{parsed.netloc}{parsed.path}"
        )
    return url


def _translate(exc: OSError, url: str, action: str) -> SourceError:
    path = local_path(url)
    if isinstance(exc, FileNotFoundError):
        return ShardNotFoundError(
            f"cannot {action} {url}: no such file {path!r}. Check the path and the shard spec "
            "(brace ranges such as {000000..000099} must match the files on disk).",
            url=url,
        )
    if isinstance(exc, PermissionError):
        return AccessDeniedError(f"cannot {action} {url}: permission denied on {path!r}.", url=url)
    return SourceError(f"cannot {action} {url}: {exc.strerror or exc}", url=url)


class FileSource(SourceBase):
    """Reads local files. Writes go to a temporary name and are renamed on close."""

    def __init__(self, *, buffering: int = 0) -> None:
        # Unbuffered by default: the tar reader asks for large blocks with readinto, so a second
        # buffer layer would only add a copy.
        self.buffering = buffering

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open the file at byte ``offset`` (a seek), capped at ``length`` bytes when given."""
        check_range(url, offset, length)
        path = local_path(url)
        try:
            stream = open(path, "rb", buffering=self.buffering)  # noqa: SIM115
        except OSError as exc:
            raise _translate(exc, url, "open") from exc
        try:
            if offset:
                stream.seek(offset)
            stream.local_path = path  # type: ignore[attr-defined]
        except BaseException:
            stream.close()
            raise
        return limit(stream, length)

    def stat(self, url: str) -> ObjectInfo:
        path = local_path(url)
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _translate(exc, url, "stat") from exc
        return ObjectInfo(size=st.st_size, etag=f"{st.st_mtime_ns:x}-{st.st_size:x}", local_path=path)

    def create(self, url: str) -> BinaryIO:
        path = local_path(url)
        parent = os.path.dirname(path)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
            return cast(BinaryIO, open(path, "wb"))  # noqa: SIM115
        except OSError as exc:
            raise _translate(exc, url, "create") from exc

    def close(self) -> None:
        pass
