"""The decode stage: per-extension decoding of sample fields (see :mod:`shardstream.decoders`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import Stage
from ..handlers import Handler, reraise_exception

__all__ = ["Decode", "decode"]


class Decode(Stage):
    """Decode each sample with a decoder built from WebDataset-style arguments.

    ``Decode("pil")``, ``Decode("rgb8", handle_extension("cls", int))``; ``allow_pickle=True``
    opts in to pickle decoding for this stage only.
    """

    def __init__(self, *args: Any, handler: Handler = reraise_exception, **kw: Any) -> None:
        from ..decoders import make_decoder

        self.decoder = make_decoder(*args, **kw)
        self.handler = handler

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        decoder = self.decoder
        for sample in src:
            try:
                result = decoder(sample)
            except Exception as exn:
                if self.handle(self.handler, exn):
                    continue
                break
            yield result


def decode(*args: Any, handler: Handler = reraise_exception, **kw: Any) -> Decode:
    return Decode(*args, handler=handler, **kw)
