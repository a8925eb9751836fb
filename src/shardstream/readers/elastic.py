"""Elastic resume: the positions saved by old workers (and ranks) become new workers' states.

:func:`remaining` turns one old ``(rank, worker)``'s saved pipeline position into the runs of
samples it had not yet yielded: the rest of the piece or shard it was reading, the pieces or
shards still ahead of it, and the samples waiting in its shuffle buffer (by position: nothing is
read here). :func:`resplit` collects them over every old worker and deals them to the new
workers of one rank (:mod:`shardstream.shards.elastic`): each new worker's state makes its
reading stage read exactly its runs (``readers/runs.py``), with the stages after it starting
fresh. The multiset of samples the rest of the epoch yields is the uninterrupted run's; the
order is new.

Only positions that can be re-split exactly are accepted: a pipeline reading with the epoch
planner (``split="equal"``/``"exact"``) or a shard list and ``ReadShards``, where the stages after
the reader hold no state but a shuffle buffer and the items map stages on threads had pulled
(both saved as positions). Anything else raises :class:`StateError` naming the stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StateError, redact_url
from ..pipeline.base import MapStage, Node, RunContext, StateDict, pending_positions
from ..pipeline.build import build_one
from ..pipeline.seams import finished_epoch
from ..pipeline.shuffle import Shuffle
from ..shards.elastic import cut, deal, slot_quotas
from ..shards.plan import EpochPlan
from ..shards.runs import Run
from ..shards.world import World
from .planned import PlannedSamples
from .read_shards import ReadShards, ahead_url

__all__ = ["Unread", "reader_index", "remaining", "resplit", "unread"]

# States that the stages after the reader may hold and still be restarted fresh.
_TRIVIAL: tuple[StateDict, ...] = ({}, {"seen": True}, {"seen": False})


def reader_index(pipeline: Any) -> int:
    """The index of ``pipeline``'s shard reader (its epoch planner or ``ReadShards``)."""
    for i, stage in enumerate(pipeline.pipeline):
        if isinstance(stage, (PlannedSamples, ReadShards)):
            return i
    raise StateError(
        "this pipeline has no shard reader (PlannedSamples or ReadShards) of its own, so its position "
        "cannot be re-split over another number of workers; resume with the same num_workers and world"
    )


@dataclass(frozen=True)
class Unread:
    """What one old ``(rank, worker)`` had not yielded of a pass, as :func:`unread` finds it.

    Attributes:
        rest: the reader's rest (the piece or shard in progress, those still ahead), in order.
        held: the items the stages after the reader had pulled and not yielded (a shuffle
            buffer, the items map stages on threads had in flight), one-sample runs.
        shuffled: a shuffle after the reader reorders them (else ``held`` come first, then
            ``rest``: the order the pipeline would have yielded them in).
        locate: the one-sample run of a position (a token of the reader's ``tell``).
    """

    rest: list[Run]
    held: list[Run]
    shuffled: bool
    locate: Callable[[Any], Run]

    @property
    def runs(self) -> list[Run]:
        """Every sample left, in the order the pipeline yields them unless it is ``shuffled``."""
        return self.held + self.rest


def remaining(
    pipeline: Any,
    epoch: int,
    world: World,
    state: StateDict | None,
    batch_size: int | None = None,
    plans: dict[tuple[int, int], EpochPlan] | None = None,
) -> list[Run]:
    """The samples of ``epoch`` that ``world``'s (rank, worker) had not yielded at ``state``
    (``batch_size``: the planner's batch size in the old run, when it differs from this one's;
    ``plans``: the old epoch plans by ``(world_size, num_workers)``, filled and reused, so
    re-splitting many old workers plans the old epoch once)."""
    if finished_epoch(state, epoch):
        return []  # that worker had yielded all of its share
    left = unread(pipeline, epoch, world, state, batch_size, plans)
    return left.rest + left.held


