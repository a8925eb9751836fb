"""The decode stage: per-extension decoding of sample fields (see :mod:`shardstream.decoders`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config import read_settings
from ..handlers import Handler, reraise_exception
from ..malloc import tune_allocator
from .base import MapStage, RunContext
from .iterable import in_worker

__all__ = ["Decode", "decode"]


class Decode(MapStage):
    """Decode each sample with a decoder built from WebDataset-style arguments.

    ``Decode("pil")``, ``Decode("rgb8", handle_extension("cls", int))``; ``allow_pickle=True``
    opts in to pickle decoding for this stage only.
    """

    kind = "decode"
    label = "decode"

    def __init__(self, *args: Any, handler: Handler = reraise_exception, **kw: Any) -> None:
        from ..decoders import make_decoder

        self.decoder = make_decoder(*args, **kw)
        self.handler = handler

    def function(self, ctx: RunContext) -> Callable[[Any], Any]:
        if in_worker() and read_settings().tune_malloc:
            # Decoding allocates a large buffer per image: keep them on the heap (fewer page
            # faults) in DataLoader workers, whatever loader class started them; never in the
            # user's main process (mallopt is process-wide and inherited by later forks).
            # SHARDSTREAM_TUNE_MALLOC=0 opts out.
            tune_allocator()
        decoder = self.decoder.deferring() if self.defers(ctx) else self.decoder
        # Decoders with per-epoch randomness (video clips, audio windows) take the run context,
        # so their draws are a pure function of (seed, epoch, sample key) and resume reproduces them.
        bind = getattr(decoder, "bind", None)
        return bind(ctx) if bind is not None else decoder

    def defers(self, ctx: RunContext) -> bool:
        """Whether this stage, built with ``ctx``, leaves its JPEGs to be decoded straight into
        the batch (``decoders/deferred.py``): its time is then mostly the batch maker's, which
        telemetry reports as ``decode (into the batch)``."""
        # Only stages that move values follow, then the loader's default collation. A skip
        # handler must see a decode error here, where the sample can still be dropped.
        return (
            ctx.fills
            and self.handler is reraise_exception
            and self.decoder.deferring() is not self.decoder  # some handler can defer
        )


def decode(*args: Any, handler: Handler = reraise_exception, **kw: Any) -> Decode:
    return Decode(*args, handler=handler, **kw)
