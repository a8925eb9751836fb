"""Thread mode under hostile scheduling: CPython handing the GIL over every microsecond, and
stages that sleep a random while (releasing the GIL at random points), still give exactly the
one-thread batches, skip counts and positions.

Thread mode must not rely on the GIL for correctness (free-threaded CPython is coming): every
hand-off between threads goes through a lock, a queue or a future. A 1 us switch interval makes
the interpreter switch threads at nearly every call and loop turn, so a hand-off timed to work
only in the common interleaving shows here as a lost, repeated, misplaced or unfilled sample:
a ``_Spread.finish`` that returned before the rows it handed out were filled, which the fill and
spread tests did not notice, fails the JPEG test below, as does delivering chunks in the order
they complete. What no test under the GIL can show is a lock missing around a few bytecodes with
no call among them (the interpreter does not switch inside those): that part rests on the rule
above, not on this test.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _components import require_module
from _loader_cases import write_shards

import shardstream as ss

ROUNDS = 3


@pytest.fixture(autouse=True)
def _switch_every_microsecond() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.fixture(scope="module")
def text_urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_shards(tmp_path_factory.mktemp("interleave"))


def _crc(key: str) -> int:
    return zlib.crc32(key.encode())


def _jitter(sample: dict[str, Any]) -> dict[str, Any]:
    """Sleeps 0-300 us (a random while: the GIL is released at a random point of the run), fails
    for about one sample in six (what the skip handler must drop, in order)."""
    time.sleep(random.random() * 3e-4)
    if _crc(sample["__key__"]) % 6 == 0:
        raise ValueError(f"bad sample {sample['__key__']}")
    return sample


def _drop_some(sample: dict[str, Any]) -> dict[str, Any] | None:
    return None if _crc(sample["__key__"]) % 7 == 1 else sample


def _text_pipeline(urls: list[str]) -> Any:
    return (
        ss.ShardStream(urls, seed=11)
        .shuffle(16)
        .decode()
        .map(_jitter, handler=ss.ignore_and_continue)
        .map(_drop_some)
        .to_tuple("__key__", "cls")
    )


def _keys(loader: ss.Loader) -> Iterator[list[str]]:
    for batch in loader:
        yield list(batch[0])


def _skipped(loader: ss.Loader) -> int:
    return int(loader.stats()["skipped"])


def test_batches_skips_and_positions_are_the_one_thread_ones(text_urls: list[str]) -> None:
    with ss.Loader(_text_pipeline(text_urls), batch_size=3, num_threads=1) as one:
        reference = [list(_keys(one)), list(_keys(one))]
        skipped = _skipped(one)
    assert skipped > 0 and reference[0] != reference[1]
    for _ in range(ROUNDS):
        for threads in (2, 5):
            with ss.Loader(_text_pipeline(text_urls), batch_size=3, num_threads=threads) as loader:
                assert [list(_keys(loader)), list(_keys(loader))] == reference, f"{threads} threads"
                assert _skipped(loader) == skipped

    # A position taken mid-epoch on 5 threads (samples in flight on the pool) continues exactly
    # on one thread.
    flat = reference[0]
    for stop_at in (1, len(flat) // 2, len(flat) - 2):
        with ss.Loader(_text_pipeline(text_urls), batch_size=3, num_threads=5) as loader:
            it = _keys(loader)
            head = [next(it) for _ in range(stop_at)]
            state = json.loads(json.dumps(loader.state_dict()))
        assert head == flat[:stop_at]
        with ss.Loader(_text_pipeline(text_urls), batch_size=3, num_threads=1) as resumed:
            resumed.load_state_dict(state)
            assert list(_keys(resumed)) == flat[stop_at:], f"resumed after {stop_at} batches"


# -- JPEGs decoded straight into the batches, rows shared out between the pool threads ------------


@pytest.fixture(scope="module")
def jpeg_urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    from test_loader_fill import _write  # its shards: 39 JPEG + cls samples in 3 shards

    return _write(tmp_path_factory.mktemp("interleave_jpegs"))


def _jpeg_pipeline(urls: list[str]) -> Any:
    return ss.ShardStream(urls, shuffle_shards=False).decode("rgb8").to_tuple("jpg", "cls")


def test_rows_decoded_into_shared_batches_are_each_written_once(
    jpeg_urls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    require_module("simplejpeg", "JPEG decoding with simplejpeg")
    torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
    from shardstream.decoders import image as image_module

    eager = [(np.asarray(x), int(y)) for x, y in _jpeg_pipeline(jpeg_urls)]
    assert len(eager) == 39
    fill = image_module.ImageHandler._fill
    fills = []

    def slow_fill(handler: Any, data: bytes, mode: str, out: Any) -> None:
        time.sleep(random.random() * 3e-4)  # a decode of random length, the GIL released
        fill(handler, data, mode, out)
        fills.append(1)

    monkeypatch.setattr(image_module.ImageHandler, "_fill", slow_fill)
    for _ in range(ROUNDS):
        for threads in (2, 4):
            fills.clear()
            rows: list[tuple[np.ndarray[Any, Any], int]] = []
            with ss.Loader(_jpeg_pipeline(jpeg_urls), batch_size=8, num_threads=threads) as loader:
                for images, labels in loader:
                    assert isinstance(images, torch.Tensor)
                    rows.extend(zip([np.array(x) for x in images.numpy()], labels.tolist(), strict=True))
            assert len(fills) == len(eager)  # every image was decoded into its batch row
            assert [y for _, y in rows] == [y for _, y in eager]
            for i, ((got, _), (want, _)) in enumerate(zip(rows, eager, strict=True)):
                assert np.array_equal(got, want), f"row {i} on {threads} threads"


# -- large chunks: items skipped and dropped inside a chunk, positions taken in the middle of one --


@pytest.fixture(scope="module")
def many_urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    import _resume_cases

    return _resume_cases.write_shards(tmp_path_factory.mktemp("interleave_chunks"), [150, 170, 160, 140])


def _slow_jitter(sample: dict[str, Any]) -> dict[str, Any]:
    """Lets the GIL go (``sleep(0)``) half the time, stamps the thread it ran on, fails one
    sample in six."""
    if random.random() < 0.5:
        time.sleep(0)
    sample["thread"] = threading.current_thread().name
    if _crc(sample["__key__"]) % 6 == 0:
        raise ValueError(f"bad sample {sample['__key__']}")
    return sample


def _chunked_pipeline(urls: list[str]) -> Any:
    return (
        ss.ShardStream(urls, shuffle_shards=False)
        .decode()
        .map(_slow_jitter, handler=ss.ignore_and_continue)
        .map(_drop_some)
        .to_tuple("__key__", "thread")
    )


def test_large_chunks_keep_the_one_thread_batches_skips_and_positions(many_urls: list[str]) -> None:
    """16 threads, items of a few microseconds: chunks of about 4 ms of work hold tens of items
    (what one thread works in a row), with skipped and dropped items inside them, and positions
    taken after any batch (mid-chunk) continue exactly, on one thread or several."""
    with ss.Loader(_chunked_pipeline(many_urls), batch_size=5, num_threads=1) as one:
        reference = list(_keys(one))
        skipped = _skipped(one)
    with ss.Loader(_chunked_pipeline(many_urls), batch_size=5, num_threads=16) as loader:
        batches = [(list(keys), list(threads)) for keys, threads in loader]
        assert _skipped(loader) == skipped
    assert [keys for keys, _ in batches] == reference
    ran_on = [name for _, threads in batches for name in threads]
    longest = max(len(list(run)) for _, run in itertools.groupby(ran_on))
    assert longest >= 10, f"no chunk of more than {longest} items"

    flat = reference
    for stop_at in (1, 9, 33, len(flat) - 3):
        with ss.Loader(_chunked_pipeline(many_urls), batch_size=5, num_threads=16) as loader:
            it = _keys(loader)
            head = [next(it) for _ in range(stop_at)]
            state = json.loads(json.dumps(loader.state_dict()))
        assert head == flat[:stop_at]
        for threads in (1, 4):
            with ss.Loader(_chunked_pipeline(many_urls), batch_size=5, num_threads=threads) as resumed:
                resumed.load_state_dict(state)
                assert list(_keys(resumed)) == flat[stop_at:], f"resumed after {stop_at} on {threads}"
