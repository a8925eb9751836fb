"""The shard cache: look up, fill atomically, verify, evict. Safe across threads, processes, hosts.

Opening a remote shard (``ShardCache.open`` / calling the cache as an opener):

1. **Hit**: the published file exists and its size matches its metadata record: it is opened
   under a reader lease (so eviction leaves it alone) and its last-use time is touched.
2. **Miss**: take the entry's lock (:mod:`.lock`); exactly one process downloads. It opens the
   source, reserves space (evicting LRU entries under a global eviction lock if a size limit is
   set), and a thread copies the bytes into a uniquely named temp file (host, PID, process start,
   random token) while this process's reader follows right behind (:mod:`._tee`). After the last
   byte the size (and, with ``verify_etag=True``, the MD5 against an S3-style ETag) is checked,
   the metadata record is written, and the temp file is renamed to the published name. Only then
   is the lock released: no reader ever sees a partial shard under the published name.
3. **Waiters** in other processes back off until the published file appears, then read it; if
   the holder dies, its lock is taken over as stale and the download starts again.
4. A published file whose size does not match its record (truncated, overwritten) is removed
   with a warning naming it, and fetched again.

Local files are read in place and never copied.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any, BinaryIO, cast

from ..config import read_settings
from ..errors import CacheError, ConfigurationError, redact_url
from ..sources import open_url, scheme_of, stat_url
from ..sources.file import local_path
from . import eviction
from ._layout import Layout
from ._owner import Owner, remove_quietly
from ._tee import Fill, TeeReader
from .lease import Lease, live_leases
from .lock import LockTiming, ShardLock
from .naming import NameFunction, cache_name, check_name
from .stats import CacheStats

__all__ = ["ShardCache", "make_cache_opener"]

log = logging.getLogger("shardstream.cache")

_MD5_ETAG = re.compile(r'^"?([0-9a-fA-F]{32})"?$')


class _Corrupt:
    def __init__(self, reason: str) -> None:
        self.reason = reason


class _LeasedFile(io.RawIOBase):
    """A cached file held open under a reader lease (released on close)."""

    def __init__(self, file: io.FileIO, lease: Lease) -> None:
        super().__init__()
        self._file = file
        self._lease: Lease | None = lease
        self.name = file.name

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:  # direct, without RawIOBase's extra copy
        return self._file.read(size) or b""

    def readinto(self, buffer: Any) -> int:
        return self._file.readinto(buffer) or 0

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0, /) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        if not self.closed:
            self._file.close()
            lease, self._lease = self._lease, None
            if lease is not None:
                lease.release()
        super().close()


class ShardCache:
    """A local cache of remote shards, shared safely by any number of processes and hosts.

    The object is an :data:`~shardstream.tar.samples.Opener`: ``cache(url)`` returns
    ``(stream, local_path)``. It pickles cheaply (DataLoader workers get a copy; each process
    keeps its own :attr:`stats`).

    Args:
        cache_dir: the cache directory; created if missing. Several jobs may share it (NFS too).

        Size:
            cache_size: limit in bytes; ``None`` or a negative value means unlimited (default).
                Least recently used idle entries are evicted to stay under it.

        Naming and sources:
            url_to_name: maps a URL to a relative cache name (default :func:`.naming.cache_name`,
                which keeps scheme, host/bucket and path). Returning a URL is allowed.
            storage_options: options for the sources (endpoint, credentials, ...).
            allow_pipe: allow ``pipe:`` URLs (they run shell commands).

        Concurrency:
            lock_timeout: seconds to wait for another process's download (default
                ``SHARDSTREAM_LOCK_TIMEOUT``, else 600).
            stale_after: seconds without heartbeat after which a lock or lease held on *another
                host* is dead (default 60; same-host holders are checked by PID at once).
            heartbeat: seconds between heartbeats of held locks and leases (default 5).
            host: this host's name in owner records (default ``socket.gethostname()``); set it
                when containers on different machines share a host name.

        Verification:
            verify_etag: also check the MD5 of a download against the source's ETag when the
                ETag is a plain MD5 (S3 single-part uploads without SSE-KMS). Default False: it
                costs CPU, and ETags of encrypted or multipart objects are not MD5s.
    """

    def __init__(
        self,
        cache_dir: str,
        *,
        cache_size: int | None = None,
        url_to_name: NameFunction | None = None,
        storage_options: Mapping[str, Any] | None = None,
        allow_pipe: bool = False,
        lock_timeout: float | None = None,
        stale_after: float = 60.0,
        heartbeat: float = 5.0,
        host: str | None = None,
        verify_etag: bool = False,
    ) -> None:
        if not cache_dir:
            raise ConfigurationError(f"cache_dir={cache_dir!r}; pass a directory path for the shard cache")
        if heartbeat <= 0 or stale_after <= heartbeat:
            raise ConfigurationError(
                f"stale_after={stale_after} must exceed heartbeat={heartbeat} > 0, or live owners "
                "would be taken for dead; use e.g. heartbeat=5, stale_after=60"
            )
        self.cache_dir = os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))
        self.cache_size = None if cache_size is None or cache_size < 0 else int(cache_size)
        self.url_to_name = url_to_name
        self.storage_options = dict(storage_options or {})
        self.allow_pipe = allow_pipe
        timeout = read_settings().lock_timeout if lock_timeout is None else lock_timeout
        self.timing = LockTiming(timeout=timeout, stale_after=stale_after, heartbeat=heartbeat)
        self.host = host
        self.verify_etag = verify_etag
        self.layout = Layout(self.cache_dir)
        self._stats = CacheStats()
        self._owner: Owner | None = None
        self._check_dir()

    def __repr__(self) -> str:
        return f"ShardCache({self.cache_dir!r}, cache_size={self.cache_size}, timing={self.timing})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_owner"] = None  # a new process is a new owner
        state["_stats"] = CacheStats()
        return state

    # -- public API -------------------------------------------------------------------------------

    @property
    def stats(self) -> CacheStats:
        """A snapshot of this process's counters."""
        return self._stats.snapshot()

    def name_for(self, url: str) -> str:
        """The relative cache name of ``url``."""
        if self.url_to_name is None:
            return cache_name(url)
        return check_name(self.url_to_name(url), url)

    def path_for(self, url: str) -> str:
        """Where ``url`` is (or will be) cached."""
        return self.layout.data(self.name_for(url))

    def __call__(self, url: str) -> tuple[BinaryIO, str | None]:
        return self.open(url)

    def open(self, url: str) -> tuple[BinaryIO, str | None]:
        """Open ``url`` through the cache: ``(stream, local path)``.

        A cold shard streams while it is being cached. Local files are opened in place.

        Raises:
            SourceError: the source failed before the first byte (mid-stream failures are
                raised by the stream's ``read``).
            CacheLockTimeout: another live process kept the download lock past ``lock_timeout``.
            CacheError: the cache directory cannot be written.
        """
        if scheme_of(url) == "file":
            self._stats.add(local_reads=1)
            stream = open_url(url, storage_options=self.storage_options)
            return stream, local_path(url)
        name = self.name_for(url)
        data = self.layout.data(name)
        lease = Lease(self.layout.leases(name), owner=self.owner, heartbeat=self.timing.heartbeat)
        try:
            while True:
                hit = self._open_hit(name)
                if isinstance(hit, io.FileIO):
                    self._count("hits", url)
                    return cast(BinaryIO, _LeasedFile(hit, lease)), data
                lock = ShardLock(self.layout.lock(name), owner=self.owner, timing=self.timing)
                # Wait for the lock, or for the file to appear (unless the file there is corrupt).
                until = None if isinstance(hit, _Corrupt) else (lambda: os.path.exists(data))
                got = lock.acquire(until=until)
                self._note_lock(lock)
                if got:
                    return self._locked_open(url, name, lock, lease)
        except BaseException:
            lease.release()
            raise

    def get_file(self, url: str) -> str:
        """Make sure ``url`` is completely in the cache and return its path (local files: in place)."""
        stream, path = self.open(url)
        try:
            if isinstance(stream, TeeReader):
                stream.wait()
        finally:
            stream.close()
        if path is None:
            raise CacheError(
                f"{redact_url(url)} is larger than cache_size={self.cache_size} and cannot be cached; "
                "raise cache_size"
            )
        return path

    def evict(self, incoming: int = 0) -> list[str]:
        """Run an eviction pass now (only with a size limit); returns the names removed."""
        if self.cache_size is None:
            return []
        lock = ShardLock(self.layout.evict_lock, owner=self.owner, timing=self.timing)
        lock.acquire()
        try:
            return self._evict_locked(incoming)
        finally:
            lock.release()

    # -- internals --------------------------------------------------------------------------------

    @property
    def owner(self) -> Owner:
        if self._owner is None or self._owner.pid != os.getpid():
            self._owner = Owner.current(self.host)
        return self._owner

    def _check_dir(self) -> None:
        try:
            for sub in ("meta", "lock", "lease", "tmp"):
                os.makedirs(os.path.join(self.layout.book, sub), exist_ok=True)
            probe = os.path.join(self.layout.book, f".probe~{os.getpid()}~{os.urandom(4).hex()}")
            with open(probe, "wb"):
                pass
            os.unlink(probe)
        except OSError as exc:
            raise CacheError(
                f"cache directory {self.cache_dir!r} is not usable: {exc.strerror or exc} "
                f"({exc.filename or self.cache_dir}). It must be a writable directory (it is created "
                "if missing). Fix its permissions, or pass another cache_dir= "
                "(or set SHARDSTREAM_CACHE_DIR / WDS_CACHE)."
            ) from exc

    def _count(self, event: str, url: str, **extra: int) -> None:
        self._stats.add(**{event: 1}, **extra)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("cache %s %s stats=%s", event, redact_url(url), self._stats.as_dict())

    def _note_lock(self, lock: ShardLock) -> None:
        if lock.waited:
            self._stats.add(lock_waits=1)
        if lock.takeovers:
            self._stats.add(stale_takeovers=lock.takeovers)

    def _read_meta(self, name: str) -> dict[str, Any] | None:
        try:
            with open(self.layout.meta(name), "rb") as f:
                meta: dict[str, Any] = json.load(f)
            return meta
        except (FileNotFoundError, ValueError):
            return None

    def _open_hit(self, name: str) -> io.FileIO | _Corrupt | None:
        path = self.layout.data(name)
        try:
            file = io.FileIO(path, "rb")
        except FileNotFoundError:
            return None
        size = os.fstat(file.fileno()).st_size
        meta = self._read_meta(name)
        expected = meta.get("size") if meta else None
        if isinstance(expected, int) and size != expected:
            file.close()
            return _Corrupt(f"size {size} bytes, expected {expected}")
        with contextlib.suppress(OSError):
            os.utime(path)  # last use, for LRU eviction
        return file

    def _locked_open(self, url: str, name: str, lock: ShardLock, lease: Lease) -> tuple[BinaryIO, str | None]:
        """With the entry's lock held: re-check, repair, or start the fill (which owns the lock)."""
        path = self.layout.data(name)
        try:
            hit = self._open_hit(name)
            if isinstance(hit, io.FileIO):
                lock.release()
                self._count("hits", url)
                return cast(BinaryIO, _LeasedFile(hit, lease)), path
            if isinstance(hit, _Corrupt):
                log.warning(
                    "cached shard %s for %s is corrupt (%s): removing it and fetching it again",
                    path,
                    redact_url(url),
                    hit.reason,
                )
                remove_quietly(path)
                remove_quietly(self.layout.meta(name))
                self._stats.add(corrupt=1)
            self._clean_temps(name)
            return self._start_fill(url, name, lock, lease)
        except BaseException:
            if lock.held:
                lock.release()
            raise

    def _clean_temps(self, name: str) -> None:
        tmp = self.layout.tmp(name, self.owner)
        directory, prefix = os.path.dirname(tmp), os.path.basename(self.layout.data(name)) + "~"
        try:
            candidates = [os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(prefix)]
        except FileNotFoundError:
            return
        for path in eviction.stale_temps(
            self.layout, candidates, owner=self.owner, stale_after=self.timing.stale_after, lock_held=True
        ):
            if remove_quietly(path):
                log.info("cache: removed leftover temp file %s of a dead process", path)
                self._stats.add(temp_cleaned=1)

    def _start_fill(self, url: str, name: str, lock: ShardLock, lease: Lease) -> tuple[BinaryIO, str | None]:
        src = open_url(url, storage_options=self.storage_options, allow_pipe=self.allow_pipe)
        try:
            expected: int | None = getattr(src, "size", None)
            etag: str | None = getattr(src, "etag", None)
            if expected is None:
                try:
                    info = stat_url(url, storage_options=self.storage_options)
                    expected, etag = info.size, etag or info.etag
                except Exception as exc:  # pipes and some servers cannot tell: size unchecked
                    log.debug("cache: no size for %s (%s); download not size-checked", redact_url(url), exc)
            if self.cache_size is not None and expected is not None and expected > self.cache_size:
                log.warning(
                    "shard %s (%d bytes) is larger than cache_size=%d: reading it without caching; "
                    "raise cache_size to cache it",
                    redact_url(url),
                    expected,
                    self.cache_size,
                )
                lock.release()
                lease.release()
                self._count("uncached", url)
                return src, None
            tmp, fd = self._reserve(name, expected)
        except BaseException:
            src.close()
            raise
        self._count("misses", url)
        log.info("cache fill %s -> %s size=%s", redact_url(url), self.layout.data(name), expected)
        started = time.monotonic()

        def finish(written: int, md5: str | None) -> None:
            try:
                self._publish(url, name, tmp, written, md5, expected, etag, started)
            finally:
                lock.release()

        def cleanup() -> None:
            remove_quietly(tmp)
            if lock.held:
                lock.release()

        md5 = self.verify_etag and etag is not None and _MD5_ETAG.match(etag) is not None
        try:
            fill = Fill(src, fd, label=name, finish=finish, cleanup=cleanup, md5=md5)
            reader = TeeReader(fill, tmp, lease.release)
        except BaseException:
            os.close(fd)
            src.close()
            remove_quietly(tmp)
            raise
        fill.start()
        return cast(BinaryIO, reader), self.layout.data(name)

    def _reserve(self, name: str, expected: int | None) -> tuple[str, int]:
        """Create the temp file; with a size limit, evict first and reserve ``expected`` bytes."""
        tmp = self.layout.tmp(name, self.owner)
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        if self.cache_size is None:
            return tmp, os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        evict_lock = ShardLock(self.layout.evict_lock, owner=self.owner, timing=self.timing)
        evict_lock.acquire()
        try:
            self._evict_locked(expected or 0)
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            if expected:
                # A sparse reservation: other processes' eviction passes count it as in use.
                os.ftruncate(fd, expected)
            return tmp, fd
        finally:
            evict_lock.release()

    def _evict_locked(self, incoming: int) -> list[str]:
        assert self.cache_size is not None
        owner, stale = self.owner, self.timing.stale_after
        entries, reserved = eviction.scan(self.layout, owner=owner, stale_after=stale)
        removed: list[str] = []
        while True:
            victims = eviction.plan_eviction(entries, self.cache_size, incoming + reserved)
            if not victims:
                return removed
            for victim in victims:
                if not self._evict_one(victim):
                    # Became busy since the scan: mark it and plan again (never over-evict).
                    entries = [
                        e if e.name != victim.name else eviction.Entry(e.name, e.size, e.last_used, True)
                        for e in entries
                    ]
                    break
                removed.append(victim.name)
                entries = [e for e in entries if e.name != victim.name]
            else:
                total = sum(e.size for e in entries) + incoming + reserved
                if total > self.cache_size:
                    log.warning(
                        "cache %s stays over cache_size=%d (%d bytes): the remaining entries are in use",
                        self.cache_dir,
                        self.cache_size,
                        total,
                    )
                return removed

    def _evict_one(self, entry: eviction.Entry) -> bool:
        lock = ShardLock(self.layout.lock(entry.name), owner=self.owner, timing=self.timing)
        if not lock.try_acquire():
            return False
        try:
            leases = self.layout.leases(entry.name)
            if live_leases(leases, owner=self.owner, stale_after=self.timing.stale_after):
                return False
            remove_quietly(self.layout.data(entry.name))
            remove_quietly(self.layout.meta(entry.name))
        finally:
            lock.release()
        self._stats.add(evictions=1, evicted_bytes=entry.size)
        log.debug(
            "cache evicted %s (%d bytes, last used %.0fs ago)",
            entry.name,
            entry.size,
            time.time() - entry.last_used,
        )
        return True

    def _publish(
        self,
        url: str,
        name: str,
        tmp: str,
        written: int,
        md5: str | None,
        expected: int | None,
        etag: str | None,
        started: float,
    ) -> None:
        """Verify a finished download and rename it into place (raises on bad data)."""
        if expected is not None and written != expected:
            raise CacheError(
                f"download of {redact_url(url)} gave {written} bytes, but the source announced "
                f"{expected}: the connection was cut or the object changed while it was read. It "
                "was not cached; read the shard again."
            )
        if md5 is not None and etag is not None:
            want = _MD5_ETAG.match(etag)
            if want is not None and want.group(1).lower() != md5:
                raise CacheError(
                    f"download of {redact_url(url)} has MD5 {md5}, but its ETag is {etag}: the data "
                    "was corrupted in transit, or the ETag is not an MD5 (SSE-KMS or multipart "
                    "objects). It was not cached; pass verify_etag=False for such buckets."
                )
        meta_path = self.layout.meta(name)
        os.makedirs(os.path.dirname(meta_path), exist_ok=True)
        meta = {"url": redact_url(url), "size": written, "etag": etag, "fetched": time.time()}
        meta_tmp = f"{meta_path}~{self.owner.tag()}.new"
        data = self.layout.data(name)
        try:
            with open(meta_tmp, "w") as f:
                json.dump(meta, f)
            os.replace(meta_tmp, meta_path)
            os.makedirs(os.path.dirname(data), exist_ok=True)
            os.replace(tmp, data)
        except OSError as exc:
            remove_quietly(meta_tmp)
            remove_quietly(tmp)
            # The reader already has every byte; only the cache entry is lost.
            log.warning("cache: could not publish %s as %s: %s", redact_url(url), data, exc)
            return
        self._stats.add(bytes_fetched=written)
        log.info(
            "cache filled %s -> %s bytes=%d seconds=%.3f",
            redact_url(url),
            data,
            written,
            time.monotonic() - started,
        )


def make_cache_opener(
    *,
    cache_dir: str | None,
    cache_size: int | None = None,
    url_to_name: NameFunction | None = None,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
    **options: Any,
) -> ShardCache | None:
    """The opener for ``WebDataset(cache_dir=..., cache_size=...)``; ``None`` means no cache.

    No cache when ``cache_dir`` is ``None`` or ``cache_size == 0`` (as in WebDataset). A negative
    or ``None`` size means unlimited. Extra ``options`` go to :class:`ShardCache`.
    """
    if cache_dir is None or cache_size == 0:
        return None
    return ShardCache(
        cache_dir,
        cache_size=cache_size,
        url_to_name=url_to_name,
        storage_options=storage_options,
        allow_pipe=allow_pipe,
        **options,
    )
