"""SPDL 0.8.0 loading the image shards as its documentation builds an image loader (bench_loader's peer).

SPDL's "Best Practices" page recommends, for images that are not grouped into batches in
advance: decode each image with ``spdl.io`` (``demux_image`` then ``decode_packets``, which
converts to RGB24 by default) in a ``pipe`` stage with concurrency, ``aggregate`` the frames,
and make the batch in one copy with ``spdl.io.convert_frames`` and ``spdl.io.to_torch`` (no tensor
per image). Its tar reader is ``spdl.io.iter_tarfile`` over a whole shard in memory (the fastest
input its tar benchmark names). Its "Concurrency" page sizes the thread pool to hold every
synchronous stage's concurrency at once. So the pipeline here is:

    add_source(shard paths, continuous=True)      # one epoch per pass, the pipeline kept
    .pipe(read_shard)                             # open, read whole, iter_tarfile, group by key
    .disaggregate()
    .pipe(decode, concurrency=threads)            # demux_image + decode_packets
    .aggregate(batch)
    .pipe(batchify)                               # convert_frames + to_torch, labels to a tensor
    .add_sink(3)
    .build(num_threads=threads + 2)               # the two single-task stages besides the decodes

The decoder is SPDL's own (FFmpeg's, through ``spdl.io``), not the function the other rows
share: this row is SPDL as documented, so its share of the ceiling reflects that decoder too.
``spdl.io`` loads FFmpeg's shared libraries (major versions 4-9) from the system at first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["INSTALL", "SpdlLoader", "decode_one", "loader", "unavailable"]

INSTALL = (
    ".venv/bin/pip install spdl==0.8.0, and FFmpeg's shared libraries 4-9 for spdl.io (Debian 12: "
    "apt-get install libavcodec59 libavformat59 libavdevice59 libavfilter8)"
)


def unavailable(jpeg: bytes) -> str | None:
    """Why SPDL cannot run here (not installed, or spdl.io finds no FFmpeg libraries), or None."""
    try:
        import spdl.io
        import spdl.pipeline  # noqa: F401
    except ImportError as exc:
        return f"spdl is not importable ({exc})"
    try:
        decode_one(jpeg)
    except RuntimeError as exc:  # spdl.io loads FFmpeg at first use: a missing library lands here
        if "Failed to import libspdl" in str(exc):
            return "spdl.io found no FFmpeg shared libraries of a major version it supports (4-9)"
        return f"spdl.io could not decode a JPEG of the dataset ({str(exc).splitlines()[0][:200]})"
    return None


def read_shard(path: str) -> list[tuple[Any, int]]:
    """One shard read whole, split by ``spdl.io.iter_tarfile`` and grouped by key into
    ``(jpg, label)`` samples in file order (the JPEGs stay views into the shard's bytes)."""
    import spdl.io

    with open(path, "rb") as f:
        data = f.read()
    fields: dict[str, dict[str, Any]] = {}
    for name, content in spdl.io.iter_tarfile(data):
        key, _, ext = name.partition(".")
        fields.setdefault(key, {})[ext] = content
    return [(sample["jpg"], int(bytes(sample["cls"]))) for sample in fields.values()]


def decode_one(jpeg: Any) -> Any:
    """A JPEG to RGB24 frames: ``spdl.io.demux_image`` then ``spdl.io.decode_packets``."""
    import spdl.io

    return spdl.io.decode_packets(spdl.io.demux_image(jpeg))


def _decode(sample: tuple[Any, int]) -> tuple[Any, int]:
    jpeg, label = sample
    return decode_one(jpeg), label


def _batchify(items: list[tuple[Any, int]]) -> tuple[Any, Any]:
    import spdl.io
    import torch

    images = spdl.io.to_torch(spdl.io.convert_frames([frames for frames, _ in items]))
    return images, torch.tensor([label for _, label in items])


class SpdlLoader:
    """A built SPDL pipeline: each ``iter()`` is one epoch (``Pipeline.get_iterator``), like the
    other loaders' persistent workers; ``close()`` stops its threads."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    def __iter__(self) -> Iterator[Any]:
        return iter(self.pipeline.get_iterator())

    def close(self) -> None:
        self.pipeline.stop()


def loader(urls: list[str], threads: int, batch: int) -> SpdlLoader:
    """The pipeline of the module docstring over the shard files ``urls``."""
    from spdl.pipeline import PipelineBuilder

    pipeline = (
        PipelineBuilder()
        .add_source(list(urls), continuous=True)
        .pipe(read_shard)
        .disaggregate()
        .pipe(_decode, concurrency=threads)
        .aggregate(batch)
        .pipe(_batchify)
        .add_sink(3)
        .build(num_threads=threads + 2)
    )
    return SpdlLoader(pipeline)
