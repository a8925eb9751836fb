"""``shardstream.wids``: the names of WebDataset's ``wids`` package, over :class:`ShardDataset`.

Code written for ``wids`` runs after changing its import to ``from shardstream import wids``::

    dataset = wids.ShardListDataset("https://host/train/shardindex.json")
    sampler = wids.ChunkedSampler(dataset, chunksize=1000, shuffle=True)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4)

Same names, arguments, index format (:mod:`shardstream.tar.wids_index`) and samples: a dict with
each field under its extension *with* the dot (``".jpg"``), as a ``BytesIO`` until a
transformation decodes it, plus ``__key__``, ``__dataset__``, ``__index__``, ``__shard__`` and
``__shardindex__``; the default transformation ``"PIL"`` decodes text, labels, JSON, NumPy and
images. What differs, on purpose:

* Nothing is downloaded whole: a sample is one ranged read of its shard (``ShardDataset``), so
  ``cache_dir``/``cache_size`` name a shard cache that is *read* when a shard is already in it,
  and ``lru_size``, ``localname`` and ``keep`` (which manage wids' downloaded shards) are accepted
  and have nothing to do.
* Pickle fields (``.pkl``/``.pickle``) are not unpickled by the default transformation (it runs
  code from the data); ``.pth`` is loaded with ``weights_only=True``.
* ``DistributedChunkedSampler`` takes an explicit ``rank``/``num_replicas`` even without an
  initialized process group (wids then ignored them), and logs instead of printing.
* S3 and HTTP options go in the extra keyword ``storage_options``.
"""

from __future__ import annotations

import functools
import io
import json
import logging
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any

from ..datasets.policy import CachePolicy
from ..datasets.shard_dataset import ShardDataset
from ..errors import ConfigurationError, redact_url
from ..pipeline.iterable import MapDatasetBase
from ..tar.wids_index import read_wids_index, resolve_wids_index

try:
    from torch.utils.data import Sampler as _SamplerBase
except ImportError:  # pragma: no cover - exercised by the no-torch test in a fresh venv

    class _SamplerBase:  # type: ignore[no-redef]
        """Stands in for torch.utils.data.Sampler when torch is not installed."""

        def __class_getitem__(cls, item: Any) -> Any:
            return cls


__all__ = [
    "ChunkedSampler",
    "DistributedChunkedSampler",
    "ShardListDataset",
    "ShardListSampler",
    "ShardedSampler",
    "default_decoder",
]

log = logging.getLogger(__name__)

Sample = dict[str, Any]


def default_decoder(sample: Sample, format: str = "PIL") -> Sample:  # noqa: A002 - wids' name
    """Decode a wids sample's fields by extension (``format``: ``"PIL"`` or ``"numpy"`` images)."""
    from ..decoders import make_decoder

    if format.lower() not in ("pil", "numpy"):
        raise ConfigurationError(f"format={format!r}; wids decodes images as 'PIL' or 'numpy'")
    fields = {k[1:]: _bytes(v) for k, v in sample.items() if k.startswith(".")}
    decoded = make_decoder("pil" if format.lower() == "pil" else "rgb8")(
        {"__key__": sample["__key__"], **fields}
    )
    out = {k: v for k, v in sample.items() if not k.startswith(".")}
    out.update({"." + k: v for k, v in decoded.items() if not k.startswith("__")})
    return out


def _bytes(value: Any) -> Any:
    return value.getvalue() if isinstance(value, io.BytesIO) else value


#: A transformation: a sample dict in, anything out (the next transformation's input).
Transformation = Callable[[Any], Any]


def _transformations(spec: Any) -> list[Transformation]:
    items = spec if isinstance(spec, list) else [spec]
    out: list[Transformation] = []
    for item in items:
        if isinstance(item, str) and item.lower() in ("pil", "numpy"):
            out.append(functools.partial(default_decoder, format=item))
        elif callable(item):
            out.append(item)
        else:
            raise ConfigurationError(
                f"transformations entry {item!r} is neither 'PIL', 'numpy' nor a callable"
            )
    return out


