"""Reference points for the decode benchmark: what two cores can do with no pipeline at all.

* :class:`DecodeCeiling`: the dataset's JPEGs, already in memory, decoded to RGB arrays by two
  processes in parallel (the fast decoder the pipeline would use: simplejpeg when installed, else
  Pillow), timed from the first decode to the last. No reading, no batching, no IPC. Its
  processes are forked once and kept, so the time excludes process start-up.
* :class:`ThreadDecodeBatches`: the same JPEGs decoded on threads in one process straight into
  batches kept in a few reused buffers, yielded in order: what thread mode could reach if reading
  the shards, the pipeline's stages and collation cost nothing. Unlike the ceiling it writes its
  output into batches that live on (the ceiling's arrays are freed at once, in memory the cache
  still holds), which is what every loader has to do.
* :class:`ReadyArrays`: a dataset that yields a fresh copy of an already-decoded image plus a
  label, with no reading and no decoding: a DataLoader over it costs what torch's own collation
  and inter-process transfer cost, which no dataset can avoid.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from _common import Measurement

__all__ = ["DecodeCeiling", "ReadyArrays", "ThreadDecodeBatches", "floor_case", "load_jpegs"]


def load_jpegs(urls: list[str]) -> list[bytes]:
    """The ``jpg`` field of every sample, in order (read with shardstream, no decoding)."""
    from shardstream.compat import WebDataset

    return [bytes(sample["jpg"]) for sample in WebDataset(urls, shardshuffle=False)]


def _decoder() -> Any:
    try:
        import simplejpeg
    except ImportError:  # Pillow, as the pipeline would
        import io

        import numpy as np
        from PIL import Image

        return lambda data: np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    decode_jpeg = simplejpeg.decode_jpeg
    return lambda data: decode_jpeg(data, colorspace="RGB")


def _decode_loop(conn: Connection, jpegs: list[bytes]) -> None:
    decode = _decoder()
    while conn.recv():
        c0, t0 = _own_cpu(), time.perf_counter()
        for data in jpegs:
            decode(data)
        conn.send((t0, time.perf_counter(), _own_cpu() - c0))


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


class DecodeCeiling:
    """``processes`` forked processes, each decoding every ``processes``-th JPEG per pass."""

    def __init__(self, jpegs: list[bytes], processes: int = 2) -> None:
        ctx = multiprocessing.get_context("fork")
        self.count = len(jpegs)
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for i in range(processes):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_decode_loop, args=(there, jpegs[i::processes]), daemon=True)
            proc.start()
            self.conns.append(here)
            self.procs.append(proc)

    def run(self) -> Measurement:
        """One pass: wall time from the first process's start to the last one's end."""
        for conn in self.conns:
            conn.send(True)
        results = [conn.recv() for conn in self.conns]
        wall = max(r[1] for r in results) - min(r[0] for r in results)
        return Measurement(self.count, wall, sum(r[2] for r in results))

    def close(self) -> None:
        for conn in self.conns:
            conn.send(False)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


class ThreadDecodeBatches:
    """One pass per ``iter()``: ``(batch, labels)`` for every ``batch`` JPEGs, each batch decoded
    row by row by one of ``threads`` pool threads into one of ``buffers`` reused arrays (at most
    ``buffers - 2`` batches in flight, so the one the loop holds is never overwritten)."""

    def __init__(
        self,
        jpegs: list[bytes],
        decode: Callable[[bytes, Any], None],
        batch: int,
        threads: int,
        buffers: int = 5,
    ) -> None:
        import numpy as np

        self.jpegs, self.decode, self.batch = jpegs, decode, batch
        height, width = _dims(jpegs[0])
        self.buffers = [np.zeros((batch, height, width, 3), np.uint8) for _ in range(buffers)]
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="decode-bound")

    def _fill(self, k: int) -> tuple[Any, range]:
        out = self.buffers[k % len(self.buffers)]
        rows = self.jpegs[k * self.batch : (k + 1) * self.batch]
        for i, data in enumerate(rows):
            self.decode(data, out[i])
        return out[: len(rows)], range(len(rows))

    def __iter__(self) -> Iterator[tuple[Any, range]]:
        inflight: deque[Any] = deque()
        for k in range(-(-len(self.jpegs) // self.batch)):
            if len(inflight) >= len(self.buffers) - 2:
                yield inflight.popleft().result()
            inflight.append(self.pool.submit(self._fill, k))
        while inflight:
            yield inflight.popleft().result()

    def close(self) -> None:
        self.pool.shutdown()
        self.jpegs, self.buffers = [], []


def _dims(data: bytes) -> tuple[int, int]:
    import io

    from PIL import Image

    width, height = Image.open(io.BytesIO(data)).size
    return height, width


def _ready_arrays_base() -> Any:
    from torch.utils.data import IterableDataset

    return IterableDataset


class ReadyArrays(_ready_arrays_base()):  # type: ignore[misc]
    """``count`` samples ``(copy of a decoded image, label)``, split between DataLoader workers."""

    def __init__(self, images: list[Any], count: int) -> None:
        self.images, self.count = images, count

    def __iter__(self) -> Any:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        images = self.images
        for i in range(start, self.count, step):
            yield images[i % len(images)].copy(), i % 1000


def floor_case(jpegs: list[bytes], workers: int, batch: int) -> Any:
    """A pass of a plain DataLoader over :class:`ReadyArrays` (same count, shapes and batch)."""
    from torch.utils.data import DataLoader

    decode = _decoder()
    images = [decode(data) for data in jpegs[:8]]
    dataset = ReadyArrays(images, len(jpegs))

    def run() -> int:
        n = 0
        for b in DataLoader(dataset, batch_size=batch, num_workers=workers):
            n += len(b[1])
        return n

    return run
