"""Where video clips and audio windows start, and the per-epoch seeding that makes it reproducible.

Random starts are a pure function of ``(seed, epoch, sample key)``: not of the rank or worker that
happens to read the sample, so the same sample gets the same clips whatever ``num_workers`` or
world size, and a resumed epoch reproduces them. The epoch reaches a decoder through ``bind(ctx)``,
which the decode stage calls once per epoch; an unbound decoder (called directly) uses epoch 0.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, TypeVar

import numpy as np

from ..config import read_settings
from ..errors import ConfigurationError

__all__ = ["START_MODES", "EpochContext", "check_start", "resolve_seed", "sample_rng", "window_starts"]

#: How clips/windows are placed: ``random`` (seeded per sample and epoch), ``uniform`` (evenly
#: spaced from the first to the last possible start; one clip: the middle) or ``center`` (the
#: video split into equal segments, a clip centred in each; one clip: the middle).
START_MODES = ("random", "uniform", "center")


class EpochContext(Protocol):
    """What ``bind(ctx)`` reads from the pipeline's run context (:class:`~shardstream.RunContext`)."""

    @property
    def epoch(self) -> int: ...

    @property
    def seed(self) -> int | None: ...


def check_start(start: str) -> str:
    """``start`` if it is one of :data:`START_MODES`, else ConfigurationError."""
    if start not in START_MODES:
        raise ConfigurationError(f"start={start!r} is not one of {', '.join(START_MODES)}")
    return start


def resolve_seed(seed: int | None, ctx: EpochContext | None = None) -> int:
    """The decoder's own seed, else the pipeline's (``ctx.seed``), else ``SHARDSTREAM_SEED``, else 0."""
    if seed is not None:
        return seed
    if ctx is not None and ctx.seed is not None:
        return ctx.seed
    return read_settings().seed or 0


def sample_rng(seed: int, epoch: int, kind: str, key: Any) -> np.random.Generator:
    """A generator for one sample's draws: the same ``(seed, epoch, kind, key)`` gives the same draws."""
    digest = hashlib.blake2b(repr((seed, kind, epoch, key)).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def window_starts(
    mode: str, length: int, span: int, count: int, rng: np.random.Generator
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """``count`` start positions, ascending, for windows of ``span`` positions in ``length``.

    Positions are on any integer grid (frames, samples). A window longer than the stream starts
    at 0 (the caller pads or repeats the end).
    """
    last = max(0, length - span)
    if mode == "random":
        starts = rng.integers(0, last + 1, size=count)
    elif mode == "uniform":
        starts = (
            np.full(count, last // 2)
            if count == 1
            else np.round(np.linspace(0, last, count)).astype(np.int64)
        )
    else:  # center: one window centred in each of `count` equal segments
        centres = (np.arange(count) + 0.5) * (length / count)
        starts = np.clip(np.round(centres - span / 2), 0, last)
    return np.sort(starts.astype(np.int64))


_Self = TypeVar("_Self", bound="SeededFieldDecoder")


class SeededFieldDecoder:
    """Shared by VideoClips and AudioWindows: extension dispatch, output choice, and random starts
    that are a pure function of (seed, epoch, sample key).

    ``bind(ctx)`` (called by the decode stage once per epoch) returns a copy for that epoch;
    subclasses implement ``decode_in_sample`` and call :meth:`_rng` for their draws.
    """

    seed: int | None
    dispatch_extensions: frozenset[str]
    _epoch: int
    _seed: int | None

    def _init_dispatch(self, seed: int | None, extensions: str | Iterable[str]) -> None:
        names = extensions.split() if isinstance(extensions, str) else list(extensions)
        self.seed = seed
        self.dispatch_extensions = frozenset(name.lower().lstrip(".") for name in names)
        self._epoch = 0
        self._seed = None  # resolved by bind(), or on first use

    def bind(self: _Self, ctx: EpochContext) -> _Self:
        """A copy drawing this epoch's starts (the decode stage calls it once per epoch)."""
        bound = copy.copy(self)
        bound._epoch, bound._seed = ctx.epoch, resolve_seed(self.seed, ctx)
        return bound

    def __call__(self, key: str, data: bytes) -> dict[str, Any] | None:
        """Decode one field (the sample key is unknown here: random starts use key ``None``)."""
        return self.decode_in_sample(key, data, {})

    def decode_in_sample(self, key: str, data: bytes, sample: Mapping[str, Any]) -> dict[str, Any] | None:
        raise NotImplementedError

    def _dispatch(self, key: str) -> str | None:
        """The field's extension when this decoder handles it, else ``None``."""
        extension = key.rpartition(".")[2].lower()
        return extension if extension in self.dispatch_extensions else None

    def _rng(self, kind: str, key: str, sample: Mapping[str, Any]) -> np.random.Generator:
        if self._seed is None:
            self._seed = resolve_seed(self.seed)
        return sample_rng(self._seed, self._epoch, kind, (sample.get("__key__"), key))
