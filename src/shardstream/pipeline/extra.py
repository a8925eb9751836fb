"""Small stages: info, associate, non_empty, CheckEmpty, Cached, xdecode."""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ConfigurationError
from ..handlers import reraise_exception
from .base import MapStage, Node, RunContext, Stage, StateDict
from .shardlists import idle_worker

__all__ = ["Cached", "CheckEmpty", "associate", "info", "non_empty", "xdecode"]

log = logging.getLogger(__name__)


class _Info(MapStage):
    """Log the first ``n`` samples (and every ``every``-th) at INFO; samples pass unchanged."""

    def __init__(
        self,
        fmt: str | None = None,
        n: int = 3,
        every: int = -1,
        width: int = 50,
        stream: Any = None,
        name: str = "",
    ) -> None:
        if stream is not None:
            raise TypeError("info(stream=...) is not supported: shardstream logs (logger 'shardstream')")
        self.fmt, self.n, self.every, self.width, self.name = fmt, n, every, width, name
        self.handler = reraise_exception
        self.count = 0

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        def apply(sample: Any) -> Any:
            i = self.count
            self.count = i + 1
            if i < self.n or (self.every > 0 and (i + 1) % self.every == 0):
                text = self.fmt.format(**sample) if self.fmt is not None else repr(sample)[: self.width]
                log.info("%s %d %s", self.name, i, text)
            return sample

        return apply


def info(
    fmt: str | None = None, n: int = 3, every: int = -1, width: int = 50, stream: Any = None, name: str = ""
) -> Stage:
    """Log samples as they pass (WebDataset's ``info``, through logging)."""
    return _Info(fmt, n, every, width, stream, name)


class _Associate(MapStage):
    def __init__(self, associator: Callable[[str], dict[str, Any]] | dict[str, Any]) -> None:
        self.associator = associator
        self.handler = reraise_exception

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        associator = self.associator

        def apply(sample: Any) -> Any:
            key = sample["__key__"]
            extra = associator(key) if callable(associator) else associator.get(key)
            return {**sample, **extra} if extra is not None else sample

        return apply


def associate(associator: Callable[[str], dict[str, Any]] | dict[str, Any]) -> Stage:
    """Merge ``associator(key)`` (or ``associator[key]``) into each sample."""
    return _Associate(associator)


class _NonEmptyNode(Node):
    def __init__(self, upstream: Node, state: StateDict | None) -> None:
        super().__init__(upstream)
        self.seen = bool((state or {}).get("seen", False))
        self.tell = upstream.tell
        self.item_at = upstream.item_at  # type: ignore[method-assign]
        self.items_at = upstream.items_at  # type: ignore[method-assign]
        self._it = self._run()

    def _run(self) -> Iterator[Any]:
        assert self.upstream is not None
        for item in self.upstream:
            self.seen = True
            yield item
        if not self.seen:
            raise ValueError("the shard list is empty; check the spec (pipeline stage non_empty)")

    def state_dict(self) -> StateDict:
        return {"seen": self.seen}


class _NonEmpty(Stage):
    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("non_empty needs an upstream stage")
        return _NonEmptyNode(upstream, state)


class _CheckEmptyNode(_NonEmptyNode):
    def __init__(self, upstream: Node, ctx: RunContext, nshards: int | None, state: StateDict | None) -> None:
        self.ctx, self.nshards = ctx, nshards
        super().__init__(upstream, state)

    def _run(self) -> Iterator[Any]:
        assert self.upstream is not None
        # Peek at the first item, then delegate with ``yield from`` (a C-level loop) instead of
        # counting every item in Python.
        src = iter(self.upstream)
        if not self.seen:
            first = next(src, _END)
            if first is _END:
                if idle_worker(self.upstream):  # no shard for this worker; the others hold the epoch
                    return
                world = self.ctx.world
                raise ConfigurationError(
                    f"no samples in this epoch for rank {world.rank}/{world.world_size}, worker "
                    f"{world.worker}/{world.num_workers} ({self.nshards} shards in the spec). Check that "
                    "the shards are non-empty tar files with dotted member names (key.ext), and that "
                    "there are at least as many shards as ranks x workers. Pass empty_check=False if "
                    "an empty epoch is expected."
                )
            self.seen = True
            yield first
        yield from src


class CheckEmpty(Stage):
    """Raise a clear error when an epoch yields nothing (``nshards``: for the message)."""

    def __init__(self, nshards: int | None = None) -> None:
        self.nshards = nshards

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("CheckEmpty needs an upstream stage")
        return _CheckEmptyNode(upstream, ctx, self.nshards, state)


_END = object()

non_empty = _NonEmpty()
"""Pass items through; raise if there were none (usable as ``non_empty(src)`` too)."""


class _CachedNode(Node):
    stateful = False  # the first pass's samples live in memory only

    def __init__(self, stage: Cached, upstream: Node) -> None:
        super().__init__(upstream)
        self._it = self._run(stage)

    def _run(self, stage: Cached) -> Iterator[Any]:
        if stage.cached is not None:
            yield from stage.cached
            return
        assert self.upstream is not None
        collected: list[Any] = []
        for sample in self.upstream:
            collected.append(sample)
            yield sample
        stage.cached = collected


class Cached(Stage):
    """Keep the samples of the first pass in memory and replay them on later passes."""

    def __init__(self) -> None:
        self.cached: list[Any] | None = None

    def build(self, upstream: Node | None, ctx: RunContext, state: StateDict | None = None) -> Node:
        if upstream is None:
            raise ValueError("Cached needs an upstream stage")
        return _CachedNode(self, upstream)


class _XDecode(MapStage):
    def __init__(
        self,
        *args: tuple[str, Callable[[bytes], Any]],
        must_decode: bool = True,
        defaults: bool = True,
        **kw: Callable[[bytes], Any],
    ) -> None:
        patterns = [*args, *(("*." + k, v) for k, v in kw.items())]
        self.rules = [(fnmatch.translate(p), f) for p, f in patterns]
        self.must_decode = must_decode
        self.handler = reraise_exception
        if not defaults:
            raise TypeError("xdecode(defaults=False) is not supported: fields without a rule are kept as-is")

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        rules = [(re.compile(p), f) for p, f in self.rules]
        must_decode = self.must_decode

        def apply(sample: Any) -> Any:
            out = dict(sample)
            for key, value in sample.items():
                if key.startswith("__"):
                    continue
                for pattern, f in rules:
                    if pattern.match("." + key) or pattern.match(key):
                        out[key] = f(value)
                        break
                else:
                    if must_decode and not isinstance(value, (str, int, float)):
                        raise ValueError(
                            f"xdecode: no rule for field {key!r} of sample {sample.get('__key__')!r}; "
                            "add a pattern or pass must_decode=False"
                        )
            return out

        return apply


def xdecode(
    *args: tuple[str, Callable[[bytes], Any]],
    must_decode: bool = True,
    defaults: bool = True,
    **kw: Callable[[bytes], Any],
) -> Stage:
    """Decode fields by glob pattern: ``xdecode(("*.txt", bytes.decode), cls=int)``."""
    return _XDecode(*args, must_decode=must_decode, defaults=defaults, **kw)
