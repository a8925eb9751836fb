"""Elastic resume of a mixture: each source's unread samples, over every old worker, re-split.

An old worker's mixture position (``pipeline/mix.py``) holds, per source, its pass number and the
source pipeline's position; the stages after the mixture hold the positions ``[source, pass,
token]`` of items a shuffle buffer or a map stage on threads had pulled. For each source,
:func:`~.elastic.unread` turns them into runs of samples, as for a single dataset (nothing is
read). What the old worker would still have yielded depends on the stop rule:

* ``"longest"``: every sample left (each source is read to its end once).
* ``"first_exhausted"``, ``"all_exhausted"``: the old worker would have stopped part-way through
  some sources. Its schedule is replayed without reading (:func:`~shardstream.shards.mixing.
  picks_before_stop`) and each source keeps exactly the items it would still have given; with
  ``"all_exhausted"`` these run into the source's next passes of that worker's old share. This
  needs every source's sample counts (a planned split, ``"equal"`` or ``"exact"``), and a source
  cut part-way through a pass must not shuffle inside (which of its samples come first depends on
  its shuffle buffer): both are refused otherwise, naming the fix.
* ``"never"``: no end. Each source's old workers are brought to the highest pass any of them had
  reached: the rest of each one's pass and, for those behind, their whole shares of the passes up
  to it. The new workers read that, then start the next pass planned for the new world (under the
  usual rule), so every pass of every source is read exactly once over the world.

So the rest of the epoch yields, per source, exactly the multiset of samples the uninterrupted run
(with the old world) would have yielded after the saved step (``"never"``: per pass). The new
workers run a fresh schedule with the mixture's weights (phases from its seed) over what they were
dealt; but for ``"never"`` the pass ends when all of it is read (a source that runs out leaves, the
others go on renormalised). With every count known each new slot gets its number of items from
:func:`~shardstream.shards.elastic.batch_quotas` (every rank the same number of batches, or a
:class:`StateError` when no split can give that), shared among the sources in proportion to what
each has left, so they run out together; shard-list sources (``"longest"``, ``"never"``) are dealt
whole runs round robin.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import StateError, redact_url
from ..pipeline.base import MapStage, RunContext, StateDict, pending_positions
from ..pipeline.batch import Batched
from ..pipeline.mix import PASS_STRIDE, MixSource
from ..pipeline.pipeline import DataPipeline
from ..pipeline.seams import finished_epoch
from ..pipeline.shuffle import Shuffle
from ..shards.elastic import apportion, batch_quotas, cut, deal
from ..shards.mixing import picks_before_stop
from ..shards.plan import EpochPlan
from ..shards.runs import Run
from ..shards.world import World
from .elastic import Unread, reader_index, unread

__all__ = ["resplit_mixture"]

log = logging.getLogger(__name__)

_TRIVIAL: tuple[StateDict, ...] = ({}, {"seen": True}, {"seen": False})
_FIX = "resume with the same num_workers and world size"


class _Sources:
    """The mixture's sources and what re-splitting them needs: old plans (computed once per
    source and pass epoch), the old batch sizes."""

    def __init__(self, mix: MixSource, epoch: int, saved: dict[str, Any]) -> None:
        self.mix, self.epoch = mix, epoch
        self.plans: dict[tuple[int, int], dict[tuple[int, int], EpochPlan]] = {}
        self.batches: list[int | None] = []
        for i, src in enumerate(mix.sources):
            if not isinstance(src, DataPipeline) or src.repetitions != 1 or src.nsamples > 0:
                raise StateError(
                    f"source {i} of the mixture is not a plain shardstream pipeline ({type(src).__name__}"
                    ", or one with repeat()/with_epoch()), so its position cannot be re-split over other "
                    f"workers; {_FIX}"
                )
            try:
                reader_index(src)
            except StateError as exn:
                raise StateError(f"source {i} of the mixture: {exn}") from None
            own = saved.get(f"source{i}")
            self.batches.append(own.get("split_batch") if isinstance(own, dict) else None)

    def world(self, i: int, world: World) -> World:
        src = self.mix.sources[i]
        return src.world.with_worker(world.worker, world.num_workers) if src.world is not None else world

    def unread(self, i: int, passes: int, world: World, state: StateDict | None) -> Unread:
        """Source ``i``'s unread samples of its pass ``passes`` in old slot ``world`` (``state``:
        its pipeline's position, ``None`` for the pass from its start)."""
        epoch = self.epoch + passes * PASS_STRIDE
        position = None if state is None else {"epoch": epoch, "nodes": state.get("nodes")}
        plans = self.plans.setdefault((i, epoch), {})
        return unread(self.mix.sources[i], epoch, self.world(i, world), position, self.batches[i], plans)


