"""LitData 0.2.76 reading the benchmark's samples from its own chunks (a peer of bench_loader).

LitData's README and getting-started example (``examples/getting_started/generate.py``) write a
dataset with ``litdata.optimize``: a function applied to each input, whose returned dict is
serialized into chunk files of at most ``chunk_bytes="64MB"`` (``optimize`` has no default chunk
size: it asks for ``chunk_size`` or ``chunk_bytes``). Its own ImageNet streaming benchmark
(``benchmarks/litdata/stream_imagenet.py``) reads with a ``StreamingDataset`` subclass whose
``__getitem__`` transforms each item (the docs' "Custom data transforms" page) in a
``StreamingDataLoader`` with ``num_workers=os.cpu_count()``. So:

* :func:`write`: ``optimize(fn=_identity, inputs=<the raw samples, read once from the tar shards
  with shardstream>, chunk_bytes="64MB")``: the same bytes as the shards (a JPEG stays its JPEG
  bytes, a label its int), in LitData's own format; cached in the directory given;
* :func:`loader`: ``StreamingDataLoader(Decoded(input_dir), batch_size, num_workers=cores,
  persistent_workers=True)``, where ``Decoded.__getitem__`` applies the benchmark's functions to
  the fields (the same functions as every other row's). Persistent workers, as every other
  process-based row of the benchmark runs: each pass is one epoch of the same loader.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["INSTALL", "loader", "unavailable", "write"]

INSTALL = ".venv/bin/pip install --no-deps litdata==0.2.76 && .venv/bin/pip install tifffile obstore"

#: (field, function): what a sample becomes, in order (a tuple, as the other rows' ``to_tuple``).
Fields = tuple[tuple[str, Callable[[Any], Any]], ...]


def unavailable() -> str | None:
    """Why LitData cannot run here, or None."""
    try:
        import litdata  # noqa: F401
    except ImportError as exc:
        return f"litdata is not importable ({exc})"
    return None


def _identity(sample: dict[str, Any]) -> dict[str, Any]:
    """``optimize``'s function: the raw sample as it is (module level: its workers are spawned)."""
    return sample


def write(directory: Path, samples: Iterable[dict[str, Any]]) -> str:
    """The samples (dicts of bytes and ints) in LitData's chunks under ``directory`` (made once:
    a directory with an ``index.json`` is reused). Returns the directory as ``input_dir``."""
    from litdata import optimize

    if not (directory / "index.json").exists():
        # optimize() sets the process-wide start method to spawn (force=True) for its workers;
        # the other rows' DataLoaders would then spawn theirs too (and fail to pickle their
        # lambdas), so the method is put back as it was.
        method = multiprocessing.get_start_method(allow_none=True)
        try:
            optimize(
                fn=_identity,
                inputs=list(samples),
                output_dir=str(directory),
                chunk_bytes="64MB",
                num_workers=1,  # keeps the samples in the shards' order
                verbose=False,
            )
        finally:
            multiprocessing.set_start_method(method, force=True)
    return str(directory)


try:
    from litdata import StreamingDataset as _Base
except ImportError:  # unavailable() says so; the module still imports
    _Base = object


class Decoded(_Base):  # type: ignore[misc,valid-type]
    """A ``StreamingDataset`` whose items are ``fields``' functions applied to the stored fields."""

    def __init__(self, input_dir: str, fields: Fields) -> None:
        super().__init__(input_dir=input_dir)
        self.fields = fields

    def __getitem__(self, index: Any) -> Any:
        item = super().__getitem__(index)
        return tuple(function(item[name]) for name, function in self.fields)


def loader(input_dir: str, fields: Fields, batch: int, workers: int | None = None) -> Any:
    """``StreamingDataLoader`` over :class:`Decoded`, ``num_workers`` = this machine's cores."""
    from litdata import StreamingDataLoader

    return StreamingDataLoader(
        Decoded(input_dir, fields),
        batch_size=batch,
        num_workers=workers or os.cpu_count() or 1,
        persistent_workers=True,
    )