class ShardListDataset(MapDatasetBase):  # type: ignore[type-arg]
    """A map-style dataset over a list of shards (``wids.ShardListDataset``), read by byte range.

    Args:
        shards: a list of ``{"url": ..., "nsamples": N}`` dicts, or the path/URL (or open file)
            of a wids index JSON.
        cache_size: bytes of the shard cache in ``cache_dir``.
        cache_dir: a shard cache read for shards already in it (see the module doc).
        lru_size, localname, keep: accepted for wids code; nothing is downloaded whole.
        dataset_name: stored in ``__dataset__`` for list input (an index file gives ``name``).
        transformations: ``"PIL"`` (default), ``"numpy"``, a callable, or a list of them, applied
            in order to each sample.
        base: resolve relative shard URLs against this (default: the index file's directory).
        options: keys that override the index file's top-level keys.
        storage_options: (shardstream) options for the sources, e.g. an S3 endpoint.
    """

    def __init__(
        self,
        shards: str | IO[str] | Sequence[Mapping[str, Any]],
        *,
        cache_size: int = int(1e12),
        cache_dir: str | None = None,
        lru_size: int = 10,
        dataset_name: str | None = None,
        localname: Callable[[str], str] | None = None,
        transformations: Any = "PIL",
        keep: bool = False,
        base: str | None = None,
        options: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        del lru_size, localname, keep  # wids' whole-shard downloads: nothing to manage here
        if isinstance(shards, str):
            self.spec = read_wids_index(shards, base=base, options=options, storage_options=storage_options)
        elif isinstance(shards, Sequence):
            listed = [dict(s) for s in shards if isinstance(s, Mapping)]
            if len(listed) != len(shards) or not listed:
                raise ConfigurationError(
                    "shards= takes a non-empty list of {'url': ..., 'nsamples': N} dicts, or the "
                    "path or URL of a wids index (`shardstream index --wids` writes one)"
                )
            self.spec = {**dict(options or {}), "shardlist": listed}
        else:  # an open index file: relative URLs resolve against base= only
            self.spec = resolve_wids_index(json.load(shards), base=base or "", options=options)
        self.shards: list[dict[str, Any]] = self.spec["shardlist"]
        self.dataset_name = self.spec.get("name") or dataset_name
        cache = CachePolicy(cache_dir, cache_size) if cache_dir is not None else None
        self.dataset = ShardDataset(
            [str(s["url"]) for s in self.shards], cache=cache, storage_options=storage_options
        )
        self.lengths = [int(s["nsamples"]) for s in self.shards]
        for shard, found in zip(self.shards, self.dataset.lengths, strict=True):
            if int(shard["nsamples"]) != found:
                raise ConfigurationError(
                    f"the shard list says {redact_url(shard['url'])} has {shard['nsamples']} samples; it "
                    f"has {found}. Rewrite the list (`shardstream index --wids`)"
                )
        self.transformations = _transformations(transformations)
        log.info("ShardListDataset: %d shards, %d samples", len(self.shards), len(self.dataset))

    def add_transform(self, transform: Transformation) -> ShardListDataset:
        """Append a transformation (run after the others)."""
        self.transformations.append(transform)
        return self

    def __len__(self) -> int:
        return len(self.dataset)

    def __repr__(self) -> str:
        return f"ShardListDataset(map-style, shards={len(self.dataset.urls)}, samples={len(self.dataset)})"

    def get_stats(self) -> tuple[int, int]:
        """``(samples read, ranged requests sent)`` by this process."""
        stats = self.dataset.read_stats
        return stats.requests + stats.lru_hits + stats.cache_hits, stats.requests

    def check_cache_misses(self) -> None:
        """wids warns when too many samples miss its shard cache; ranged reads have no such cost."""

    def __getitem__(self, index: int) -> Any:
        return self._finish(int(index), self.dataset.raw([index])[0])

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        return [self._finish(int(i), s) for i, s in zip(indices, self.dataset.raw(indices), strict=True)]

    def _finish(self, index: int, raw: Sample | BaseException) -> Any:
        if isinstance(raw, BaseException):
            raise raw
        g = index % len(self.dataset)
        shard, local = self.dataset.index.locate(g)
        desc = self.shards[shard]
        sample: Any = {"." + k: io.BytesIO(v) for k, v in raw.items() if not k.startswith("__")}
        sample["__key__"] = raw["__key__"]
        sample["__dataset__"] = desc.get("dataset", self.dataset_name)
        sample["__index__"] = index
        sample["__shard__"] = desc["url"]
        sample["__shardindex__"] = local
        for transform in self.transformations:
            sample = transform(sample)
        return sample

    def close(self) -> None:
        """Stop this process's fetch threads."""
        self.dataset.close()


def _order(
    ranges: list[tuple[int, int]], rng: random.Random, *, shuffle_ranges: bool, shuffle_within: bool
) -> Iterator[int]:
    order = list(range(len(ranges)))
    if shuffle_ranges:
        rng.shuffle(order)
    for r in order:
        indices = list(range(*ranges[r]))
        if shuffle_within:
            rng.shuffle(indices)
        yield from indices


def _rng(seed: int, epoch: int) -> random.Random:
    return random.Random(f"{seed}/{epoch}")


class ShardListSampler(_SamplerBase):  # type: ignore[type-arg]
    """Shards in a random order (from the second epoch, or the first with ``shufflefirst``),
    the samples of each shard shuffled: locality for whole-shard readers (wids' ``ShardedSampler``)."""

    def __init__(
        self, dataset: Any, *, lengths: Sequence[int] | None = None, seed: int = 0, shufflefirst: bool = False
    ) -> None:
        lengths = list(dataset.lengths if lengths is None else lengths)
        starts = [sum(lengths[:i]) for i in range(len(lengths) + 1)]
        self.ranges = list(zip(starts, starts[1:], strict=False))
        self.seed, self.shufflefirst, self.epoch = seed, shufflefirst, 0

    def __iter__(self) -> Iterator[int]:
        rng = _rng(self.seed, self.epoch)
        first = self.shufflefirst or self.epoch > 0
        self.epoch += 1
        return _order(self.ranges, rng, shuffle_ranges=first, shuffle_within=True)

    def __len__(self) -> int:
        return self.ranges[-1][1] if self.ranges else 0


ShardedSampler = ShardListSampler


class ChunkedSampler(_SamplerBase):  # type: ignore[type-arg]
    """Sample numbers in chunks of ``chunksize``: chunks in a random order (from the second
    epoch, or the first with ``shufflefirst``), each chunk shuffled (``wids.ChunkedSampler``).

    Args:
        dataset: what is sampled (its ``len()``).
        dslength_per_replica: what ``len()`` reports (default: the samples drawn).
        num_samples: ``n`` (samples ``0..n-1``), a ``(lo, hi)`` range, or ``None`` (all).
        chunksize: samples per chunk. Default 2000.
        seed: base seed; each epoch has its own order. Default 0.
        shuffle: shuffle at all (default True).
        shufflefirst: shuffle the chunks' order in the first epoch too (default False).
    """

    def __init__(
        self,
        dataset: Any,
        *,
        dslength_per_replica: int = -1,
        num_samples: int | tuple[int, int] | None = None,
        chunksize: int = 2000,
        seed: int = 0,
        shuffle: bool = True,
        shufflefirst: bool = False,
    ) -> None:
        if num_samples is None:
            lo, hi = 0, len(dataset)
        elif isinstance(num_samples, int):
            lo, hi = 0, num_samples
        else:
            lo, hi = num_samples
        if chunksize < 1:
            raise ConfigurationError(f"chunksize={chunksize} must be at least 1")
        self.dslength_per_replica = dslength_per_replica if dslength_per_replica > 0 else hi - lo
        self.ranges = [(i, min(i + chunksize, hi)) for i in range(lo, hi, chunksize)]
        self.seed, self.shuffle, self.shufflefirst, self.epoch = seed, shuffle, shufflefirst, 0

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s order for the next pass."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        rng = _rng(self.seed, self.epoch)
        first = self.shufflefirst or self.epoch > 0
        self.epoch += 1
        return _order(self.ranges, rng, shuffle_ranges=self.shuffle and first, shuffle_within=self.shuffle)

    def __len__(self) -> int:
        return self.dslength_per_replica


def DistributedChunkedSampler(  # noqa: N802 - wids' name (a function returning a sampler)
    dataset: Any,
    *,
    num_replicas: int | None = None,
    num_samples: int | None = None,
    rank: int | None = None,
    shuffle: bool = True,
    shufflefirst: bool = False,
    seed: int = 0,
    drop_last: bool | None = None,
    chunksize: int = 1000000,
) -> ChunkedSampler:
    """A :class:`ChunkedSampler` over this rank's contiguous share of the samples.

    ``num_replicas``/``rank`` default to the initialized process group's, else 1 and 0. Each rank
    takes ``ceil(n / num_replicas)`` consecutive sample numbers (the last rank fewer) and reports
    that many as its ``len()``. ``drop_last`` is not supported (ignored, with a warning).
    """
    if drop_last is not None:
        log.warning("DistributedChunkedSampler ignores drop_last=%r (as wids does)", drop_last)
    if num_replicas is None or rank is None:
        import torch.distributed as dist

        initialized = dist.is_available() and dist.is_initialized()
        if num_replicas is None:
            num_replicas = dist.get_world_size() if initialized else 1
        if rank is None:
            rank = dist.get_rank() if initialized else 0
    if not 0 <= rank < num_replicas:
        raise ConfigurationError(
            f"rank={rank} must be in 0..{num_replicas - 1} (num_replicas={num_replicas})"
        )
    total = num_samples or len(dataset)
    share = -(-total // num_replicas)
    lo, hi = min(rank * share, total), min((rank + 1) * share, total)
    return ChunkedSampler(
        dataset,
        dslength_per_replica=math.ceil(len(dataset) / num_replicas),
        num_samples=(lo, hi),
        chunksize=chunksize,
        seed=seed,
        shuffle=shuffle,
        shufflefirst=shufflefirst,
    )
