"""Which source a mixture takes its next item from: pure schedules whose state is a few numbers.

Two schedules, both planned a block of picks at a time (a mixture asks for the next block when
the last one is used up, so the per-item cost is one list step):

* :class:`Balanced`, the low-discrepancy interleave of ``ss.Mix``. Source ``i`` with weight
  ``w_i`` (normalised) and phase ``p_i`` in ``[0, 1)`` gives its ``k``-th item the *due time*
  ``(k + p_i) / w_i``; the mixture takes items in order of due time (ties by source index). After
  ``t`` items every source has taken ``w_i * t`` items up to about one (the error never grows), so
  shares hold in every window, not only on average. The order is a pure function of the counts
  taken so far: the state is those counts, and a block planned after a restore is the block the
  uninterrupted run would have continued with. A source that leaves the mixture (it ran out and
  is not restarted) just has no more due times: the others keep their relative rates, so their
  weights are renormalised by construction. Equal weights with phases ``i / n`` are a strict
  rotation (WebDataset's ``RoundRobin``).
* :class:`RandomDraws`, WebDataset's ``RandomMix``: each pick is an independent draw with
  ``probs`` over the sources still in the mixture (a uniform number against the cumulative
  normalised weights, as WebDataset draws). The state is the number of draws; a restore replays
  them on a fresh generator (tens of nanoseconds per draw).

:func:`picks_before_stop` replays a schedule without reading anything: how many more items each
source gives before the mixture's pass stops (an elastic resume keeps exactly those).

Rejected: independent coin flips for ``ss.Mix`` (a 600-sample window strays by several points
about one time in twenty), and a per-item argmax of deficits (the same order at a Python loop
over the sources per item; the block plan costs a few numpy calls per 4,096 items).
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any, Protocol

import numpy as np

from .world import derive_seed

__all__ = ["BLOCK", "Balanced", "RandomDraws", "Schedule", "balanced_count", "phases", "picks_before_stop"]

#: Picks planned at once: a few numpy calls per block (little per pick), a list step per pick.
BLOCK = 4096


def phases(n: int, seed: int | None) -> list[float]:
    """Each source's phase in ``[0, 1)``, drawn from ``seed`` alone (the same on every rank and
    worker and in every epoch, so the mixture's length never depends on where it runs)."""
    rng = random.Random(derive_seed(seed, "mix-phases", n))
    return [rng.random() for _ in range(n)]


def _due(k: int, phase: float, weight: float) -> float:
    """When item ``k`` of a source is due (the one formula every plan and count uses)."""
    return (k + phase) / weight


class Balanced:
    """The low-discrepancy interleave (see the module docstring).

    Args:
        weights: one positive weight per source (normalised here).
        phase: each source's phase in ``[0, 1)`` (:func:`phases`).
        taken: items each source has taken so far (a saved state), default none.
    """

    def __init__(
        self, weights: Sequence[float], phase: Sequence[float], taken: Sequence[int] | None = None
    ) -> None:
        total = float(sum(weights))
        self.weights = [w / total for w in weights]
        self.phase = list(phase)
        self.taken = [int(x) for x in taken] if taken is not None else [0] * len(self.weights)
        self._counts: list[Any] = []  # per source: its picks among the first k of the last plan

    def plan(self, active: Sequence[bool], size: int = BLOCK) -> list[int]:
        """The next picks (about ``size``) among the ``active`` sources, without committing them."""
        live = [i for i, on in enumerate(active) if on]
        if not live:
            return []
        share = sum(self.weights[i] for i in live)
        dues, owners = [], []
        for i in live:
            count = int(size * self.weights[i] / share) + 2
            ks = np.arange(self.taken[i], self.taken[i] + count, dtype=np.float64)
            dues.append((ks + self.phase[i]) / self.weights[i])
            owners.append(np.full(count, i, dtype=np.int64))
        # Every source's planned items reach at least ``cut``: items due up to it are exactly the
        # next ones in the global order, whatever the block boundaries were.
        cut = min(float(d[-1]) for d in dues)
        due, owner = np.concatenate(dues), np.concatenate(owners)
        order = np.lexsort((owner, due))
        picked = owner[order[due[order] <= cut]]
        zero = np.zeros(1, dtype=np.int64)
        self._counts = [
            np.concatenate((zero, np.cumsum(picked == i))) if i in live else None
            for i in range(len(self.weights))
        ]
        picks: list[int] = picked.tolist()
        return picks

    def state(self, k: int = 0) -> list[int]:
        """Each source's count after the first ``k`` picks of the last plan (nothing committed)."""
        if not k:
            return list(self.taken)
        return [x if c is None else x + int(c[k]) for x, c in zip(self.taken, self._counts, strict=True)]

    def commit(self, k: int) -> None:
        """Count the first ``k`` picks of the last plan as taken."""
        self.taken = self.state(k)
        self._counts = []