class _OldWorker:
    """One old ``(rank, worker)``'s mixture position, source by source."""

    def __init__(self, sources: _Sources, world: World, pipeline: Any, state: StateDict) -> None:
        self.sources, self.world, self.seed = sources, world, pipeline.seed
        nodes: list[StateDict | None] = list(state.get("nodes") or [None] * len(pipeline.pipeline))
        mix: StateDict = nodes[0] or {}
        n = len(sources.mix.sources)
        self.state = mix
        self.stop = str(mix.get("stop", sources.mix.stop))
        self.passes = [int(x) for x in mix.get("passes", [0] * n)]
        self.ended = [bool(x) for x in mix.get("ended", [False] * n)]
        self.active = [bool(x) for x in mix.get("active", [True] * n)]
        saved = mix.get("sources") or [None] * n
        self.dealt: list[Any] = list(mix.get("dealt") or [None] * n)
        self.now = [
            sources.unread(i, self.passes[i], world, saved[i]) if self.active[i] else None for i in range(n)
        ]
        self.held: list[list[Run]] = [[] for _ in range(n)]  # picked, held after the mixture
        for stage, node_state in zip(pipeline.pipeline[1:], nodes[1:], strict=True):
            if isinstance(stage, Shuffle) and node_state:
                tokens = node_state.get("buffer", [])
            elif isinstance(stage, MapStage) and (pending := pending_positions(node_state)) is not None:
                tokens = pending
            elif node_state is not None and node_state not in _TRIVIAL:
                raise StateError(
                    f"stage {type(stage).__name__} after the mixture holds a position "
                    f"({redact_url(node_state, limit=80)}) that cannot be re-split over other workers; {_FIX}"
                )
            else:
                continue
            for i, passes, token in tokens:
                self.held[int(i)].append(self.locate(int(i), int(passes), token))

    def locate(self, i: int, passes: int, token: Any) -> Run:
        """The sample at source ``i``'s position ``token`` of its pass ``passes``."""
        now = self.now[i]
        if now is not None and passes == self.passes[i]:
            return now.locate(token)
        dealt = self.dealt[i]
        state = dealt[1] if dealt is not None and int(dealt[0]) == passes else None
        return self.sources.unread(i, passes, self.world, state).locate(token)

    def next_passes(self, i: int) -> Iterator[list[Run]]:
        """Source ``i``'s whole passes of this worker's old share after its current one."""
        passes = self.passes[i]
        while True:
            passes += 1
            yield self.sources.unread(i, passes, self.world, None).runs

    def kept(self, last_pass: list[int]) -> list[list[Run]]:
        """Per source, the runs of samples this worker would still have yielded."""
        n = len(self.now)
        if self.stop == "never":
            return [self.held[i] + self._to_pass(i, last_pass[i]) for i in range(n)]
        if self.stop == "longest":
            return [self.held[i] + (now.runs if now is not None else []) for i, now in enumerate(self.now)]
        return self._until_stop()

    def _to_pass(self, i: int, last: int) -> list[Run]:
        now = self.now[i]
        if now is None:
            return []  # it had left the mixture (a pass of no samples): it never comes back
        runs = list(now.runs)
        for _, later in zip(range(self.passes[i], last), self.next_passes(i), strict=False):
            if not later:
                break  # a pass of no samples: it would have left the mixture there
            runs.extend(later)
        return runs

    def _until_stop(self) -> list[list[Run]]:
        n, mix = len(self.now), self.sources.mix
        passes: list[list[list[Run]]] = [[now.runs] if now is not None else [] for now in self.now]

        def sizes(i: int) -> Iterator[int]:
            yield _count(i, passes[i][0], self.stop)
            for later in self.next_passes(i):
                passes[i].append(later)
                yield _count(i, later, self.stop)

        ctx = RunContext(self.sources.epoch, self.world, self.seed)
        schedule = mix.schedule(ctx, self.state.get("schedule"))
        feeds = [sizes(i) for i in range(n)]
        taken = picks_before_stop(schedule, self.active, self.ended, feeds, self.stop == "all_exhausted")
        kept = []
        for i in range(n):
            runs: list[Run] = []
            want = taken[i]
            for one in passes[i]:
                size = sum(r.count or 0 for r in one)
                if want >= size:
                    runs.extend(one)
                    want -= size
                    continue
                if want:
                    now = self.now[i]
                    if now is not None and now.shuffled:
                        raise StateError(
                            f"source {i} of the mixture shuffles its samples (a shuffle inside the source) "
                            f"and the old worker {self.world.worker} of rank {self.world.rank} would have "
                            f"stopped part-way through its pass (stop={self.stop!r}): which of its samples "
                            "it would still have yielded depends on the shuffle buffer. Shuffle after the "
                            "mixture instead (ss.Mix(...).shuffle(n)), use stop='longest', or " + _FIX
                        )
                    runs.extend(cut(one, [want, size - want])[0])
                break
            kept.append(self.held[i] + runs)
        return kept