def unread(
    pipeline: Any,
    epoch: int,
    world: World,
    state: StateDict | None,
    batch_size: int | None = None,
    plans: dict[tuple[int, int], EpochPlan] | None = None,
) -> Unread:
    """Like :func:`remaining`, with the items held after the reader apart and the way to locate
    a saved position (``state=None``: the pass from its start)."""
    state = state or {}
    for key in ("replay", "taken", "pass"):
        if state.get(key):
            raise StateError(
                f"the saved position holds {key!r} (a pipeline whose stages cannot save their state, "
                "or a with_epoch/repeat window), which cannot be re-split over other workers; resume "
                "with the same num_workers and world size"
            )
    nodes: list[StateDict | None] = list(state.get("nodes") or [None] * len(pipeline.pipeline))
    index = reader_index(pipeline)
    reader, ctx = pipeline.pipeline[index], RunContext(epoch, world, pipeline.seed)
    own: StateDict = nodes[index] or {}
    locate: Any
    if "units" in own:
        units = [Run.from_json(u) for u in own["units"]]
        rest = _rest_of_units(units, own)
        locate = lambda t: _single(units[int(t[0])].url, int(t[1]), units[int(t[0])].pad)  # noqa: E731
    elif isinstance(reader, PlannedSamples):
        rest, locate = _rest_of_plan(reader, ctx, own, batch_size, {} if plans is None else plans)
    else:
        rest, locate = _rest_of_shards(pipeline, index, ctx, nodes, own)
    held: list[Run] = []
    shuffled = False
    for stage, node_state in zip(pipeline.pipeline[index + 1 :], nodes[index + 1 :], strict=True):
        shuffled = shuffled or (isinstance(stage, Shuffle) and stage.bufsize >= 2)
        if isinstance(stage, Shuffle) and node_state:
            held.extend(locate(token) for token in node_state.get("buffer", []))
        elif isinstance(stage, MapStage) and (pending := pending_positions(node_state)) is not None:
            # items map stages on threads had pulled and not yielded (pipeline/parallel.py)
            held.extend(locate(token) for token in pending)
        elif node_state is not None and node_state not in _TRIVIAL:
            raise StateError(
                f"stage {type(stage).__name__} after the reader holds a position "
                f"({redact_url(node_state, limit=80)}) that cannot be re-split over other workers; resume "
                "with the same num_workers and world size"
            )
    return Unread(rest, held, shuffled, locate)


def _single(url: str, offset: int, pad: bool | None) -> Run:
    return Run(url, -1, 1, offset, pad)


def _rest_of_units(units: Sequence[Run], state: StateDict) -> list[Run]:
    i, skip, offset = int(state.get("unit", 0)), int(state.get("skip", 0)), int(state.get("offset", -1))
    if i >= len(units):
        return []
    first = units[i]
    count = None if first.count is None else first.count - skip
    if offset >= 0:
        head = Run(first.url, first.start + skip if first.start >= 0 else -1, count, offset, first.pad)
    elif skip == 0:
        head = first
    elif first.start >= 0:
        head = Run(first.url, first.start + skip, count, -1, first.pad)
    else:
        raise StateError(f"a saved run of samples of {first.url} has no position to continue from")
    return ([head] if count != 0 else []) + list(units[i + 1 :])


