"""WebDataset 1.0.2's ``xdecode``: decode fields by glob pattern, each decoder reading a stream.

Its rules, kept here: decoders are ``(pattern, function)`` pairs (``defaults``, then positional
ones, then ``ext=function`` keywords as ``"*.ext"``); the last matching pair wins; a field matches
when its basename, lower-cased, or ``"." + basename`` matches the pattern; ``__`` fields pass
unchanged; a decoder of ``False`` keeps the value; ``bytes`` reach the decoder as a binary stream.
The one difference: the default ``*.pyd`` decoder unpickles only with ``allow_pickle=True``.
"""

from __future__ import annotations

import fnmatch
import io
import pickle
import re
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import UnsafeOperationError
from ..pipeline.mapping import Map

__all__ = ["default_decoders", "xdecode"]

Decoder = Callable[[Any], Any]


def decode_bin(stream: Any) -> bytes:
    return bytes(stream.read())


def decode_text(stream: Any) -> str:
    return bytes(stream.read()).decode("utf-8")


def decode_pickle(stream: Any) -> Any:
    """Refuses: unpickling runs code from the shard. Pass ``allow_pickle=True`` to ``xdecode``."""
    raise UnsafeOperationError(
        "xdecode: refusing to unpickle a .pyd field (pickle runs code from the shard); pass "
        "allow_pickle=True to xdecode if you trust the shards"
    )


#: WebDataset's defaults (``*.pyd`` refuses unless ``xdecode(..., allow_pickle=True)``).
default_decoders: list[tuple[str, Decoder]] = [
    ("*.bin", decode_bin),
    ("*.txt", decode_text),
    ("*.pyd", decode_pickle),
]


class _XDecoder:
    """The per-sample function (picklable, for DataLoader workers)."""

    def __init__(self, decoders: list[tuple[str, Any]], must_decode: bool) -> None:
        self.decoders = decoders
        self.must_decode = must_decode
        self._rules: list[tuple[Callable[[str], Any], Any]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_rules": None}

    def _find(self, path: str) -> Any:
        if self._rules is None:  # compiled once per process; the last pair wins
            self._rules = [(re.compile(fnmatch.translate(p)).match, f) for p, f in reversed(self.decoders)]
        name = path.rpartition("/")[2].lower()
        for match, f in self._rules:
            if match(name) or match("." + name):
                return f
        return None

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, data in sample.items():
            if path.startswith("__") or path.rpartition("/")[2].startswith("__"):
                out[path] = data
                continue
            decoder = self._find(path)
            if decoder is False:
                out[path] = data
            elif decoder is None:
                if self.must_decode:
                    raise ValueError(
                        f"xdecode: no decoder for field {path!r} of sample {sample.get('__key__')!r}; add "
                        "a (pattern, function) pair, map it to False to keep it, or pass must_decode=False"
                    )
                out[path] = data
            else:
                out[path] = decoder(io.BytesIO(data) if isinstance(data, bytes) else data)
        return out


class _XDecode(Map):
    """``Map`` without the ``__key__`` copy: xdecode keeps exactly the sample's fields, as WebDataset's."""

    def function(self, ctx: Any) -> Callable[[Any], Any]:
        f: Callable[[Any], Any] = self.f
        return f


def _unpickle(stream: Any) -> Any:
    return pickle.load(stream)  # noqa: S301 - allow_pickle=True was passed


def xdecode(
    *args: tuple[str, Decoder | bool],
    must_decode: bool = True,
    defaults: Iterable[tuple[str, Decoder | bool]] = default_decoders,
    allow_pickle: bool = False,
    **kw: Decoder | bool,
) -> Map:
    """Decode fields by glob pattern: ``xdecode(("*.jpg", PIL.Image.open), cls=lambda s: int(s.read()))``.

    Args:
        *args: ``(pattern, decoder)`` pairs; a decoder takes a binary stream (``bytes`` values are
            wrapped in ``io.BytesIO``), ``False`` keeps the value as it is.
        must_decode: a field without a decoder raises ``ValueError`` (default True).
        defaults: the pairs applied first (default: ``*.bin`` -> bytes, ``*.txt`` -> str,
            ``*.pyd`` -> pickle with ``allow_pickle``); ``[]`` for none.
        allow_pickle: let the default ``*.pyd`` decoder unpickle (shardstream's opt-in).
        **kw: ``ext=decoder``, the same as ``("*.ext", decoder)``.
    """
    base = [(p, _unpickle if (f is decode_pickle and allow_pickle) else f) for p, f in defaults]
    decoders = [*base, *args, *(("*." + k, v) for k, v in kw.items())]
    for pattern, f in decoders:
        if not isinstance(pattern, str) or not (f is False or callable(f)):
            raise TypeError(f"xdecode: {(pattern, f)!r} is not a (pattern, function or False) pair")
    return _XDecode(_XDecoder(decoders, must_decode))