def _count(i: int, runs: Sequence[Run], stop: str) -> int:
    if any(r.count is None for r in runs):
        raise StateError(
            f"source {i} of the mixture reads a shard list (split='shards'), whose sample counts are "
            f"unknown, so where each old worker's mixture would have stopped (stop={stop!r}) cannot be "
            "known. Give every source a planned split (split='equal' or 'exact'), use stop='longest', or "
            + _FIX
        )
    return sum(r.count or 0 for r in runs)


def _batch_size(pipeline: Any, loader_batch: int | None) -> int:
    """The batch the mixture's items are grouped in per worker: a batching stage after the mixture,
    else the loader's batch size, else 1."""
    for stage in pipeline.pipeline[1:]:
        if isinstance(stage, Batched):
            return int(stage.batchsize)
    return int(loader_batch or 1)


def resplit_mixture(
    pipeline: Any,
    epoch: int,
    old: Sequence[tuple[World, StateDict | None]],
    world_size: int,
    rank: int,
    num_workers: int,
    *,
    saved: dict[str, Any],
    loader_batch: int | None = None,
) -> list[StateDict]:
    """States for the ``num_workers`` workers of ``rank`` (of ``world_size``) that continue
    ``epoch`` of the mixture ``pipeline`` (a pipeline starting with a :class:`MixSource`) with what
    the old ``(world, state)`` workers would still have yielded (``saved``: the fingerprint the
    states were taken with; ``loader_batch``: the loader's batch size).

    Raises:
        StateError: a position that cannot be re-split exactly (see the module docstring).
    """
    mix: MixSource = pipeline.pipeline[0]
    sources = _Sources(mix, epoch, saved)
    if len({w.rank for w, _ in old}) > 1 or world_size > 1:  # positions move between ranks
        owned = [i for i, src in enumerate(mix.sources) if src.world is not None]
        if owned:
            raise StateError(
                f"sources {owned} of the mixture have their own world=, which fixes their ranks: their "
                f"positions cannot be re-split over another world size; {_FIX}"
            )
    workers: list[_OldWorker] = []
    for world, state in old:
        if finished_epoch(state, epoch) or (state or {}).get("finished"):
            continue  # that worker had yielded all of its share
        state = state or {}
        for key in ("replay", "taken", "pass"):
            if state.get(key):
                raise StateError(
                    f"the saved position holds {key!r} (a stage that cannot save its state, or a "
                    f"with_epoch/repeat window over the mixture), which cannot be re-split; {_FIX}"
                )
        workers.append(_OldWorker(sources, world, pipeline, state))
    n = len(mix.sources)
    last = [max((w.passes[i] for w in workers if w.active[i]), default=0) for i in range(n)]
    kept: list[list[Run]] = [[] for _ in range(n)]
    for w in workers:
        for i, runs in enumerate(w.kept(last)):
            kept[i].extend(runs)
    log.info(
        "elastic resume of a mixture (stop=%r): %s samples left per source, over %d ranks x %d workers",
        mix.stop,
        [sum(r.count or 0 for r in runs) if all(r.count is not None for r in runs) else "?" for runs in kept],
        world_size,
        num_workers,
    )
    slots = world_size * num_workers
    known = all(r.count is not None for runs in kept for r in runs)
    if known and mix.stop != "never":
        totals = [sum(r.count or 0 for r in runs) for runs in kept]
        quotas = batch_quotas(sum(totals), world_size, num_workers, _batch_size(pipeline, loader_batch))
        shares = apportion(totals, quotas)
        parts = [cut(runs, share) for runs, share in zip(kept, shares, strict=True)]
    else:
        parts = [cut(runs, _even(runs, slots)) if known else deal(runs, slots) for runs in kept]
    states: list[StateDict] = []
    for slot in range(rank * num_workers, (rank + 1) * num_workers):
        own = []
        for i, src in enumerate(mix.sources):
            nodes: list[StateDict | None] = [None] * len(src.pipeline)
            nodes[reader_index(src)] = {"units": [u.to_json() for u in parts[i][slot]]}
            own.append({"nodes": nodes})
        mixed: StateDict = {
            "passes": last,
            "ended": [False] * n,
            "active": [True] * n,
            "sources": own,
            "dealt": [[last[i], own[i]] for i in range(n)],
        }
        if mix.stop != "never":
            mixed["stop"] = "longest"  # every source reads what it was dealt, once
        states.append({"epoch": epoch, "nodes": [mixed] + [None] * (len(pipeline.pipeline) - 1)})
    return states


def _even(runs: Sequence[Run], slots: int) -> list[int]:
    total = sum(r.count or 0 for r in runs)
    return [total // slots + (s < total % slots) for s in range(slots)]
