"""The reading node of a worker restored elastically: it reads the runs of samples it was dealt.

After an elastic resume (see :mod:`shardstream.shards.elastic`) a DataLoader worker reads a list
of :class:`~shardstream.shards.runs.Run` runs instead of its slot of the epoch plan or its
share of the shard list. The epoch planner and the shard reader both build this node when their
restored state holds ``"units"``; the next epoch is planned normally for the new world.

State: the units, the one being read, how many of its samples were yielded and the byte offset
of the next one, so a second restore (with the same workers) continues exactly. Positions of
single samples (``tell``/``item_at``) are ``[unit number, byte offset]``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from ..errors import StateError
from ..pipeline.base import StateDict
from ..pipeline.pipeline import close_iterator
from ..shards.runs import Run
from ..tar.grouping import Cursor
from ._reading import Pin, ReadingNode, pin_of, pinned, verified

__all__ = ["UnitsNode", "read_span"]


class UnitsNode(ReadingNode):
    """Yields the samples of ``state["units"]`` through ``stage``'s format, source and handler."""

    def __init__(self, stage: Any, state: StateDict) -> None:
        super().__init__(None)
        self.stage = stage
        self.units = [Run.from_json(u) for u in state["units"]]
        self.unit = int(state.get("unit", 0))
        self.skip = int(state.get("skip", 0))  # samples of the current unit already yielded
        self.offset = int(state.get("offset", -1))  # where the next one starts, when known
        self.pin = pin_of(state) if self.offset >= 0 else None
        self.cursor = Cursor()
        self.cursor.next = -1
        self.idle = not self.units  # nothing dealt to this worker: the others hold the epoch
        self.stopped = False
        self.tell = self._tell
        self._it = self._run()

    def state_dict(self) -> StateDict:
        state: StateDict = {"units": [u.to_json() for u in self.units], "unit": self.unit, "skip": self.skip}
        if self.cursor.next >= 0:
            state["offset"] = self.cursor.next
            pinned(state, self.cursor)
        return state

    def _tell(self) -> tuple[int, int]:
        return self.unit, self.cursor.start

    def item_at(self, token: Any) -> Any:
        unit = self.units[int(token[0])]
        sample: dict[str, Any] = self.stage.format.sample_at(self.stage.source, unit.url, int(token[1]))
        if unit.pad is not None:
            sample["__pad__"] = unit.pad
        return sample

    def _run(self) -> Iterator[dict[str, Any]]:
        while self.unit < len(self.units):
            yield from self._read(self.units[self.unit])
            if self.stopped:
                return
            self.unit += 1
            self.skip = 0

    def _read(self, unit: Run) -> Iterator[dict[str, Any]]:
        pin, self.pin = self.pin, None
        if self.offset >= 0:  # resuming inside this unit at a known offset
            offset, drop = self.offset, 0
        elif unit.offset >= 0:
            offset, drop = unit.offset, self.skip
        else:  # only the sample number is known: read from the shard's start
            offset, drop = 0, unit.start + self.skip
        self.offset = -1
        left = None if unit.count is None else unit.count - self.skip
        if left is not None and left <= 0:
            return
        for sample in read_span(
            self, self.stage, unit.url, offset, drop, left, pin=pin if drop == 0 else None
        ):
            if unit.pad is not None:
                sample["__pad__"] = unit.pad
            self.skip += 1
            yield sample


def read_span(
    node: Any,
    stage: Any,
    url: str,
    offset: int,
    drop: int,
    count: int | None,
    opening: Any = None,
    *,
    pin: Pin | None = None,
) -> Iterator[dict[str, Any]]:
    """Samples of ``url`` from byte ``offset``: the first ``drop`` skipped, at most ``count``.

    ``node.cursor`` follows the positions; an error goes to ``stage.handler`` (counted in
    ``stage.stats``), and a handler that ends the stream sets ``node.stopped``. The one reading
    loop of the epoch planner and of elastically restored workers. ``opening``: the shard's
    open started ahead (``readers.read_shards.open_ahead``), for ``offset == 0``. ``pin``: a
    restore's check that the shard still holds the saved sample before ``offset``
    (:func:`~._reading.verified`); its StateError is never given to the handler.
    """
    cursor = node.cursor
    cursor.next = offset
    opened: Any = None
    try:
        stream = opening.result() if opening is not None else None  # its error is handled below
        start = pin[1] if pin is not None else offset
        opened = stage.format.samples(stage.source, url, offset=start, cursor=cursor, stream=stream)
        samples: Iterator[dict[str, Any]] = opened
        if pin is not None:
            samples = verified(samples, cursor, url, pin, offset)
        if drop:
            samples = itertools.islice(samples, drop, None)
        if count is not None:
            samples = itertools.islice(samples, count)
        yield from samples
    except StateError:
        raise
    except Exception as exn:
        go_on = stage.handler(exn)
        stage.stats.record(exn)
        if not go_on:
            node.stopped = True
    finally:
        close_iterator(opened)
        cursor.next = -1
