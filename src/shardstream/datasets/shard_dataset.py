"""The map-style dataset over tar shards: ``ShardDataset``, random access by byte range.

::

    ds = ss.ShardDataset("s3://bucket/train-{000000..000099}.tar", decode="rgb8")
    loader = DataLoader(ds, batch_size=64, sampler=DistributedSampler(ds), num_workers=8)

Sample ``i`` is sample ``i - starts[s]`` of shard ``s`` (shards in spec order, samples in shard
order). Its bytes ``[offset, offset + size)`` come from the shard's offsets sidecar, listed in the
``_info.json`` next to the shards, which every shardstream writer fills as it writes: the counts
table is read at construction, and each shard's sidecar the first time one of its samples is
asked for (one request per shard touched; :mod:`._shard_index`). Shards without them are read
once at construction (a warning says so; ``shardstream index`` writes them for good). A sample is one
ranged request, parsed by the streaming reader's own tar code, so it is the dict the streaming
path yields (``__key__``, ``__url__``, ``__local_path__`` for local shards, one field of bytes
per extension). ``__getitems__`` (the DataLoader's batched fetch) reads a batch's ranges
concurrently, one request per run of neighbouring samples of a shard, and keeps recent ranges in
an LRU (:mod:`._ranges`). Nothing is downloaded whole.

Processes: the dataset pickles into DataLoader workers (the index, 8 bytes per shard, travels
with it; each worker reads the sidecars it needs); threads and connections are opened in each
process on first use, fork or not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..cache import ShardCache
from ..errors import ConfigurationError, SourceError, redact_url
from ..handlers import Handler, reraise_exception
from ..pipeline.base import StageStats
from ..pipeline.iterable import MapDatasetBase
from ..sources import SchemeRouter, Source, scheme_of
from ..sources.file import local_path
from ..tar.sample_range import RangeMismatch, parse_sample
from ._ranges import RangeReader, RangeStats
from ._shard_index import SampleIndex, build_index
from .policy import CachePolicy
from .specs import Spec, check_shards, resolve_shards

__all__ = ["ShardDataset"]

log = logging.getLogger(__name__)

#: How many following samples are tried in place of one that cannot be fetched.
_REPLACEMENTS = 16

Transform = Callable[[dict[str, Any]], Any]


class ShardDataset(MapDatasetBase):  # type: ignore[type-arg]
    """A map-style dataset over the samples of tar shards (random access by sample number).

    Arguments by concern: samples (``decode`` to ``handler``); fetching (``window`` to ``source``).

    Args:
        urls: a shard spec, as every front door takes it (:mod:`shardstream.datasets.specs`:
            a brace pattern, a list, a directory, a glob, a store prefix, an ``_info.json``);
            uncompressed tar shards. Missing shards raise here (local ones by name; remote ones
            when the index the dataset reads lacks them and they cannot be read to index them).
        cache: a :class:`CachePolicy` or a cache directory: samples of shards completely in that
            shard cache are read from it; other samples are read from the origin by range and do
            not fill it (random access would download whole shards for a few samples; see
            :mod:`._ranges`). Default ``None``: no cache.
        storage_options: options for the sources (endpoint, credentials, ...).
        decode: decoding applied to every sample: WebDataset-style arguments of ``.decode()``
            (``"rgb8"``, or a tuple such as ``("pil", handle_extension("cls", int))``) or a
            callable. Default ``None``: fields stay bytes.
        transform: applied to every sample after ``decode`` (e.g. ``to_tuple``-like code).
        handler: error policy for a sample that cannot be fetched (default: raise); when
            it allows skipping, the next sample number that can be fetched takes its place
            (the batch keeps its size) and :attr:`skipped` counts it.
        window: ranged requests in flight per process (per DataLoader worker). Default 32.
        coalesce_gap: neighbouring samples of one shard whose ranges are at most this many
            bytes apart are read with one request (default 0: only ranges that touch).
        lru_bytes: bytes of recently read samples kept per process (default 64 MiB; 0: none).
        source: a :class:`~shardstream.sources.Source` to read with instead of the scheme
            registry.

    Raises:
        ConfigurationError: a compressed shard, an empty spec, an unknown storage option.
        ShardNotFoundError: local or indexed shards the spec names are missing.
        SourceError: a shard that had to be indexed could not be read.
    """

    def __init__(
        self,
        urls: Spec,
        cache: CachePolicy | str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        *,
        decode: Any = None,
        transform: Transform | None = None,
        handler: Handler = reraise_exception,
        window: int = 32,
        coalesce_gap: int = 0,
        lru_bytes: int = 64 << 20,
        source: Source | None = None,
    ) -> None:
        if window < 1 or coalesce_gap < 0 or lru_bytes < 0:
            raise ConfigurationError(
                f"{window=} must be at least 1, {coalesce_gap=} and {lru_bytes=} at least 0"
            )
        self.urls = resolve_shards(urls, storage_options=storage_options, check=False)
        if source is None:  # (remote shards: build_index reads their indexes, and reads what they lack)
            check_shards(self.urls, urls, storage_options=storage_options, remote=False)
        router = source if source is not None else SchemeRouter(storage_options, urls=self.urls)
        self.index: SampleIndex = build_index(self.urls, router, storage_options=storage_options)
        self.reader = RangeReader(
            router, window=window, coalesce_gap=coalesce_gap, lru_bytes=lru_bytes, cache=_cache(cache, router)
        )
        self.decoder: Transform | None = _decoder(decode)
        self.transform = transform
        self.handler = handler
        self.stats = StageStats()

    def __len__(self) -> int:
        return len(self.index)

    def __repr__(self) -> str:
        return (
            f"ShardDataset(map-style, shards={len(self.urls)}, samples={len(self.index)}, "
            f"reader={self.reader!r})"
        )

    @property
    def lengths(self) -> list[int]:
        """Samples per shard, in shard order."""
        return self.index.shard_lengths()

    @property
    def skipped(self) -> int:
        """Samples replaced because they could not be fetched (in this process)."""
        return self.stats.skipped

    @property
    def read_stats(self) -> RangeStats:
        """This process's ranged requests, bytes read and LRU/cache hits."""
        return self.reader.stats

    def locate(self, index: int) -> tuple[str, int, int]:
        """``(shard URL, byte offset, size)`` of sample ``index`` (reads its shard's sidecar if needed)."""
        found = self._locate([self._check(index)])[0]
        if isinstance(found, BaseException):
            raise found
        return found

    def _locate(self, numbers: Sequence[int]) -> list[tuple[str, int, int] | BaseException]:
        ranges = self.index.ranges(numbers, lambda requests: self.reader.read(requests, keep=False))
        return [r if isinstance(r, BaseException) else (self.urls[r[0]], r[1], r[2]) for r in ranges]

    def raw(self, indices: Sequence[int]) -> list[dict[str, Any] | BaseException]:
        """Samples ``indices`` as the streaming reader yields them (no decode, no transform),
        fetched concurrently; a sample that failed gets its exception."""
        numbers = [self._check(i) for i in indices]
        located = self._locate(numbers)
        requests = [r for r in located if not isinstance(r, BaseException)]
        got = iter(self.reader.read(requests) if requests else [])
        return [
            r if isinstance(r, BaseException) else self._parse(g, r, next(got))
            for g, r in zip(numbers, located, strict=True)
        ]

    def __getitem__(self, index: int) -> Any:
        return self._finish(index, self.raw([index])[0])

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        return [self._finish(i, sample) for i, sample in zip(indices, self.raw(indices), strict=True)]

    def iterate(self, indices: Sequence[int], *, batch_size: int = 64) -> Iterator[Any]:
        """Samples ``indices`` in order (a sampler's), fetched ``batch_size`` at a time: an
        iterable for ``ss.Loader(ss.DataPipeline(lambda: ds.iterate(order)), ...)``. In a
        DataLoader worker (also ``ss.Loader``'s processes), worker ``k`` of ``n`` yields the
        batches ``k, k + n, ...`` of the order."""
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        k, n = (info.id, info.num_workers) if info is not None else (0, 1)
        order = list(indices)
        for start in range(k * batch_size, len(order), n * batch_size):
            yield from self.__getitems__(order[start : start + batch_size])

    def _check(self, index: int) -> int:
        n = len(self.index)
        if not -n <= index < n:
            raise IndexError(f"sample number {index} is out of range for {n} samples")
        return int(index) % n

    def _parse(self, g: int, request: tuple[str, int, int], data: bytes | BaseException) -> Any:
        if isinstance(data, BaseException):
            return data
        url, offset, size = request
        if len(data) < size:
            return self._stale(g, request, f"the shard ends {size - len(data)} bytes before them", [])
        path = url if scheme_of(url) == "file" else None
        try:
            return parse_sample(data, url, offset, local_path=path and local_path(url))
        except RangeMismatch as exc:
            return self._stale(g, request, exc.reason, exc.keys, exc)

    def _stale(
        self,
        g: int,
        request: tuple[str, int, int],
        reason: str,
        keys: list[str],
        cause: BaseException | None = None,
    ) -> ConfigurationError:
        url, offset, size = request
        shard, local = self.index.locate(g)
        where = self.index.source(shard) or "the indexing pass at construction"
        found = f" (found key {keys[0]!r})" if keys else ""
        error = ConfigurationError(
            f"sample {g} (sample {local} of {redact_url(url)}) should be bytes {offset}-{offset + size - 1} "
            f"of that shard by {redact_url(where)}, but those bytes are not one sample: {reason}{found}. "
            "The index is stale (the shard was rewritten after it was indexed); run `shardstream "
            f"index {redact_url(url.rpartition('/')[0] or '.')}` again, or delete the index to have "
            "the shards indexed when the dataset is built"
        )
        error.__cause__ = cause
        return error

    def _finish(self, index: int, sample: dict[str, Any] | BaseException) -> Any:
        tries = 0
        while isinstance(sample, BaseException):
            if not isinstance(sample, SourceError) or not self.handler(sample):
                raise sample
            self.stats.record(sample)
            tries += 1
            if tries > _REPLACEMENTS:
                raise SourceError(
                    f"samples {index}..{index + tries - 1} could not be fetched; last error: {sample}. "
                    "Check the URLs and the credentials",
                ) from sample
            replacement = (index + tries) % len(self.index)
            log.warning("sample %d replaced by sample %d: %s", index, replacement, sample)
            sample = self.raw([replacement])[0]
        out: Any = sample if self.decoder is None else self.decoder(sample)
        return self.transform(out) if self.transform is not None else out

    def close(self) -> None:
        """Stop this process's fetch threads and drop the kept ranges (they start again on use)."""
        self.reader.close()


def _cache(cache: CachePolicy | str | None, source: Source) -> ShardCache | None:
    policy = CachePolicy(cache) if isinstance(cache, str) else cache
    if policy is None or not policy.enabled:
        return None
    return ShardCache(
        policy.tiers[0],  # (the fastest tier: complete entries there are read in place)
        cache_size=policy.size_bytes,
        url_to_name=policy.url_to_name,
        source=source,
        **dict(policy.options or {}),
    )


def _decoder(decode: Any) -> Transform | None:
    if decode is None:
        return None
    if callable(decode):
        return decode  # type: ignore[no-any-return]
    from ..decoders import make_decoder

    args = decode if isinstance(decode, tuple | list) else (decode,)
    return make_decoder(*args)
