"""Any other fsspec protocol (``ftp://``, ``sftp://``, ``webdav://``, ...): a source over fsspec.

A URL whose scheme has no source of ours, but that fsspec knows, is read through
``fsspec.core.url_to_fs`` (the ``fsspec`` extra, plus the protocol's own package, e.g. paramiko for
``sftp``). The ``storage_options`` are passed through to fsspec as they are, so whatever works with
``fsspec.open(url, **storage_options)`` works here.

What holds: ranged reads (a seek), a read cut by a fault resumed at the byte offset by our
:class:`~._resume.ResumableReader` (it reopens and seeks), listing a prefix, stat, and writes that
become visible on ``close()`` only (written under a temporary name and moved into place; a store
without rename, such as a plain HTTP server, cannot be written). What does not: the speed figures
of our own clients (fsspec's file objects buffer and copy, and there is no open-ahead or batched
``get_many``), and fork safety (each process builds its own filesystem objects). The built-in
``s3://``, ``gs://``, ``az://``, ``hf://`` and ``http(s)://`` sources always take precedence.
"""

from __future__ import annotations

import ftplib
import functools
import secrets
from collections.abc import Iterator
from typing import Any, BinaryIO, ClassVar, cast

from ..config import UNSET
from ..errors import (
    AccessDeniedError,
    ConfigurationError,
    ShardNotFoundError,
    SourceError,
    TransientSourceError,
    redact_url,
)
from ._resume import Opened, ResumableReader
from ._retry import RetryPolicy
from .base import Listed, ObjectInfo, PublishingWriter, SourceBase, check_range

__all__ = ["FsspecSource", "fsspec_protocols", "source_class_for"]


def _fsspec() -> Any:
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError(
            "reading this URL scheme goes through fsspec, which is not installed: "
            "pip install 'shardstream[fsspec]' (and the protocol's own package)"
        ) from exc
    return fsspec


def fsspec_protocols() -> frozenset[str]:
    """The protocols fsspec knows (installed or not), or none when fsspec is missing."""
    try:
        fsspec = _fsspec()
    except ImportError:
        return frozenset()
    return frozenset(fsspec.available_protocols()) | frozenset(fsspec.registry)


def translate(exc: BaseException, url: str, action: str = "open") -> SourceError:
    """An fsspec (or protocol library) exception as a shardstream error naming ``url``."""
    shown = redact_url(url)
    if isinstance(exc, SourceError):
        return exc
    if isinstance(exc, FileNotFoundError) or (isinstance(exc, ftplib.error_perm) and str(exc)[:3] == "550"):
        return ShardNotFoundError(
            f"cannot {action} {shown}: no such object ({exc}). Check the URL and the shard spec.", url=url
        )
    if isinstance(exc, PermissionError) or (isinstance(exc, ftplib.error_perm) and str(exc)[:3] == "530"):
        return AccessDeniedError(
            f"cannot {action} {shown}: access refused ({redact_url(str(exc))}). Check the credentials "
            "in storage_options or in the URL.",
            url=url,
        )
    if isinstance(exc, ConnectionError | TimeoutError | EOFError | ftplib.error_temp | ftplib.error_reply):
        return TransientSourceError(
            f"network error on {shown}: {type(exc).__name__}: {redact_url(str(exc))}; it is retried", url=url
        )
    if isinstance(exc, OSError):
        return TransientSourceError(
            f"error on {shown}: {type(exc).__name__}: {redact_url(str(exc))}; it is retried", url=url
        )
    return SourceError(f"cannot {action} {shown}: {type(exc).__name__}: {redact_url(str(exc))}", url=url)


class _Body:
    """An fsspec file as a raw body for :class:`ResumableReader`, bounded at ``end``."""

    def __init__(self, handle: Any, offset: int, end: int | None) -> None:
        self._handle = handle
        self._left = None if end is None else max(0, end - offset)

    def readinto(self, buffer: memoryview, /) -> int:
        want = len(buffer) if self._left is None else min(len(buffer), self._left)
        if want <= 0:
            return 0
        data = self._handle.read(want)
        n = len(data)
        buffer[:n] = data
        if self._left is not None:
            self._left -= n
        return n

    def close(self) -> None:
        self._handle.close()


