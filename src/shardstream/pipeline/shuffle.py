"""Buffered sample shuffle, seeded per (seed, epoch, rank, worker), with a compact saved state.

The state is the number of random draws made so far and the *positions* of the buffered items
(tokens from the upstream's ``tell``, e.g. ``[shard, byte offset]``), never their bytes. On
restore the buffer is refilled with ``upstream.items_at(tokens)`` (one pass per shard) and
the random stream is fast-forwarded: draws come in blocks of 65,536 each seeded from
``(seed, block)``, so at most one block is replayed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

from .base import Node, RunContext, Stage, StateDict

__all__ = ["Shuffle", "detshuffle", "shuffle"]

_BLOCK = 1 << 16
_GOLDEN = 0x9E3779B97F4A7C15
_END = object()


def _draws(seed: int, start: int) -> Iterator[float]:
    """Uniform floats in [0, 1) from draw number ``start`` on (random access by blocks)."""
    block, skip = divmod(start, _BLOCK)
    while True:
        rng = random.Random(seed if block == 0 else (seed + block * _GOLDEN) % (1 << 64))
        values = [rng.random() for _ in range(_BLOCK)]
        yield from values[skip:]
        skip = 0
        block += 1


class _ShuffleNode(Node):
    def __init__(self, stage: Shuffle, upstream: Node, ctx: RunContext, state: StateDict | None) -> None:
        super().__init__(upstream)
        state = state or {}
        self.bufsize, self.initial = stage.bufsize, stage.initial
        self.seed = ctx.derive(stage.seed, "samples", *stage.extra_parts(ctx))
        self.draws = int(state.get("draws", 0))
        self.up_tell = upstream.tell
        self.explicit_rng = stage.rng
        self.stateful = upstream.tell is not None and stage.rng is None
        tokens = state.get("buffer", [])
        self.buf: list[Any] = upstream.items_at(list(tokens)) if tokens else []
        self.pos: list[Any] = list(tokens)
        self.last: Any = None  # position of the item yielded last
        if upstream.tell is not None:
            self.tell = self._tell
            self.item_at = upstream.item_at  # type: ignore[method-assign]
            self.items_at = upstream.items_at  # type: ignore[method-assign]
        self._it = self._run() if self.bufsize >= 2 else iter(upstream)
        if self.bufsize < 2:
            self.tell = upstream.tell
            self.item_at = upstream.item_at  # type: ignore[method-assign]
            self.items_at = upstream.items_at  # type: ignore[method-assign]
            self.stateful = True

    def _tell(self) -> Any:
        return self.last

    def state_dict(self) -> StateDict:
        if self.bufsize < 2:
            return {}
        return {"draws": self.draws, "buffer": list(self.pos)}

    def _run(self) -> Iterator[Any]:
        assert self.upstream is not None
        src = iter(self.upstream)
        # A caller's random.Random draws as WebDataset's pick() does (randint over the buffer), so
        # that a pipeline seeded for WebDataset keeps its order; our own draws are the floats of
        # _draws, which a saved state can fast-forward.
        explicit = self.explicit_rng
        randint = explicit.randint if explicit is not None else random.randint  # unused without one
        draws: Iterator[float] = _draws(self.seed, self.draws) if explicit is None else iter(())
        buf, pos, tell = self.buf, self.pos, self.up_tell
        bufsize, initial = self.bufsize, self.initial
        if tell is None:
            # No positions upstream: the buffer cannot be saved (the pipeline replays instead).
            for item in src:
                buf.append(item)
                if len(buf) < bufsize:
                    extra = next(src, _END)
                    if extra is not _END:
                        buf.append(extra)
                if len(buf) >= initial:
                    k = int(next(draws) * len(buf)) if explicit is None else randint(0, len(buf) - 1)
                    buf[k], buf[-1] = buf[-1], buf[k]
                    self.draws += 1
                    yield buf.pop()
            while buf:
                k = int(next(draws) * len(buf)) if explicit is None else randint(0, len(buf) - 1)
                buf[k], buf[-1] = buf[-1], buf[k]
                self.draws += 1
                yield buf.pop()
            return
        for item in src:
            buf.append(item)
            pos.append(tell())
            if len(buf) < bufsize:
                extra = next(src, _END)
                if extra is not _END:
                    buf.append(extra)
                    pos.append(tell())
            if len(buf) >= initial:
                k = int(next(draws) * len(buf)) if explicit is None else randint(0, len(buf) - 1)
                buf[k], buf[-1] = buf[-1], buf[k]
                pos[k], pos[-1] = pos[-1], pos[k]
                self.draws += 1
                self.last = pos.pop()
                yield buf.pop()
        while buf:
            k = int(next(draws) * len(buf)) if explicit is None else randint(0, len(buf) - 1)
            buf[k], buf[-1] = buf[-1], buf[k]
            pos[k], pos[-1] = pos[-1], pos[k]
            self.draws += 1
            self.last = pos.pop()
            yield buf.pop()


class Shuffle(Stage):
    """Shuffle samples through a buffer of ``bufsize`` items.

    Output starts once ``initial`` items are buffered; while the buffer is below ``bufsize`` one
    extra item is read per item emitted, so it grows to full size early in the stream. The seed
    of each run is derived from ``(seed, epoch, rank, worker)``: reproducible for a fixed seed,
    different every epoch and in every worker.

    Args:
        bufsize: buffer size (default 1000). Values below 2 make the stage a pass-through.
        initial: items buffered before the first output (default 100, capped at bufsize).
        rng: an explicit ``random.Random`` to draw from, as WebDataset 1.0.2 does
            (``rng.randint(0, len(buffer) - 1)`` per item): the same seeded ``random.Random``
            gives WebDataset's order. It overrides the seed logic, and its state is not saved:
            a pipeline using it replays the epoch on restore, drawing from the ``rng`` the
            restored pipeline was built with (build it with a new ``random.Random`` seeded as
            the first was, and the replay continues the same order).
        seed: base seed; ``None`` uses the pipeline's seed, else ``SHARDSTREAM_SEED``/``WDS_SEED``
            or 0.
    """

    kind = "shuffle"
    passes_values = True
    label = "shuffle"

    def __init__(
        self,
        bufsize: int = 1000,
        initial: int = 100,
        rng: random.Random | None = None,
        seed: int | None = None,
    ) -> None:
        self.bufsize = bufsize
        self.initial = min(initial, bufsize)
        self.rng = rng
        self.seed = seed

    def extra_parts(self, ctx: RunContext) -> tuple[object, ...]:
        return ()

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("shuffle needs an upstream stage")
        return _ShuffleNode(self, upstream, ctx, state)


log = logging.getLogger(__name__)
_HANDLER_WARNED: list[bool] = []  # shuffle(handler=) warned about in this process


def shuffle(
    bufsize: int = 1000,
    initial: int = 100,
    rng: random.Random | None = None,
    seed: int | None = None,
    handler: object = None,
) -> Shuffle:
    """WebDataset-compatible factory: ``wds.shuffle(1000)``.

    ``handler`` is WebDataset's (it has no effect there either: shuffling raises nothing); a
    value other than ``None`` logs a warning once, so that no argument is silently ignored.
    """
    if handler is not None and not _HANDLER_WARNED:
        _HANDLER_WARNED.append(True)
        log.warning("shuffle(handler=...) has no effect (shuffling raises nothing); it is ignored")
    return Shuffle(bufsize, initial, rng=rng, seed=seed)


class detshuffle(Shuffle):  # noqa: N801 - WebDataset name
    """Deterministic shuffle whose order changes every epoch (WebDataset's ``detshuffle``).

    ``epoch`` is WebDataset's starting counter (its first run uses ``epoch + 1``); here the
    pipeline's epoch is added to it, so the default (-1) makes epoch 0 use 0.
    """

    def __init__(self, bufsize: int = 1000, initial: int = 100, seed: int = 0, epoch: int = -1) -> None:
        super().__init__(bufsize, initial, seed=seed)
        self.epoch_offset = epoch + 1

    def extra_parts(self, ctx: RunContext) -> tuple[object, ...]:
        return ("detshuffle", self.epoch_offset) if self.epoch_offset else ()
