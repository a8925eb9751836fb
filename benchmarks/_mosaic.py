"""Mosaic Streaming 0.13.0 reading the benchmark's samples from MDS shards (a peer of bench_loader).

Its quick start and "Main Concepts" pages write a dataset with ``MDSWriter(out=..., columns=...)``
(a column's encoding per field) and read it with ``StreamingDataset`` in a torch ``DataLoader``;
for data already on local disk ``local`` is that directory and ``remote`` is None, and
``batch_size`` is given to the dataset too (it partitions samples per worker by batch). Transforms
go in a subclass's ``__getitem__`` (its own vision datasets, ``streaming/vision/base.py``). So:

* :func:`write`: ``MDSWriter(out=directory, columns=...)`` with its defaults (no compression, which
  its docs offer for shards that cross a network; 64 MiB shards), the raw fields as they are in the
  tar shards (``bytes`` for a JPEG or a payload, ``int`` for a label);
* :func:`loader`: ``DataLoader(Decoded(local=directory, remote=None, batch_size=batch,
  shuffle=False), batch_size=batch, num_workers=2, persistent_workers=True)``, where
  ``Decoded.__getitem__`` applies the benchmark's functions to the fields (the same functions as
  every other row's).

``import streaming`` imports its dataset zoo (``streaming.vision`` imports torchvision,
``streaming.text`` transformers' tokenizers, ``streaming.multimodal``), which this benchmark does
not use; PyPI's torchvision is built against PyPI's CUDA torch and does not load next to the CPU
torch this project installs. So :func:`_import` registers those three subpackages as empty
modules before ``import streaming``; the reader itself (``streaming.base``: ``MDSWriter``,
``StreamingDataset``, shared memory, partitioning) is imported as shipped. It still imports
``transformers`` (for two type names in ``streaming.base.dataloader``): 5.24.0 loads next to
huggingface_hub 2.x, which the project's ``[hf]`` extra installs, where the 4.x its metadata asks
for does not.

A ``StreamingDataset`` registers its ``local`` directory in shared memory for as long as it
lives, and a second one on the same directory in the same process raises: :class:`MosaicLoader`
lets its dataset go in ``close()`` (each round makes a new loader).
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["INSTALL", "MosaicLoader", "loader", "unavailable", "write"]

INSTALL = (
    ".venv/bin/pip install --no-deps mosaicml-streaming==0.13.0 && "
    ".venv/bin/pip install transformers==5.24.0 zstd xxhash python-snappy brotli catalogue"
)

#: (field, function): what a sample becomes, in order (a tuple, as the other rows' ``to_tuple``).
Fields = tuple[tuple[str, Callable[[Any], Any]], ...]

_ZOO = ("streaming.multimodal", "streaming.text", "streaming.vision")


def _import() -> Any:
    """``streaming`` without its dataset zoo (see the module docstring)."""
    if "streaming" not in sys.modules:
        for name in _ZOO:
            sys.modules.setdefault(name, types.ModuleType(name))
    import streaming

    return streaming


def unavailable() -> str | None:
    """Why Mosaic Streaming cannot run here, or None."""
    try:
        _import()
    except ImportError as exc:
        return f"streaming (mosaicml-streaming) is not importable ({exc})"
    return None


def write(directory: Path, samples: Iterable[dict[str, Any]], columns: dict[str, str]) -> str:
    """The samples in MDS shards under ``directory`` (made once: a directory with an
    ``index.json`` is reused); ``columns``: MDS encodings, e.g. ``{"jpg": "bytes", "cls": "int"}``.
    Returns the directory (``local``)."""
    if not (directory / "index.json").exists():
        writer_type = _import().MDSWriter
        with writer_type(out=str(directory), columns=columns) as out:
            for sample in samples:
                out.write(sample)
    return str(directory)


def _dataset_base() -> Any:
    try:
        return _import().StreamingDataset
    except ImportError:  # unavailable() says so; the module still imports
        return object


class Decoded(_dataset_base()):  # type: ignore[misc]
    """A ``StreamingDataset`` whose items are ``fields``' functions applied to the stored fields."""

    def __init__(self, local: str, fields: Fields, batch: int) -> None:
        super().__init__(local=local, remote=None, batch_size=batch, shuffle=False)
        self.fields = fields

    def __getitem__(self, index: int) -> Any:
        item = super().__getitem__(index)
        return tuple(function(item[name]) for name, function in self.fields)


class MosaicLoader:
    """A torch ``DataLoader`` over :class:`Decoded`; ``close()`` stops its workers and lets the
    dataset (and its shared memory) go."""

    def __init__(self, dataloader: Any) -> None:
        self.dataloader = dataloader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.dataloader)

    def close(self) -> None:
        running = getattr(self.dataloader, "_iterator", None)
        if running is not None:
            running._shutdown_workers()
        self.dataloader = None
        gc.collect()


def loader(local: str, fields: Fields, batch: int, workers: int = 2) -> MosaicLoader:
    """The DataLoader of the module docstring."""
    from torch.utils.data import DataLoader

    dataset = Decoded(local, fields, batch)
    return MosaicLoader(DataLoader(dataset, batch_size=batch, num_workers=workers, persistent_workers=True))
