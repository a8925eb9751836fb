"""The fill path of a miss: clean leftovers, reserve, stream into a temp file, verify, publish.

With the entry's lock held, :meth:`Filler.start` opens the whole object through the wrapped
:class:`~shardstream.sources.Source`, learns its size (and ETag),
reserves the space (through the :class:`~._evict_pass.Evictor` when there is a size limit) and
starts a :class:`~._tee.Fill` copying into a uniquely named temp file, with a
:class:`~._tee.TeeReader` for this process following it. After the last byte the size (and,
opted in, the MD5 against an S3-style ETag) is checked, the metadata record is written, and the
temp file is renamed to the published name; only then is the lock released. A shard larger than
the whole cache is read uncached.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, cast

from ..errors import CacheError, redact_url
from ..sources import Source
from . import eviction
from ._evict_pass import Evictor
from ._tee import Fill, TeeReader, is_full
from .layout import Layout
from .lease import Lease
from .lock import ShardLock
from .owner import Owner, remove_quietly
from .stats import CacheStats

__all__ = ["Filler"]

log = logging.getLogger("shardstream.cache")

_MD5_ETAG = re.compile(r'^"?([0-9a-fA-F]{32})"?$')

_WARNED_FULL: set[str] = set()  # cache roots already warned about in this process


@dataclass(frozen=True)
class Filler:
    """Fills entries of the cache at ``layout`` as ``owner``; ``evictor`` is ``None`` without a limit.

    ``count(event, url)`` counts a ``misses`` or ``uncached`` event; ``source`` opens the URLs.
    """

    layout: Layout
    owner: Owner
    stats: CacheStats
    count: Callable[[str, str], None]
    source: Source
    verify_etag: bool
    evictor: Evictor | None

    def clean_temps(self, name: str, stale_after: float) -> None:
        """Remove temp files of ``name`` left by dead processes (the entry's lock is held)."""
        tmp = self.layout.tmp(name, self.owner)
        directory, prefix = os.path.dirname(tmp), os.path.basename(self.layout.data(name)) + "~"
        try:
            candidates = [os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(prefix)]
        except FileNotFoundError:
            return
        for path in eviction.stale_temps(
            self.layout, candidates, owner=self.owner, stale_after=stale_after, lock_held=True
        ):
            if remove_quietly(path):
                log.info("cache: removed leftover temp file %s of a dead process", path)
                self.stats.add(temp_cleaned=1)

    def start(self, url: str, name: str, lock: ShardLock, lease: Lease) -> tuple[BinaryIO, str | None]:
        """Start filling ``name`` from ``url``; the fill releases ``lock`` when it is done."""
        cache_size = None if self.evictor is None else self.evictor.limit
        src = self.source.open(url)
        try:
            expected: int | None = getattr(src, "size", None)
            etag: str | None = getattr(src, "etag", None)
            if expected is None:
                try:
                    info = self.source.stat(url)
                    expected, etag = info.size, etag or info.etag
                except Exception as exc:  # pipes and some servers cannot tell: size unchecked
                    log.debug(
                        "cache: no size for %s (%s); download not size-checked",
                        redact_url(url),
                        redact_url(exc),
                    )
            if cache_size is not None and expected is not None and expected > cache_size:
                log.warning(
                    "shard %s (%d bytes) is larger than cache_size=%d: reading it without caching; "
                    "raise cache_size to cache it",
                    redact_url(url),
                    expected,
                    cache_size,
                )
                lock.release()
                lease.release()
                self.count("uncached", url)
                return src, None
            try:
                tmp, fd = self._reserve(name, expected)
            except OSError as exc:
                if not is_full(exc):
                    raise
                remove_quietly(self.layout.tmp(name, self.owner))
                self._full(url, exc)
                lock.release()
                lease.release()
                return src, None
        except BaseException:
            src.close()
            raise
        self.count("misses", url)
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

        def reopen(offset: int) -> BinaryIO:
            return self.source.open(url, offset=offset)

        md5 = self.verify_etag and etag is not None and _MD5_ETAG.match(etag) is not None
        try:
            fill = Fill(
                src,
                fd,
                label=name,
                finish=finish,
                cleanup=cleanup,
                md5=md5,
                on_full=lambda exc: self._full(url, exc),
            )
            reader = TeeReader(fill, tmp, lease.release, local_path=self.layout.data(name), reopen=reopen)
        except BaseException:
            os.close(fd)
            src.close()
            remove_quietly(tmp)
            raise
        fill.start()
        return cast(BinaryIO, reader), self.layout.data(name)

    def _full(self, url: str, exc: OSError) -> None:
        """Count a shard read uncached because the cache's filesystem is full; warn once."""
        self.count("uncached", url)
        root = str(self.layout.root)
        if root in _WARNED_FULL:
            log.debug("cache: %s read uncached: %s is full (%s)", redact_url(url), root, exc.strerror)
            return
        _WARNED_FULL.add(root)
        log.warning(
            "the cache directory %s has no room (%s) for %s: reading it directly from the source, "
            "uncached, and so for the next shards that do not fit. Free space there, lower "
            "cache_size below the free space so that eviction makes room, or point cache_dir at a "
            "larger filesystem.",
            root,
            exc.strerror or exc,
            redact_url(url),
        )

    def _reserve(self, name: str, expected: int | None) -> tuple[str, int]:
        """Create the temp file; with a size limit, evict first and reserve ``expected`` bytes."""
        tmp = self.layout.tmp(name, self.owner)
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        if self.evictor is None:
            return tmp, os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        return tmp, self.evictor.reserve(tmp, expected)

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
        self.stats.add(bytes_fetched=written)
        log.info(
            "cache filled %s -> %s bytes=%d seconds=%.3f",
            redact_url(url),
            data,
            written,
            time.monotonic() - started,
        )