class FsspecSource(SourceBase):
    """Reads (and writes) URLs of one fsspec protocol; see the module doc for what holds.

    Args:
        retries, retry_deadline: the retry budget of a read cut by a fault (defaults from
            ``SHARDSTREAM_RETRIES`` and ``SHARDSTREAM_RETRY_DEADLINE``).
        **storage_options: passed to fsspec as they are (``host``, ``username``, ``key_filename``,
            ...). Never logged or shown in reprs.
    """

    #: The fsspec protocol this class serves (set by :func:`source_class_for`).
    protocol: ClassVar[str] = ""
    can_list = True

    def __init__(
        self, *, retries: int | object = UNSET, retry_deadline: float | object = UNSET, **storage_options: Any
    ) -> None:
        self.policy = RetryPolicy.from_options(retries=retries, retry_deadline=retry_deadline)
        self._options = storage_options

    def __repr__(self) -> str:  # option values may be secrets: names only
        return f"FsspecSource(protocol={self.protocol!r}, options={sorted(self._options)})"

    def _resolve(self, url: str) -> tuple[Any, str]:
        fsspec = _fsspec()
        try:
            fs, path = fsspec.core.url_to_fs(url, **self._options)
        except ImportError:
            raise
        except TypeError as exc:  # an option the protocol's filesystem does not take
            raise ConfigurationError(
                f"fsspec cannot build the {self.protocol}:// filesystem for {redact_url(url)}: "
                f"{redact_url(str(exc))}. Check storage_options (they are passed to fsspec as they are)."
            ) from None
        except Exception as exc:  # the connection or login of protocols that connect here (ftp)
            raise translate(exc, url, "connect to") from None
        return fs, path

    def _opener(self, url: str, end: int | None, offset: int, etag: str | None) -> Opened:
        fs, path = self._resolve(url)
        size = self._size(fs, path, url)
        handle = fs.open(path, "rb")
        try:
            if offset:
                handle.seek(min(offset, size) if size is not None else offset)
        except BaseException:
            handle.close()
            raise
        return Opened(_Body(handle, offset, end), size, None)

    @staticmethod
    def _size(fs: Any, path: str, url: str) -> int | None:
        info = fs.info(path)
        if info.get("type") == "directory":
            raise ShardNotFoundError(f"{redact_url(url)} is a directory, not an object", url=url)
        size = info.get("size")
        return int(size) if isinstance(size, int) else None

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> BinaryIO:
        """Open bytes ``[offset, offset + length)`` of ``url`` through fsspec; a fault while
        reading is retried by reopening at the byte offset."""
        end = check_range(url, offset, length)
        reader = ResumableReader(
            url,
            functools.partial(self._opener, url, end),
            translate=functools.partial(translate, url=url),
            offset=offset,
            length=length,
            policy=self.policy,
        )
        return cast(BinaryIO, reader)

    def stat(self, url: str) -> ObjectInfo:
        """Size (and a version tag, when fsspec reports one) from ``fs.info``."""
        try:
            fs, path = self._resolve(url)
            info = fs.info(path)
        except (SourceError, ConfigurationError, ImportError):
            raise
        except Exception as exc:
            raise translate(exc, url, "stat") from exc
        size = info.get("size")
        tag = info.get("ETag") or info.get("etag") or info.get("md5") or info.get("mtime")
        return ObjectInfo(
            size=int(size) if isinstance(size, int) else None, etag=None if tag is None else str(tag)
        )

    def list_objects(self, prefix: str) -> Iterator[Listed]:
        """Every file under ``prefix`` (``fs.find``), keys relative to it."""
        try:
            fs, path = self._resolve(prefix)
            base = path.rstrip("/")
            if not fs.isdir(base):
                raise ShardNotFoundError(f"{redact_url(prefix)} is not a directory of objects", url=prefix)
            found = fs.find(base, detail=True)
        except (SourceError, ConfigurationError, ImportError):
            raise
        except Exception as exc:
            raise translate(exc, prefix, "list") from exc
        for name, info in sorted(found.items()):
            key = name[len(base) :].lstrip("/")
            if key and not key.endswith("/"):
                size = info.get("size")
                yield Listed(key, int(size) if isinstance(size, int) else -1)

    def create(self, url: str) -> BinaryIO:
        """Open ``url`` for writing: a temporary object beside it, moved into place on close."""
        fs, path = self._resolve(url)
        return cast(BinaryIO, _MovedIntoPlace(fs, path, url))


class _MovedIntoPlace(PublishingWriter):
    """Writes ``path`` under a hidden temporary name and moves it into place on ``close()``."""

    def __init__(self, fs: Any, path: str, url: str) -> None:
        super().__init__()
        self._fs = fs
        self._path = path
        self._url = url
        head, _, name = path.rpartition("/")
        self._tmp = f"{head}/.{name}.partial~{secrets.token_hex(6)}" if head else f".{name}.partial"
        try:
            parent = head or "/"
            if not fs.exists(parent):
                fs.makedirs(parent, exist_ok=True)
            self._handle = fs.open(self._tmp, "wb")
        except Exception as exc:
            raise translate(exc, url, "create") from exc

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            self._handle.write(data)
        except Exception as exc:
            raise translate(exc, self._url, "write") from exc
        return len(data)

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._handle.close()
            self._fs.mv(self._tmp, self._path)
        except Exception as exc:
            self.abort()
            raise translate(exc, self._url, "publish") from exc
        super().close()

    def abort(self) -> None:
        if self.closed:
            return
        try:
            self._handle.close()
        except Exception:
            pass
        try:
            self._fs.rm(self._tmp)
        except Exception:  # nothing was written, or the store is gone: nothing to clean
            pass
        super().close()


@functools.cache
def source_class_for(protocol: str) -> type[FsspecSource]:
    """The :class:`FsspecSource` class that serves ``protocol`` (one per protocol)."""
    return type(f"FsspecSource_{protocol}", (FsspecSource,), {"protocol": protocol, "__module__": __name__})
