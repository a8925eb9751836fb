"""Thread mode's pool shares a batch's decodes among its idle threads (``Threads.spread``), and a
run of per-sample stages on the pool hands out its first results before reading further ahead:
every row is filled exactly once, errors keep their one-thread meaning, nothing deadlocks, and
help still queued holds no batch."""

from __future__ import annotations

import gc
import io
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _components import require_module

import shardstream as ss
from shardstream.compat.writer import TarWriter
from shardstream.decoders import image as image_module
from shardstream.pipeline.parallel import Threads

WAIT = 10.0


def _slow_rows(seen: list[tuple[int, str]], seconds: float = 0.005) -> Any:
    lock = threading.Lock()

    def row(i: int) -> None:
        time.sleep(seconds)  # releases the GIL, as a decode does
        with lock:
            seen.append((i, threading.current_thread().name))

    return row


def test_spread_runs_every_index_once_on_the_idle_threads() -> None:
    seen: list[tuple[int, str]] = []
    with Threads(3) as pool:
        pool.submit(pool.spread, 24, _slow_rows(seen)).result(timeout=WAIT)
    assert sorted(i for i, _ in seen) == list(range(24))
    assert len({name for _, name in seen}) == 3, "the two idle threads did not help"


def test_spread_without_idle_threads_runs_everything_in_the_calling_thread() -> None:
    seen: list[tuple[int, str]] = []
    gate = threading.Event()
    with Threads(2) as pool:
        blocker = pool.submit(gate.wait, WAIT)
        time.sleep(0.05)  # the other thread is busy: help queues and never starts in time
        pool.submit(pool.spread, 6, _slow_rows(seen)).result(timeout=WAIT)
        gate.set()
        blocker.result(timeout=WAIT)
    assert sorted(i for i, _ in seen) == list(range(6))
    assert len({name for _, name in seen}) == 1


def test_every_pool_thread_spreading_at_once_does_not_deadlock() -> None:
    """Each thread waits only for rows that a running thread took, never for queued help."""
    seen: list[tuple[int, str]] = []
    with Threads(2) as pool:
        jobs = [pool.submit(pool.spread, 16, _slow_rows(seen, 0.002)) for _ in range(4)]
        for job in jobs:
            job.result(timeout=WAIT)
    assert len(seen) == 64


def test_spread_raises_the_lowest_failing_index_and_starts_no_more() -> None:
    started: list[int] = []

    def row(i: int) -> None:
        started.append(i)
        time.sleep(0.002)
        if i in (5, 7):
            raise ValueError(f"row {i}")

    with Threads(2) as pool, pytest.raises(ValueError, match="row 5"):
        pool.submit(pool.spread, 40, row).result(timeout=WAIT)
    assert len(started) < 40, "rows went on starting after a failure"


def test_help_still_queued_holds_no_batch() -> None:
    """A batch's help that no thread took yet must not keep the batch (its reused buffer) alive
    once the batch is made."""

    class Batch:
        pass

    gate = threading.Event()
    with Threads(2) as pool:
        blocker = pool.submit(gate.wait, WAIT)
        time.sleep(0.05)
        batch = Batch()
        made = weakref.ref(batch)
        pool.submit(pool.spread, 4, lambda i, b=batch: None).result(timeout=WAIT)
        del batch
        gc.collect()
        assert made() is None, "help waiting on the pool holds the batch"
        gate.set()
        blocker.result(timeout=WAIT)


@pytest.mark.parametrize(("later", "first"), [(False, "row1"), (True, "queued")])
def test_help_takes_the_priority_of_the_work_that_spreads(later: bool, first: str) -> None:
    """Help for a batch the training loop waits for (work submitted now) goes before work
    submitted later; help for a batch made ahead (later) waits behind it."""
    order: list[str] = []
    start, free = threading.Event(), threading.Event()

    def row(i: int) -> None:
        if i == 0:  # the spreading thread: free the other one, then stay busy a while
            free.set()
            time.sleep(0.1)
        order.append(f"row{i}")

    with Threads(2) as pool:
        spread = pool.submit(lambda: (start.wait(WAIT), pool.spread(2, row)), later=later)
        blocker = pool.submit(free.wait, WAIT)
        time.sleep(0.05)  # both threads busy: what follows queues
        queued = pool.submit(order.append, "queued", later=True)
        start.set()
        for f in (spread, blocker, queued):
            f.result(timeout=WAIT)
    assert order[0] == first, order


def _write_jpegs(root: Path, count: int = 96) -> list[str]:
    Image = require_module("PIL.Image", "image encoding and decoding with Pillow", package="Pillow")
    rng = np.random.default_rng(3)
    url = str(root / "shard-0.tar")
    with TarWriter(url) as sink:
        for i in range(count):
            out = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)).save(out, format="JPEG")
            sink.write({"__key__": f"k{i:05d}", "jpg": out.getvalue(), "cls": str(i).encode()})
    return [url]


def test_thread_mode_decodes_one_batch_on_several_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_module("simplejpeg", "JPEG decoding with simplejpeg")
    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    urls = _write_jpegs(tmp_path)
    threads_of_row: dict[int, str] = {}
    fill = image_module.ImageHandler._fill

    def recorded(handler: Any, data: bytes, mode: str, out: Any) -> None:
        time.sleep(0.001)  # a slower decode, so the idle thread finds rows left to take
        fill(handler, data, mode, out)
        threads_of_row[id(out)] = threading.current_thread().name

    monkeypatch.setattr(image_module.ImageHandler, "_fill", recorded)
    reference = [
        (np.asarray(x), int(y)) for x, y in ss.ShardStream(urls).decode("rgb8").to_tuple("jpg", "cls")
    ]
    pipeline = ss.ShardStream(urls).decode("rgb8", jpeg_backend="simplejpeg").to_tuple("jpg", "cls")
    with ss.Loader(pipeline, batch_size=96, num_threads=2) as loader:
        (images, labels), *rest = list(loader)  # one batch: nothing else for the other thread to do
    assert not rest and isinstance(images, torch.Tensor)
    assert all(np.array_equal(images[i].numpy(), x) and labels[i] == y for i, (x, y) in enumerate(reference))
    assert len(set(threads_of_row.values())) == 2, "one thread decoded the whole batch"


def test_a_run_on_the_pool_hands_out_results_before_reading_further_ahead() -> None:
    """With a slow reader, the first item comes out once its chunk is done, not after the run
    has read its full window of chunks ahead (2 x threads + 2)."""
    reads: list[int] = []
    first_at: list[int] = []

    def source() -> Any:
        for i in range(40):
            if i:
                time.sleep(0.01)  # a slow read; the pool finishes a chunk in microseconds
            reads.append(i)
            yield {"__key__": f"k{i}", "n": i}

    pipeline = ss.DataPipeline(source, ss.map(lambda s: s["n"]))
    with ss.Loader(pipeline, batch_size=None, num_threads=2) as loader:
        for _ in loader:
            if not first_at:
                first_at.append(len(reads))
    assert first_at[0] <= 3, f"{first_at[0]} items were read before the first came out"
