"""Deferred arrays: a decoded value whose pixels are written later, straight into a batch.

Decoding a JPEG to a fresh array and then copying it into the batch costs a 196 KB copy per
256x256 image (a noticeable share of the decode itself) and a fresh allocation; decoding straight into the
batch's buffer costs neither. A decoder can do that only when it knows the batch, so the
decode stage may return a :class:`DeferredArray` (the shape and dtype read from the header, the
compressed bytes, and a function that decodes into given memory) and the default collation
(``pipeline/batch.py``) allocates the batch and fills each row.

The decode stage defers only when nothing between it and the collation reads the value (the
stages after it declare ``passes_values``) and the loader's default collation makes the batches
(``ss.Loader`` asks for it with ``DataPipeline.run(fills=True)``); the pipeline's own
iteration, a custom ``collate_fn`` and ``WebLoader``'s torch path always get arrays. A deferred
value that reaches other code anyway is an array-like: ``np.asarray(value)`` decodes it.

Errors keep their meaning: the header was read and checked (size, decompression-bomb limit)
when the stage ran, and a decode that fails at the fill falls back to Pillow as the eager path
does; what still fails raises :class:`~shardstream.errors.DecodingError` naming the sample,
field and shard. So a stage defers only under the default error handler (``reraise``): a skip
handler must see the error at the stage, where it can drop the sample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import DecodingError, redact_url

__all__ = ["DeferredArray", "Defers", "Fill"]

#: Writes the value into ``out`` (C-contiguous, of the value's shape and dtype).
Fill = Callable[[np.ndarray[Any, Any]], None]


class DeferredArray:
    """A value of known ``shape`` and ``dtype`` decoded into memory its consumer gives.

    Args:
        shape, dtype: of the array :meth:`fill` writes.
        fill: decodes into ``out``; raises what the decoder raises.
    """

    __slots__ = ("dtype", "field", "key", "shape", "url", "_fill")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any], fill: Fill) -> None:
        self.shape, self.dtype, self._fill = shape, dtype, fill
        self.url: str | None = None
        self.key: str | None = None
        self.field: str | None = None

    def locate(self, url: str | None, key: str | None, field: str) -> None:
        """Where the value comes from, for the error of a fill that fails."""
        self.url, self.key, self.field = url, key, field

    def fill(self, out: np.ndarray[Any, Any]) -> None:
        """Decode into ``out`` (shape and dtype as this value's)."""
        if out.shape != self.shape or out.dtype != self.dtype:
            raise ValueError(
                f"cannot fill a {out.dtype}{out.shape} array with a {self.dtype}{self.shape} value"
            )
        try:
            self._fill(out)
        except DecodingError:
            raise
        except Exception as exc:
            where = f"field {self.field!r} of sample {self.key!r}"
            if self.url is not None:
                where += f" of {redact_url(self.url)}"
            raise DecodingError(
                f"cannot decode {where} into its batch: {type(exc).__name__}: {exc}. Fix: check that the "
                "data is a complete image, or use handler=warn_and_continue on decode() to skip bad "
                "samples (the decode then happens in the stage, where a sample can be dropped)",
                url=self.url,
                key=self.key,
                extension=self.field or "",
            ) from exc

    def array(self) -> np.ndarray[Any, Any]:
        """The value as a new array."""
        out = np.empty(self.shape, self.dtype)
        self.fill(out)
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        out = self.array()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"DeferredArray({self.dtype}{self.shape}, key={self.key!r}, field={self.field!r})"


@runtime_checkable
class Defers(Protocol):
    """A field decoder that can return :class:`DeferredArray` values (the image handler)."""

    def deferring(self) -> Any:
        """A copy that returns deferred values where it can (or ``self`` when it never can)."""
        ...