def balanced_count(weights: Sequence[float], phase: Sequence[float], sizes: Sequence[int], last: bool) -> int:
    """Items a :class:`Balanced` mixture of sources of ``sizes`` items per pass yields before it
    ends: at the first pick that finds a source run out (``last=False``), or at the pick that
    finds the last source run out for the first time, the others repeating their passes
    meanwhile (``last=True``)."""
    total = float(sum(weights))
    w = [x / total for x in weights]
    ends = [(_due(n, p, x), i) for i, (n, p, x) in enumerate(zip(sizes, phase, w, strict=True))]
    if not ends:
        return 0
    stop = max(ends) if last else min(ends)
    count = 0
    for i, (n, p, x) in enumerate(zip(sizes, phase, w, strict=True)):
        if n == 0:
            continue  # empty: it leaves the mixture at its first pick
        # items k of source i taken before the stop, (due(k), i) < stop, by bisection on k
        lo, hi = 0, int(stop[0] * x) + 2
        while lo < hi:
            mid = (lo + hi) // 2
            if (_due(mid, p, x), i) < stop:
                lo = mid + 1
            else:
                hi = mid
        count += lo
    return count


class RandomDraws:
    """Independent weighted draws (WebDataset's ``RandomMix``; see the module docstring).

    Args:
        probs: one non-negative weight per source.
        seed: the generator's seed (a mixture derives it per epoch, rank and worker).
        draws: draws made so far (a saved state).
    """

    def __init__(self, probs: Sequence[float], seed: int, draws: int = 0) -> None:
        self.probs = [float(p) for p in probs]
        self.seed = seed
        self.draws = 0
        self._ahead = 0  # draws the generator has made beyond ``draws`` (the planned block)
        self._rng = random.Random(seed)
        self._rewind(int(draws))

    def _rewind(self, draws: int) -> None:
        self._rng = random.Random(self.seed)
        rand = self._rng.random
        for _ in range(draws):
            rand()
        self.draws, self._ahead = draws, 0

    def plan(self, active: Sequence[bool], size: int = BLOCK) -> list[int]:
        """The next ``size`` draws among the ``active`` sources, without committing them."""
        if self._ahead:
            self._rewind(self.draws)
        live = [i for i, on in enumerate(active) if on and self.probs[i] > 0]
        if not live:
            return []
        total = sum(self.probs[i] for i in live)
        cum = list(accumulate(self.probs[i] / total for i in live))
        top = len(live) - 1
        rand = self._rng.random
        self._ahead = size
        return [live[min(bisect_left(cum, rand()), top)] for _ in range(size)]

    def commit(self, k: int) -> None:
        """Count the first ``k`` draws of the last plan as made."""
        if k == self._ahead:
            self.draws, self._ahead = self.draws + k, 0
        else:
            self._rewind(self.draws + k)  # cut short (a source left): replay to there

    def state(self, k: int = 0) -> int:
        """The draw count after the first ``k`` draws of the last plan."""
        return self.draws + k


class Schedule(Protocol):
    """What a mixture asks of its schedule (:class:`Balanced`, :class:`RandomDraws`)."""

    def plan(self, active: Sequence[bool], size: int = BLOCK) -> list[int]: ...

    def commit(self, k: int) -> None: ...


def picks_before_stop(
    schedule: Schedule,
    active: Sequence[bool],
    ended: Sequence[bool],
    sizes: Sequence[Iterator[int]],
    last: bool,
) -> list[int]:
    """Items each source gives from now until a mixture following ``schedule`` stops, as the
    mixture's node would run (``pipeline/mix.py``), without reading anything.

    Args:
        schedule: the schedule at the saved position (it is advanced).
        active: the sources still in the mixture; ``ended``: those that ended a pass already.
        sizes: per active source, the items its current pass still holds, then the sizes of its
            next passes (asked for only when the source starts one).
        last: ``False`` (``"first_exhausted"``): stop at the first pick that finds a source run
            out; ``True`` (``"all_exhausted"``): a source that runs out starts its next pass, and
            the mixture stops at the pick that finds the last source not yet ended run out. A
            next pass of no items makes its source leave (its failed pick is spent).
    """
    n = len(active)
    active, ended = list(active), list(ended)
    left = [next(sizes[i]) if active[i] else 0 for i in range(n)]
    taken = [0] * n
    while True:
        block = schedule.plan(active)
        if not block:
            return taken
        picks, pos = np.asarray(block, dtype=np.int64), 0
        while True:
            rest = picks[pos:]
            hits = {i: np.flatnonzero(rest == i) for i in range(n) if active[i]}
            # the first pick from here that finds its source run out
            outs = [(int(h[left[i]]), i) for i, h in hits.items() if len(h) > left[i]]
            at = min(outs)[0] if outs else len(rest)
            for i, h in hits.items():
                got = int(np.searchsorted(h, at))
                taken[i] += got
                left[i] -= got
            if not outs:
                schedule.commit(len(block))
                break
            i = min(outs)[1]
            ended[i] = True
            if not last or all(ended):
                return taken
            size = next(sizes[i])
            if size > 0:  # the failed pick takes the next pass's first item
                taken[i] += 1
                left[i] = size - 1
                pos += at + 1
                continue
            active[i] = False
            schedule.commit(pos + at + 1)
            if not any(active):
                return taken
            break