def _rest_of_plan(
    stage: PlannedSamples,
    ctx: RunContext,
    state: StateDict,
    batch_size: int | None,
    plans: dict[tuple[int, int], EpochPlan],
) -> tuple[list[Run], Any]:
    if stage.counts is None:
        raise StateError(
            "split='resampled' draws shards per (rank, worker); its position cannot be re-split over other "
            "workers. Resume with the same num_workers and world size, or start the epoch afresh"
        )
    if state.get("makeup"):
        raise StateError(
            "a worker was repeating samples to make up a shortfall (stale index or skipped shard) when "
            "the state was saved; resume with the same num_workers and world size"
        )
    world = ctx.world
    shape = (world.world_size, world.num_workers)
    plan = plans.get(shape)
    if plan is None:  # the plan is lazy: each old worker's slot is computed from it on demand
        plan = plans[shape] = stage.plan(ctx.epoch, world, ctx.seed, batch_size)
    pieces, exact = plan.slot(world.rank, world.worker), stage.mode == "exact"
    need = plan.quota(world.rank, world.worker) - int(state.get("done", 0))
    first, skip, offset = int(state.get("piece", 0)), int(state.get("skip", 0)), int(state.get("offset", -1))
    units: list[Run] = []
    for k in range(first, len(pieces)):
        if need <= 0:
            break
        piece = pieces[k]
        start = piece.start + (skip if k == first else 0)
        n = min(piece.stop - start, need)
        if n <= 0:
            continue
        at = offset if (k == first and offset >= 0) else (0 if start == 0 else -1)
        units.append(Run(piece.url, start, n, at, piece.pad if exact else None))
        need -= n

    def locate(token: Any) -> Run:
        piece = pieces[int(token[0])]
        return _single(piece.url, int(token[1]), piece.pad if exact else None)

    return units, locate


def _rest_of_shards(
    pipeline: Any, index: int, ctx: RunContext, nodes: list[StateDict | None], state: StateDict
) -> tuple[list[Run], Any]:
    # The shard-list stages before the reader are pure lists: rebuild them at their saved
    # positions (no shard is opened) and take the shards they still hold.
    built: list[Node] = []
    upstream: Node | None = None
    for stage, node_state in zip(pipeline.pipeline[:index], nodes[:index], strict=True):
        upstream = build_one(stage, upstream, ctx, node_state)
        built.append(upstream)
    last = upstream
    if last is None or not last.indexable:
        for node in reversed(built):
            node.close()
        raise StateError(
            "the shards before the reader come from an endless or foreign shard stream; its position "
            "cannot be re-split over other workers. Resume with the same num_workers and world size"
        )
    units: list[Run] = []
    shard, offset = int(state.get("shard", -1)), int(state.get("offset", -1))
    if offset >= 0:
        url = state.get("url") or _url(last.item(shard))
        units.append(Run(url, -1 if offset else 0, None, offset))
    ahead = ahead_url(state, last)  # the next shard, taken from the list ahead of its turn
    if ahead is not None:
        units.append(Run(ahead, 0, None, 0))
    units.extend(Run(_url(item), 0, None, 0) for item in last)
    for node in reversed(built):
        node.close()
    shards = last

    def locate(token: Any) -> Run:
        return _single(_url(shards.item(int(token[0]))), int(token[1]), None)

    return units, locate


def _url(shard: Any) -> str:
    return shard["url"] if isinstance(shard, dict) else str(shard)


def resplit(
    pipeline: Any,
    epoch: int,
    old: Sequence[tuple[World, StateDict | None]],
    world_size: int,
    rank: int,
    num_workers: int,
    old_batch: int | None = None,
) -> list[StateDict]:
    """States for the ``num_workers`` workers of ``rank`` (of ``world_size``) that continue ``epoch``
    with exactly what the old ``(world, state)`` workers (of every old rank) had left
    (``old_batch``: the planner's batch size in the old run)."""
    plans: dict[tuple[int, int], EpochPlan] = {}
    units = [
        unit for world, state in old for unit in remaining(pipeline, epoch, world, state, old_batch, plans)
    ]
    index = reader_index(pipeline)
    reader = pipeline.pipeline[index]
    slots = world_size * num_workers
    if isinstance(reader, PlannedSamples):
        total = sum(u.count or 0 for u in units)
        parts = cut(units, slot_quotas(total, world_size, num_workers, reader.batch_size))
    else:
        parts = deal(units, slots)
    states: list[StateDict] = []
    for part in parts[rank * num_workers : (rank + 1) * num_workers]:
        nodes: list[StateDict | None] = [None] * len(pipeline.pipeline)
        nodes[index] = {"units": [u.to_json() for u in part]}
        states.append({"epoch": epoch, "nodes": nodes})
    return states
