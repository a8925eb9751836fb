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
from ..sources import ManyGets
from ._aimd import Concurrency
from ._get import ObjectGetter
from .fetch import DEFAULT_MAX_BYTES, DEFAULT_WINDOW
from .fetch_loop import DEFAULT_GATHER, FetchRun, loop_fetch
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
        gather: the longest pause, in seconds, that the fetch loop takes before it waits for
            answers while many requests are in flight, so that one wake-up collects several
            (fewer wake-ups and less CPU per sample under load, at a few percent of a request's
            latency; see :mod:`.fetch_loop`). ``None`` (default): 0.002; ``0``: no pause.

    Objects are fetched through the source's ``get_many`` session (for S3 one ``epoll`` loop on
    the consuming thread, for other sources threads), in a window of requests in flight that
    halves when the store throttles and grows back as requests succeed.
    """

    def __init__(
        self,
        table: SampleTable,
        storage_options: Mapping[str, Any] | None = None,
        *,
        window: int = DEFAULT_WINDOW,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ordered: bool = True,
        gather: float | None = None,
    ) -> None:
        if window < 1:
            raise ConfigurationError(f"window={window}: need at least 1 request in flight")
        if gather is not None and not gather >= 0:
            raise ConfigurationError(
                f"gather={gather!r}: use a pause in seconds >= 0 (0 turns gathering off, None is the "
                f"default of {DEFAULT_GATHER} s)"
            )
        self.table = table
        self.storage_options = dict(storage_options or {})
        self.window = window
        self.max_bytes = max_bytes
        self.ordered = ordered
        self.gather = DEFAULT_GATHER if gather is None else float(gather)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._stop = threading.Event()
        self.concurrency = Concurrency(self.window)
        self.getter = ObjectGetter(self.storage_options, self.concurrency, self._stop)
        self._gets: ManyGets | None = None  # the source's session, kept between runs
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        keep = ("table", "storage_options", "window", "max_bytes", "ordered", "gather")
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
        got = dict(self.stream(indices))
        return [got[i] for i in indices]

    def _try(self, i: int) -> dict[str, Any] | BaseException:
        try:
            return self.sample(i)
        except Exception as exc:
            return exc

    def stream(self, indices: Iterable[int]) -> Iterator[tuple[int, dict[str, Any] | BaseException]]:
        """``(i, sample or error)`` for ``indices``, fetched ahead (see :mod:`.fetch_loop`)."""
        self._here()
        run = FetchRun(
            self.table,
            self.getter,
            self.concurrency,
            self._stop,
            self.window,
            self.max_bytes,
            self.ordered,
            self.gather,
        )
        return loop_fetch(run, self._session(), indices)

    def _session(self) -> ManyGets:
        """The source's ``get_many`` session: the one kept from the last run, unless it was closed."""
        with self._lock:
            gets = self._gets
            if gets is None or gets.closed:
                source = self.getter.source_for(self.table.manifest.root)
                gets = self._gets = source.get_many(window=self.window)
            return gets

    def close(self) -> None:
        """Close the fetch session of this process (its threads and connections; a later call
        opens another)."""
        with self._lock:
            gets, self._gets = self._gets, None
        if gets is not None and self._pid == os.getpid():
            gets.close()
