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

Local files are read in place and never copied. Every URL is opened through one wrapped
:class:`~shardstream.sources.Source` (by default a :class:`~shardstream.sources.SchemeRouter`
over ``storage_options``); :class:`~.source.CachedSource` presents the cache as a Source itself.

Byte ranges (``open(url, offset=, length=)``): a hit seeks in the cached file; a miss fills the
whole entry and serves the range as its bytes arrive (see :mod:`.source` for why); a shard too
large for the cache is read ranged from the source, uncached.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Mapping
from typing import Any, BinaryIO, cast

from ..config import read_settings
from ..errors import CacheError, ConfigurationError, redact_url
from ..sources import ObjectInfo, SchemeRouter, Source, limit, scheme_of
from ..sources.base import check_range
from ..sources.file import local_path
from ._evict_pass import Evictor
from ._fill import Filler
from ._tee import TeeReader
from .hit import Corrupt, LeasedFile, open_hit, read_meta, remove_corrupt
from .layout import Layout
from .lease import Lease
from .lock import LockTiming, ShardLock
from .naming import NameFunction, cache_name, check_name
from .owner import Owner
from .stats import CacheStats, CounterFile

__all__ = ["ShardCache"]

log = logging.getLogger("shardstream.cache")


class ShardCache:
    """A local cache of remote shards, shared safely by any number of processes and hosts.

    Calling it as an opener, ``cache(url)``, returns ``(stream, local_path)``; wrap it in a
    :class:`~.source.CachedSource` to use it as a Source. It pickles cheaply when its source
    does (DataLoader workers get a copy; each process keeps its own :attr:`stats`).

    Arguments by concern: size (``cache_size``); naming and sources (``url_to_name`` to
    ``allow_pipe``); concurrency (``lock_timeout`` to ``host``); verification (``verify_etag``).

    Args:
        cache_dir: the cache directory; created if missing. Several jobs may share it (NFS too).
        cache_size: limit in bytes; ``None`` or a negative value means unlimited (default).
            Least recently used idle entries are evicted to stay under it.
        url_to_name: maps a URL to a relative cache name (default :func:`.naming.cache_name`,
            which keeps scheme, host/bucket and path). Returning a URL is allowed.
        source: the Source that URLs are opened through (default: a
            :class:`~shardstream.sources.SchemeRouter` over ``storage_options`` and
            ``allow_pipe``). Give either ``source`` or those two, not both.
        storage_options: options for the sources (endpoint, credentials, ...).
        allow_pipe: allow ``pipe:`` URLs (they run shell commands).
        lock_timeout: seconds to wait for another process's download (default
            ``SHARDSTREAM_LOCK_TIMEOUT``, else 600).
        stale_after: seconds without heartbeat after which a lock or lease held on *another
            host* is dead (default 60; same-host holders are checked by PID at once).
        heartbeat: seconds between heartbeats of held locks and leases (default 5).
        host: this host's name in owner records (default ``socket.gethostname()``); set it
            when containers on different machines share a host name.
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
        source: Source | None = None,
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
        if source is not None and (storage_options or allow_pipe):
            raise ConfigurationError(
                "ShardCache got both source= and storage_options=/allow_pipe=; the options only "
                "configure the default source. Pass them to your source instead (e.g. "
                "SchemeRouter(storage_options, allow_pipe=True)) and give only source="
            )
        self.storage_options = dict(storage_options or {})
        self.allow_pipe = allow_pipe
        self.source: Source = source if source is not None else SchemeRouter(storage_options, allow_pipe)
        timeout = read_settings().lock_timeout if lock_timeout is None else lock_timeout
        self.timing = LockTiming(timeout=timeout, stale_after=stale_after, heartbeat=heartbeat)
        self.host = host
        self.verify_etag = verify_etag
        self.layout = Layout(self.cache_dir)
        self._stats = CacheStats()
        self._owner: Owner | None = None
        self._counters: CounterFile | None = None
        self._check_dir()

    def __repr__(self) -> str:
        return f"ShardCache({self.cache_dir!r}, cache_size={self.cache_size}, timing={self.timing})"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_owner"] = None  # a new process is a new owner
        state["_stats"] = CacheStats()
        state["_counters"] = None
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

    def with_source(self, source: Source) -> ShardCache:
        """This cache (same directory, settings and counters) opening URLs through ``source``."""
        self.owner  # noqa: B018 - fixed now, so the clone shares it (and its counter file)
        clone = object.__new__(ShardCache)
        clone.__dict__.update(self.__dict__)  # not copy.copy: that would pickle (new counters)
        clone.source = source
        clone.storage_options, clone.allow_pipe = {}, False
        return clone

    def info(self, url: str) -> ObjectInfo | None:
        """Size, ETag and path of ``url``'s complete entry from its record; ``None`` if not cached."""
        name = self.name_for(url)
        meta = read_meta(self.layout, name)
        path = self.layout.data(name)
        size = meta.get("size") if meta else None
        try:
            if meta is None or not isinstance(size, int) or os.stat(path).st_size != size:
                return None
        except OSError:
            return None
        etag = meta.get("etag")
        return ObjectInfo(size=size, etag=etag if isinstance(etag, str) else None, local_path=path)

    def __call__(self, url: str) -> tuple[BinaryIO, str | None]:
        return self.open(url)

    def open(self, url: str, *, offset: int = 0, length: int | None = None) -> tuple[BinaryIO, str | None]:
        """Open ``url`` (bytes ``[offset, offset + length)``) through the cache: ``(stream, local path)``.

        A cold shard streams while it is being cached; a range of a cold shard is served as the
        fill passes it. Local files are opened in place. The stream carries ``local_path`` too.

        Raises:
            SourceError: the source failed before the first byte (mid-stream failures are
                raised by the stream's ``read``).
            CacheLockTimeout: another live process kept the download lock past ``lock_timeout``.
            CacheError: the cache directory cannot be written.
        """
        check_range(url, offset, length)
        if scheme_of(url) == "file":
            self._stats.add(local_reads=1)
            if offset == 0 and length is None:  # sources registered by users may predate ranges
                return self.source.open(url), local_path(url)
            return self.source.open(url, offset=offset, length=length), local_path(url)
        stream, path = self._open_entry(url)
        if offset == 0 and length is None:
            return stream, path
        return self._narrow(url, stream, offset, length), path

    def _open_entry(self, url: str) -> tuple[BinaryIO, str | None]:
        """The whole object of a remote ``url``: a hit, a fill, or (too large) uncached."""
        name = self.name_for(url)
        data = self.layout.data(name)
        lease = Lease(self.layout.leases(name), owner=self.owner, heartbeat=self.timing.heartbeat)
        try:
            while True:
                hit = open_hit(self.layout, name)
                if isinstance(hit, io.FileIO):
                    self._count("hits", url)
                    return cast(BinaryIO, LeasedFile(hit, lease)), data
                lock = ShardLock(self.layout.lock(name), owner=self.owner, timing=self.timing)
                # Wait for the lock, or for the file to appear (unless the file there is corrupt).
                until = None if isinstance(hit, Corrupt) else (lambda: os.path.exists(data))
                got = lock.acquire(until=until)
                self._note_lock(lock)
                if got:
                    return self._locked_open(url, name, lock, lease)
        except BaseException:
            lease.release()
            raise

    def _narrow(self, url: str, stream: BinaryIO, offset: int, length: int | None) -> BinaryIO:
        """Serve bytes ``[offset, offset + length)`` of an entry opened whole."""
        try:
            if isinstance(stream, LeasedFile):
                stream.seek(offset)
            elif isinstance(stream, TeeReader):
                stream.skip_to(offset)
            else:  # too large to cache: the source serves the range itself
                stream.close()
                return self.source.open(url, offset=offset, length=length)
        except BaseException:
            stream.close()
            raise
        return limit(stream, length)

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
        evictor = self._evictor()
        return [] if evictor is None else evictor.run(incoming)

    # -- internals --------------------------------------------------------------------------------

    @property
    def owner(self) -> Owner:
        if self._owner is None or self._owner.pid != os.getpid():
            self._owner = Owner.current(self.host)
        return self._owner

    def _check_dir(self) -> None:
        try:
            for sub in ("meta", "lock", "lease", "tmp", "stats"):
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
        counters = self._counter_file()
        self._stats.add(**{event: 1}, **extra)
        counters.record(self._stats)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("cache %s %s stats=%s", event, redact_url(url), self._stats.as_dict())

    def _counter_file(self) -> CounterFile:
        """This process's counter file; a new one (based on the counts so far) after a fork."""
        counters = self._counters
        owner = self.owner
        # One file per cache object and process (the owner's token): two caches on one directory
        # in a process (a dataset built per epoch) must not overwrite each other's counts.
        tag = f"{owner.host}~{owner.pid}~{owner.start}~{owner.token}"
        if counters is None or counters.tag != tag:
            import multiprocessing.util

            counters = self._counters = CounterFile(self.layout.counters, tag, self._stats.snapshot())
            # At exit (main process and multiprocessing children alike) or when this cache is
            # collected: the counts since the last throttled write are not lost.
            multiprocessing.util.Finalize(self, counters.finish, (self._stats,), exitpriority=1)
        return counters

    def _note_lock(self, lock: ShardLock) -> None:
        if lock.waited:
            self._stats.add(lock_waits=1)
        if lock.takeovers:
            self._stats.add(stale_takeovers=lock.takeovers)

    def _evictor(self) -> Evictor | None:
        if self.cache_size is None:
            return None
        return Evictor(self.layout, self.cache_size, self.owner, self.timing, self._stats)

    def _filler(self) -> Filler:
        return Filler(
            layout=self.layout,
            owner=self.owner,
            stats=self._stats,
            count=self._count,
            source=self.source,
            verify_etag=self.verify_etag,
            evictor=self._evictor(),
        )

    def _locked_open(self, url: str, name: str, lock: ShardLock, lease: Lease) -> tuple[BinaryIO, str | None]:
        """With the entry's lock held: re-check, repair, or start the fill (which owns the lock)."""
        path = self.layout.data(name)
        try:
            hit = open_hit(self.layout, name)
            if isinstance(hit, io.FileIO):
                lock.release()
                self._count("hits", url)
                return cast(BinaryIO, LeasedFile(hit, lease)), path
            if isinstance(hit, Corrupt):
                remove_corrupt(self.layout, name, url, hit, self._stats)
            filler = self._filler()
            filler.clean_temps(name, self.timing.stale_after)
            return filler.start(url, name, lock, lease)
        except BaseException:
            if lock.held:
                lock.release()
            raise
