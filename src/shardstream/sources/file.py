"""Local files: plain paths and ``file://`` URLs, read in place.

Streams carry ``local_path`` (the file's path; for a ranged stream, the whole file's path), so a
reader can record where the bytes live without copying them.

Writes are published whole or not at all (:class:`AtomicFile`): the bytes go to a hidden temporary
file next to the target (``.<name>.partial~<host>~<pid>~<random>``) that ``close()`` renames into
place; ``abort()``, an exception leaving a ``with`` block, or a writer dropped unclosed removes it.
A writer killed outright leaves only that hidden file, never a truncated shard under the final
name; the next writer of the same name removes such leftovers of dead processes on this host.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from typing import BinaryIO, cast
from urllib.parse import unquote, urlparse

from ..errors import AccessDeniedError, ShardNotFoundError, SourceError
from ..forks import process_alive
from .base import Listed, ObjectInfo, PublishingWriter, SourceBase, check_range
from .ranges import limit

__all__ = ["AtomicFile", "FileSource", "local_path"]


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

    can_list = True

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

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """The files under directory ``prefix``, recursively; hidden files and directories (a
        leading ``.``: partial writes, the cache's bookkeeping) are left out."""
        base = local_path(prefix).rstrip("/") or "/"
        if not os.path.isdir(base):
            raise ShardNotFoundError(
                f"{base!r} is not a directory; give the directory of the objects", url=base
            )
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            rel = os.path.relpath(dirpath, base)
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                path = os.path.join(dirpath, name)
                key = name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"
                yield Listed(key, os.path.getsize(path))

    def create(self, url: str) -> BinaryIO:
        """A writer that publishes ``url`` when closed (see :class:`AtomicFile`)."""
        path = local_path(url)
        parent = os.path.dirname(path)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
            return cast(BinaryIO, AtomicFile(path))
        except OSError as exc:
            raise _translate(exc, url, "create") from exc

    def close(self) -> None:
        pass


_PARTIAL = ".partial~"


class AtomicFile(PublishingWriter):
    """A file written under a hidden temporary name and renamed to ``path`` by :meth:`close`.

    :meth:`abort` (also: an exception leaving a ``with`` block, or the writer collected without
    ``close``) removes the temporary file, so ``path`` is either the whole new content or
    untouched. Leftovers of dead writers of ``path`` on this host are removed when it is created.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self._file: BinaryIO | None = None  # (None: creating the temporary file failed)
        self.path = path
        directory, name = os.path.split(path)
        self._host = socket.gethostname().replace("~", "_")
        prefix = f".{name}{_PARTIAL}"
        _remove_dead_partials(directory or ".", prefix, self._host)
        tag = f"{self._host}~{os.getpid()}~{secrets.token_hex(4)}"
        self.temp = os.path.join(directory, prefix + tag)
        self._file = open(self.temp, "wb")  # noqa: SIM115 - closed by close()/abort()
        self.name = path

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        assert self._file is not None
        return self._file.write(data)

    def flush(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.flush()

    def close(self) -> None:
        """Publish: the temporary file becomes ``path`` (atomically; replaces an older file)."""
        if self.closed:
            return
        try:
            assert self._file is not None
            self._file.close()
            os.replace(self.temp, self.path)
        except BaseException:
            self.abort()
            raise
        super().close()

    def abort(self) -> None:
        """Discard what was written; ``path`` is left as it was."""
        if self._file is None:  # never created: nothing to discard
            if not self.closed:
                super().close()
            return
        if not self._file.closed:
            self._file.close()
        try:
            os.remove(self.temp)
        except FileNotFoundError:
            pass
        if not self.closed:
            super().close()


def _remove_dead_partials(directory: str, prefix: str, host: str) -> None:
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        parts = name[len(prefix) :].split("~")
        if len(parts) == 3 and parts[0] == host and parts[1].isdigit() and not process_alive(int(parts[1])):
            try:
                os.remove(os.path.join(directory, name))
            except OSError:
                pass
