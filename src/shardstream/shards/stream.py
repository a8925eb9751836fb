"""The epoch's shards read back to back as one stream of samples; any range of it as runs.

Every mode of the epoch plan cuts this stream: a slot's samples are a few ranges of stream
positions, and :meth:`SampleStream.runs` turns a range into runs of samples of single shards by
bisection over the cumulative counts. That is ``O(log n)`` per range plus one step per shard the
range touches, so a slot is cut without walking the shards before it (the first planner walked
from the stream's start for every rank: quadratic in the shard count).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .runs import Run

__all__ = ["SampleStream"]


class SampleStream:
    """Shards ``urls[order[0]], urls[order[1]], ...`` as one stream of samples.

    Position ``p`` is the stream's ``p``-th sample; positions past the end wrap around to the
    start (exact mode's padding may repeat more samples than one rank holds).

    Args:
        urls: every shard of the dataset (kept by reference, not copied).
        order: indices into ``urls`` of the epoch's shards in stream order (non-empty ones only).
        sizes: sample count of each shard in ``order`` (same length, all positive).

    Attributes:
        bounds: ``bounds[i]`` is the position of the ``i``-th shard's first sample, and
            ``bounds[-1]`` the total (``len(order) + 1`` values).
        total: samples in the stream.
    """

    def __init__(
        self, urls: Sequence[str], order: npt.NDArray[np.int64 | np.int32], sizes: npt.NDArray[np.int64]
    ) -> None:
        self.urls, self.order = urls, order
        self.bounds = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.bounds[1:])
        self.total = int(self.bounds[-1])

    def __len__(self) -> int:
        return len(self.order)

    def url(self, i: int) -> str:
        """The ``i``-th shard of the stream."""
        return self.urls[self.order.item(i)]

    def runs(self, start: int, stop: int, pad: bool = False) -> list[Run]:
        """Samples ``[start, stop)`` of the stream as runs, one per shard touched, in order.

        Args:
            start / stop: stream positions; positions past the end wrap around.
            pad: the runs' padding marker (exact mode). Default False.
        """
        bounds, total, urls, order = self.bounds, self.total, self.urls, self.order
        pieces: list[Run] = []
        while start < stop:
            lap = start - start % total  # where this pass over the stream starts
            lo, hi = start - lap, min(stop - lap, total)
            i = int(bounds.searchsorted(lo, side="right")) - 1
            while lo < hi:
                first, end = bounds.item(i), bounds.item(i + 1)
                n = min(hi, end) - lo
                pieces.append(Run(urls[order.item(i)], lo - first, n, pad=pad))
                lo += n
                i += 1
            start = lap + hi
        return pieces
