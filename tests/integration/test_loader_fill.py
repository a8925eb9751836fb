"""ss.Loader decodes JPEGs straight into its batches, and makes thread mode's batches in reused
buffers: the batches equal the eager decode's, nothing downstream ever sees a deferred value,
errors keep their meaning, and a batch the training loop keeps is never overwritten."""

from __future__ import annotations

import gc
import io
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _components import require_module

import shardstream as ss
from shardstream.compat.writer import TarWriter
from shardstream.decoders import image as image_module
from shardstream.decoders.deferred import DeferredArray
from shardstream.errors import DecodingError
from shardstream.pipeline.parallel import Threads

Image = require_module("PIL.Image", "image encoding and decoding with Pillow", package="Pillow")
require_module("simplejpeg", "JPEG decoding with simplejpeg")
torch = require_module("torch", "the PyTorch DataLoader and tensor paths")

COUNTS = [13, 9, 17]
BAD = "s1_00004"  # its JPEG is cut short after the header (see _write)


def _jpeg(rng: np.random.Generator, size: tuple[int, int], mode: str = "RGB") -> bytes:
    pixels = rng.integers(0, 255, (*size, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, format="JPEG", quality=90)
    return out.getvalue()


def _write(root: Path, bad: bool = False, sizes: list[tuple[int, int]] | None = None) -> list[str]:
    rng = np.random.default_rng(7)
    urls = []
    for s, count in enumerate(COUNTS):
        url = str(root / f"shard-{s}.tar")
        with TarWriter(url) as sink:
            for i in range(count):
                key = f"s{s}_{i:05d}"
                data = _jpeg(rng, sizes[i % len(sizes)] if sizes else (40, 56))
                if bad and key == BAD:
                    data = data[: len(data) // 3]
                sink.write({"__key__": key, "jpg": data, "cls": str(i).encode()})
        urls.append(url)
    return urls


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return _write(tmp_path_factory.mktemp("fill"))


def _staged(urls: list[str], spec: str = "rgb8", **kw: Any) -> Any:
    return ss.ShardStream(urls, shuffle_shards=False).decode(spec, **kw).to_tuple("jpg", "cls")


def _eager(urls: list[str], spec: str = "rgb8") -> list[tuple[np.ndarray[Any, Any], int]]:
    return [(np.asarray(x), int(y)) for x, y in _staged(urls, spec)]


def _rows(loader: Any) -> list[tuple[np.ndarray[Any, Any], int]]:
    rows = []
    for images, labels in loader:
        assert isinstance(images, torch.Tensor)
        rows.extend(zip([np.array(x) for x in images.numpy()], labels.tolist(), strict=True))
    return rows


class _Fills:
    """Counts decodes made into a batch row (the deferred path) in this process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        fill = image_module.ImageHandler._fill

        def counted(handler: Any, data: bytes, mode: str, out: Any) -> None:
            self.count += 1
            fill(handler, data, mode, out)

        monkeypatch.setattr(image_module.ImageHandler, "_fill", counted)


@pytest.mark.parametrize("spec", ["rgb8", "rgba8", "l8"])
@pytest.mark.parametrize("threads", [1, 2])
def test_thread_mode_decodes_into_the_batch_what_the_stage_decodes(
    urls: list[str], spec: str, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _eager(urls, spec)
    fills = _Fills(monkeypatch)
    with ss.Loader(_staged(urls, spec), batch_size=5, num_threads=threads) as loader:
        rows = _rows(loader)
    assert fills.count == len(reference) == sum(COUNTS)  # every image went straight into its row
    assert len(rows) == len(reference)
    for (got, label), (want, expected) in zip(rows, reference, strict=True):
        assert label == expected and got.dtype == np.uint8 and np.array_equal(got, want)


def test_process_mode_decodes_into_its_shared_buffers_what_the_stage_decodes(urls: list[str]) -> None:
    reference = sorted(_eager(urls), key=lambda r: r[0].tobytes())
    with ss.Loader(_staged(urls), batch_size=4, num_workers=2) as loader:
        rows = _rows(loader)
        buffers = loader.stats()["shared_buffers"]
    assert buffers["batches"] > 0 and buffers["fresh"] == 0
    rows.sort(key=lambda r: r[0].tobytes())
    assert all(np.array_equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(rows, reference, strict=True))


def test_stages_that_read_the_value_and_custom_collation_get_arrays(
    urls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[type] = []

    def look(x: Any) -> Any:
        seen.append(type(x))
        return x

    def collate(samples: list[Any]) -> Any:
        seen.extend(type(s[0]) for s in samples)
        return samples

    fills = _Fills(monkeypatch)
    reading = _staged(urls).map_tuple(look, int)
    with ss.Loader(reading, batch_size=4, num_threads=2) as loader:
        assert sum(len(b[1]) for b in loader) == sum(COUNTS)
    with ss.Loader(_staged(urls), batch_size=4, num_threads=2, collate_fn=collate) as loader:
        assert sum(len(b) for b in loader) == sum(COUNTS)
    batched = _staged(urls).batched(4)  # the pipeline batches: the loader's collation does not
    with ss.Loader(batched, batch_size=None, num_threads=2) as loader:
        for images, _ in loader:
            assert isinstance(images, torch.Tensor) and images.shape[1:] == (40, 56, 3)
    assert seen and set(seen) == {np.ndarray}
    assert fills.count == 0
    for sample in _staged(urls):  # iterating the pipeline itself never defers
        assert type(sample[0]) is np.ndarray


def test_value_moving_stages_after_decode_still_defer(
    urls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def pipeline() -> Any:
        return (
            ss.ShardStream(urls, shuffle_shards=False, seed=3).decode("rgb8").shuffle(8).rename(image="jpg")
        )

    def rows(samples: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
        return [(s["__key__"], np.asarray(s["image"]).tobytes()) for s in samples]

    reference = rows(list(pipeline()))
    fills = _Fills(monkeypatch)
    with ss.Loader(pipeline().to_tuple("__key__", "image"), batch_size=6, num_threads=2) as loader:
        got = [(k, x.numpy().tobytes()) for keys, images in loader for k, x in zip(keys, images, strict=True)]
    assert got == reference
    assert fills.count == len(reference)

    # a mixture of a deferring source and one a map reads: columns of both kinds in one batch
    deferring = ss.ShardStream(urls[:1], shuffle_shards=False).decode("rgb8")
    mixed = ss.Mix([deferring, _raw(urls[1:])], weights=[1, 1])
    with ss.Loader(mixed.to_tuple("__key__", "jpg"), batch_size=4, num_threads=2) as loader:
        got = [(k, x.tobytes()) for keys, batch in loader for k, x in zip(keys, batch.numpy(), strict=True)]
    assert len(got) >= COUNTS[0] and {k[:2] for k, _ in got} == {"s0", "s1", "s2"}
    assert set(got) <= set(reference)


def _raw(urls: list[str]) -> Any:
    """A mixture source decoded eagerly (a map reads the value): arrays beside deferred ones."""
    return ss.ShardStream(urls, shuffle_shards=False).decode("rgb8").map_dict(jpg=np.ascontiguousarray)


def test_a_bad_jpeg_fails_or_is_skipped_as_in_the_stage(tmp_path: Path) -> None:
    urls = _write(tmp_path, bad=True)
    loader = ss.Loader(_staged(urls), batch_size=4, num_threads=2)
    with loader, pytest.raises(DecodingError) as caught:
        for _ in loader:
            pass
    message = str(caught.value)
    assert BAD in message and "shard-1.tar" in message and "'jpg'" in message

    skipping = ss.ShardStream(urls, shuffle_shards=False).decode("rgb8", handler=ss.warn_and_continue)
    loader = ss.Loader(skipping.to_tuple("__key__", "jpg"), batch_size=4, num_threads=2)
    with loader, pytest.warns(UserWarning, match=f"{BAD}.*skipped"):
        keys = [k for batch_keys, _ in loader for k in batch_keys]
    assert BAD not in keys and len(keys) == sum(COUNTS) - 1


def test_images_of_different_sizes_in_one_batch_behave_as_without_deferral(tmp_path: Path) -> None:
    urls = _write(tmp_path, sizes=[(40, 56), (56, 40)])
    with pytest.raises(ValueError, match="same shape"):
        with ss.Loader(_staged(urls), batch_size=4, num_threads=2) as loader:
            list(loader)
    listed = ss.Loader(_staged(urls), batch_size=4, collate_fn=lambda s: [np.asarray(x) for x, _ in s])
    with listed:
        shapes = {x.shape for batch in listed for x in batch}
    assert shapes == {(40, 56, 3), (56, 40, 3)}


def test_a_deferred_value_is_an_array_like(urls: list[str]) -> None:
    (value, _), *_ = _staged(urls).run(fills=True)
    assert type(value) is DeferredArray and value.shape == (40, 56, 3)
    assert np.array_equal(np.asarray(value), _eager(urls)[0][0])


def test_kept_batches_are_never_overwritten_by_reused_buffers(urls: list[str]) -> None:
    reference = _eager(urls)
    with ss.Loader(_staged(urls), batch_size=3, num_threads=2, prefetch_factor=1) as loader:
        for _ in range(3):  # epochs
            kept, views, rows = [], [], 0
            for i, (images, _labels) in enumerate(loader):
                if i % 3 == 0:
                    kept.append((rows, images))  # the whole batch
                elif i % 3 == 1:
                    views.append((rows, images[1:]))  # a view keeps the buffer too
                rows += len(images)
            for start, images in kept:
                for j, x in enumerate(images.numpy()):
                    assert np.array_equal(x, reference[start + j][0])
            for start, view in views:
                for j, x in enumerate(view.numpy()):
                    assert np.array_equal(x, reference[start + 1 + j][0])
            del kept, views
        buffers = loader.stats()["batch_buffers"]
    # kept batches outnumber the buffers: those batches were made in fresh memory instead
    assert buffers["reused"] > 0 and buffers["fresh"] > 0


def test_later_work_waits_behind_work_submitted_now() -> None:
    order: list[str] = []
    gate = threading.Event()
    with Threads(1) as pool:
        blocker = pool.submit(gate.wait, 10)
        time.sleep(0.05)  # the one thread is busy: what follows queues
        later = [pool.submit(order.append, f"later{i}", later=True) for i in range(2)]
        now = [pool.submit(order.append, f"now{i}") for i in range(2)]
        gate.set()
        for f in [blocker, *later, *now]:
            f.result(timeout=10)
        assert order == ["now0", "now1", "later0", "later1"]
        gate.clear()
        pool.submit(gate.wait, 10)
        time.sleep(0.05)
        pending = pool.submit(order.append, "never")
        threading.Timer(0.2, gate.set).start()
    assert pending.cancelled() and "never" not in order
    assert not any(t.name.startswith("shardstream-map") for t in threading.enumerate())


def test_a_batch_collected_while_its_buffers_are_busy_does_not_deadlock() -> None:
    """A batch in a reference cycle is freed by the garbage collector, which may run inside any
    allocation, also one made while this thread holds the buffers' lock: its finalizer then
    takes that lock again in the same thread."""
    from shardstream.loader.buffers import ReusedBuffers

    buffers = ReusedBuffers(2)
    done = threading.Event()

    def lend_and_collect() -> None:
        batch = buffers.empty((4, 8), np.dtype(np.uint8))
        cycle: list[Any] = [batch]
        cycle.append(cycle)
        del batch, cycle
        with buffers.lock:
            gc.collect()  # the batch's finalizer runs here, in this thread
        done.set()

    gc.disable()
    try:
        worker = threading.Thread(target=lend_and_collect, daemon=True)
        worker.start()
        worker.join(10)
    finally:
        gc.enable()
    assert done.is_set(), "the finalizer deadlocked on the buffers' lock"
    assert buffers.empty((4, 8), np.dtype(np.uint8)) is not None and buffers.reused == 1


def test_an_idle_pool_thread_holds_no_result() -> None:
    """A pool thread waiting for work keeps nothing of its last task alive: a batch it made
    must return its reused buffer as soon as the training loop drops it."""
    import weakref

    class Batch:
        pass

    with Threads(1) as pool:
        future = pool.submit(Batch)
        made = weakref.ref(future.result(timeout=10))
        del future
        deadline = time.monotonic() + 5
        while made() is not None and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)
        assert made() is None, "the idle pool thread still holds its last result"
