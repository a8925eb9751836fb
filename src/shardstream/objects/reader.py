"""Samples of a manifest by number: one at a time, a batch at once, or a stream fetched ahead.

:class:`ObjectReader` is what the map-style and iterable datasets share. It is picklable (the
manifest and options travel; threads, connections and counters are made again in each process)
and builds samples as the tar path does: ``__key__``, ``__url__`` (the prefix) and one field of
bytes per extension.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..forks import GatedExecutor
from ..net.multiplex import AVAILABLE as LOOP_AVAILABLE
from ._aimd import Concurrency
from ._get import ObjectGetter
from .fetch import DEFAULT_MAX_BYTES, DEFAULT_WINDOW, FetchAhead
from .fetch_loop import loop_fetch
from .samples import SampleTable

__all__ = ["ObjectReader"]


class ObjectReader:
    """Fetches samples of a :class:`SampleTable` for the process it is used in.

    Args:
        table: the samples.
        storage_options: options for the sources.
        window: requests in flight per process at most (default 32).
        max_bytes: bytes fetched ahead and not yet consumed, at most (default 256 MiB).
        ordered: deliver a stream in order (default) or as samples complete.
        loop: fetch S3 objects on the consuming thread's epoll loop (default, on Linux) rather
            than on a thread per request in flight (see :mod:`.fetch_loop`).
        gather: let that loop gather answers briefly before it waits, while many requests are in
            flight (default; fewer wake-ups, less CPU per sample under load, see
            :mod:`.fetch_loop`).
    """

    def __init__(
        self,
        table: SampleTable,
        storage_options: Mapping[str, Any] | None = None,
        *,
        window: int = DEFAULT_WINDOW,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ordered: bool = True,
        loop: bool = True,
        gather: bool = True,
    ) -> None:
        if window < 1:
            raise ConfigurationError(f"window={window}: need at least 1 request in flight")
        self.table = table
        self.storage_options = dict(storage_options or {})
        self.window = window
        self.max_bytes = max_bytes
        self.ordered = ordered
        self.loop = loop
        self.gather = gather
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._stop = threading.Event()
        self.concurrency = Concurrency(self.window)
        self.getter = ObjectGetter(self.storage_options, self.concurrency, self._stop)
        self._pool: GatedExecutor | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        keep = ("table", "storage_options", "window", "max_bytes", "ordered", "loop", "gather")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _here(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's threads and counters are not ours
            self._reset()

    def __len__(self) -> int:
        return len(self.table)

    @property
    def throttles(self) -> int:
        return self.concurrency.throttles

    def sample(self, i: int) -> dict[str, Any]:
        """Sample ``i``, its objects fetched one after another; raises on failure."""
        self._here()
        table = self.table
        manifest = table.manifest
        sample: dict[str, Any] = {"__key__": table.keys[i], "__url__": manifest.root}
        for ext, j in table.fields[i]:
            sample[ext] = self.getter.get(manifest.root + manifest.keys[j], manifest.sizes[j])
        return sample

    def many(self, indices: Sequence[int]) -> list[dict[str, Any] | BaseException]:
        """Samples ``indices`` fetched concurrently (a DataLoader batch), each a dict or its error."""
        self._here()
        if len(indices) <= 1:
            return [self._try(i) for i in indices]
        if self._loop_source() is not None:
            got = dict(self.stream(indices))
            return [got[i] for i in indices]
        pool = self._threads()
        self._stop.clear()
        return list(pool.map(self._try, indices))

    def _try(self, i: int) -> dict[str, Any] | BaseException:
        try:
            return self.sample(i)
        except Exception as exc:
            return exc

    def _threads(self) -> GatedExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = GatedExecutor(self.window, thread_name_prefix="shardstream-batch")
            return self._pool

    def stream(self, indices: Iterable[int]) -> Iterator[tuple[int, dict[str, Any] | BaseException]]:
        """``(i, sample or error)`` for ``indices``, fetched ahead (see :class:`FetchAhead`)."""
        self._here()
        source = self._loop_source()
        if source is not None:  # S3: one thread on epoll (see fetch_loop)
            return loop_fetch(self, source, indices)
        engine: FetchAhead[int, dict[str, Any]] = FetchAhead(
            self.sample,
            window=self.window,
            max_bytes=self.max_bytes,
            nbytes=self.table.nbytes,
            ordered=self.ordered,
            stop=self._stop,
        )
        return engine.run(indices)

    def _loop_source(self) -> Any:
        """The source, when its objects can be fetched by the epoll loop; else None."""
        if not LOOP_AVAILABLE or not self.loop:
            return None
        source = self.getter.source_for(self.table.manifest.root)
        return source if hasattr(source, "get_request") else None

    def close(self) -> None:
        """Stop the batch threads of this process (a later call starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=True, cancel_futures=True)
