"""The map-style dataset over single-sample objects: ``ObjectDataset``.

::

    ds = ss.ObjectDataset("s3://bucket/train/", transform=ss.autodecode.Decoder(["rgb8"]))
    loader = DataLoader(ds, batch_size=64, sampler=DistributedSampler(ds), num_workers=8)

Any sampler works (random, weighted, ``DistributedSampler``): the dataset only maps a sample
number to a sample. ``__getitems__`` (which the DataLoader calls with a whole batch of numbers)
fetches the batch's objects concurrently, so a batch costs about one request's latency instead
of one per object. Samples are the tar path's dicts (``__key__``, ``__url__``, one field of bytes
per extension) after the optional ``transform``.

Errors: a sample that cannot be fetched (missing object, 403, retries exhausted) goes to
``handler``. When it allows skipping, the sample is replaced by the next sample number that can
be fetched (the batch keeps its size, so DDP ranks keep equal batch counts) and ``skipped``
counts it; when it does not, the error is raised in the worker and reaches the training loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import SourceError
from ..handlers import Handler, reraise_exception
from ..objects import DEFAULT_WINDOW, Manifest, ObjectReader
from ..pipeline.base import StageStats
from ..pipeline.iterable import MapDatasetBase
from ..readers.objects import open_table

__all__ = ["ObjectDataset"]

log = logging.getLogger(__name__)

#: How many following samples are tried in place of one that cannot be fetched.
_REPLACEMENTS = 16


class ObjectDataset(MapDatasetBase):  # type: ignore[type-arg]
    """A map-style dataset over a prefix of single-sample objects.

    Args:
        url: the prefix: ``s3://bucket/prefix/``, a local directory, or ``http(s)://`` with a
            manifest.
        manifest: a key list / JSONL / S3 Inventory CSV path or URL, a list of keys, or a
            :class:`~shardstream.objects.Manifest`; default: list the prefix once (here, in the
            main process; workers receive the manifest).
        manifest_dir: where listings are saved and reused (default: not saved).
        storage_options: options for the sources (endpoint, credentials, ...).
        transform: applied to every sample dict (e.g. a decoder).
        handler: error policy for a sample that cannot be fetched (default: raise).
        window: requests in flight per process for one batch (default 32).
        gather: the longest pause, in seconds, the S3 fetch loop takes to gather more answers
            before it hands them over (default 2 ms; 0 turns gathering off); see ``ObjectStream``.
    """

    def __init__(
        self,
        url: str,
        *,
        manifest: str | Manifest | Sequence[str] | None = None,
        manifest_dir: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        transform: Callable[[dict[str, Any]], Any] | None = None,
        handler: Handler = reraise_exception,
        window: int = DEFAULT_WINDOW,
        gather: float | None = None,
    ) -> None:
        self.url = url
        table = open_table(url, manifest, storage_options, manifest_dir)
        self.reader = ObjectReader(table, storage_options, window=window, gather=gather)
        self.transform = transform
        self.handler = handler
        self.stats = StageStats()

    def __len__(self) -> int:
        return len(self.reader)

    def __repr__(self) -> str:
        return f"ObjectDataset(map-style, {self.reader.table!r}, window={self.reader.window})"

    @property
    def keys(self) -> list[str]:
        """Sample keys, by sample number."""
        return self.reader.table.keys

    @property
    def skipped(self) -> int:
        """Samples replaced because they could not be fetched (in this process)."""
        return self.stats.skipped

    @property
    def throttles(self) -> int:
        """503 SlowDown / 429 answers seen by this process (each one retried, never fatal)."""
        return self.reader.throttles

    def __getitem__(self, index: int) -> Any:
        return self._finish(index, self.reader.many([self._check(index)])[0])

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        got = self.reader.many([self._check(i) for i in indices])
        return [self._finish(i, sample) for i, sample in zip(indices, got, strict=True)]

    def _check(self, index: int) -> int:
        n = len(self.reader)
        if not -n <= index < n:
            raise IndexError(f"sample number {index} is out of range for {n} samples")
        return index % n

    def _finish(self, index: int, sample: dict[str, Any] | BaseException) -> Any:
        tries = 0
        while isinstance(sample, BaseException):
            if not self.handler(sample) or not isinstance(sample, SourceError):
                raise sample
            self.stats.record(sample)
            tries += 1
            if tries > _REPLACEMENTS:
                raise SourceError(
                    f"samples {index}..{index + tries - 1} of {self.url} could not be fetched; last "
                    f"error: {sample}. Check the prefix and the credentials",
                ) from sample
            replacement = (index + tries) % len(self.reader)
            log.warning("sample %d replaced by sample %d: %s", index, replacement, sample)
            sample = self.reader.many([replacement])[0]
        return self.transform(sample) if self.transform is not None else sample

    def close(self) -> None:
        """Stop this process's fetch threads (they start again on the next access)."""
        self.reader.close()

    def __del__(self) -> None:
        reader = self.__dict__.get("reader")
        if reader is not None:
            reader.close()
