"""ss.Loader process mode: batches through reused shared-memory buffers (loader/shm.py).

Real DataLoader worker processes, real /dev/shm: the batches are the same as torch's way, each
buffer is reused once the loop drops its batch, a loop that keeps its batches still gets right
data, and every stop path (end, break, close, an error, garbage collection, a killed worker)
leaves no segment and no worker behind.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time
from typing import Any

import numpy as np
import pytest
from _components import require_module
from _loader_cases import STOPS, stop

import shardstream as ss
from shardstream.loader.shm import INLINE_MAX

torch = require_module("torch", "the PyTorch DataLoader and tensor paths")
pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="the buffers live in /dev/shm (Linux)")

COUNTS = [40, 37, 52, 31]  # 160 samples; shards of different lengths, so workers end unevenly


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("shm")
    urls, n = [], 0
    for s, count in enumerate(COUNTS):
        with ss.ShardWriter(str(root / f"part{s}-%02d.tar"), maxcount=1000) as sink:
            for _ in range(count):
                # Each image is filled with its sample number: any mix-up between buffers shows.
                image = np.full((32, 48, 3), n % 251, np.uint8)
                sink.write({"__key__": f"k{n:04d}", "npy": image, "cls": n})
                n += 1
        urls.append(str(root / f"part{s}-00.tar"))
    return urls


def _ours() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("shardstream-")}


def _pipeline(urls: list[str], slow: float = 0.0) -> Any:
    ds = ss.ShardStream(urls, seed=1).decode().to_tuple("npy", "cls")
    if slow:
        ds = ds.map(_Sleep(slow))
    return ds


class _Sleep:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, sample: Any) -> Any:
        time.sleep(self.seconds)
        return sample


def _check(batch: Any) -> list[int]:
    images, cls = batch
    assert isinstance(images, torch.Tensor) and images.shape[1:] == (32, 48, 3)
    expected = (cls.numpy() % 251).astype(np.uint8)
    assert (images.numpy() == expected[:, None, None, None]).all(), "a batch holds another batch's data"
    return [int(c) for c in cls]


def test_batches_are_torch_s_batches_and_the_buffers_are_reused(urls: list[str]) -> None:
    with ss.Loader(_pipeline(urls), batch_size=8, num_workers=2, shm=False) as plain:
        reference = [_check(b) for b in plain]
    with ss.Loader(_pipeline(urls), batch_size=8, num_workers=2) as loader:
        ring = loader._ring
        assert ring is not None
        first = [_check(b) for b in loader]
        second = [_check(b) for b in loader]
        assert _ours() == set(), "names are unlinked once both processes have the buffer mapped"
        # Every batch came through a buffer, and the buffers were reused: a worker never needs
        # more than the batches in flight plus the one the loop holds.
        assert ring.batches == len(first) + len(second)
        assert len(ring.maps) <= 2 * (loader.prefetch_factor + 3)
    assert first == reference
    assert sorted(sum(second, [])) == list(range(sum(COUNTS)))


def test_a_loop_that_keeps_its_batches_gets_the_right_data(urls: list[str]) -> None:
    with ss.Loader(_pipeline(urls), batch_size=8, num_workers=2) as loader:
        kept = list(loader)  # every batch held at once: more than the buffers
        ring = loader._ring
        assert ring is not None and 0 < ring.batches < len(kept)  # the rest took a fresh segment
    assert sorted(sum((_check(b) for b in kept), [])) == list(range(sum(COUNTS)))


def test_a_batch_changed_in_place_does_not_leak_into_the_next(urls: list[str]) -> None:
    with ss.Loader(_pipeline(urls), batch_size=8, num_workers=2) as loader:
        seen = []
        for batch in loader:
            seen += _check(batch)
            batch[0].fill_(255)  # the loop writes over its batch, then drops it: the buffer returns
    assert sorted(seen) == list(range(sum(COUNTS)))


def test_pipeline_batches_and_pinning_go_through_the_buffers(urls: list[str]) -> None:
    ds = _pipeline(urls).batched(8)
    with ss.Loader(ds, batch_size=None, num_workers=2, pin_memory=True) as loader:
        got = sorted(sum((_check(b) for b in loader), []))
        assert loader._ring is not None and loader._ring.batches > 0
    assert got == list(range(sum(COUNTS)))


@pytest.mark.parametrize("how", STOPS)
def test_every_stop_leaves_no_segment_and_no_worker(urls: list[str], how: str) -> None:
    loader = ss.Loader(_pipeline(urls), batch_size=8, num_workers=2)
    it = iter(loader)
    _check(next(it))
    assert len(multiprocessing.active_children()) >= 2
    if not stop(how, loader, it):
        del it, loader
        gc.collect()
    deadline = time.monotonic() + 10
    while (multiprocessing.active_children() or _ours()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert multiprocessing.active_children() == []
    assert _ours() == set()


def test_a_killed_worker_is_an_immediate_error_naming_it(urls: list[str]) -> None:
    # worker_restarts=0: not replaced (test_heal.py has the replacements)
    loader = ss.Loader(_pipeline(urls, slow=0.02), batch_size=4, num_workers=2, worker_restarts=0)
    it = iter(loader)
    _check(next(it))
    victim = multiprocessing.active_children()[0].pid
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=str(victim)):
        for batch in it:
            _check(batch)
    assert time.monotonic() - started < 10, "the death is noticed at once, not after a timeout"
    loader.close()
    deadline = time.monotonic() + 10
    while (multiprocessing.active_children() or _ours()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert multiprocessing.active_children() == []
    assert _ours() == set(), "a killed worker's buffers are unlinked by the main process"


def test_shm_false_takes_torch_s_way(urls: list[str]) -> None:
    with ss.Loader(_pipeline(urls), batch_size=8, num_workers=1, shm=False) as loader:
        assert loader._ring is None
        assert sorted(sum((_check(b) for b in loader), [])) == list(range(sum(COUNTS)))


def _small_columns(batch: list[Any]) -> Any:
    """A custom collate: a column of labels, one of 8-byte arrays, a large stacked tensor, and
    a bfloat16 tensor (no numpy dtype)."""
    cls = torch.tensor([int(c) for _, c in batch])
    small = torch.from_numpy(np.stack([np.full(8, c % 251, np.uint8) for _, c in batch]))
    large = torch.stack([torch.from_numpy(np.ascontiguousarray(im)) for im, _ in batch]).float()  # 147 KB
    return large, cls, small, cls.to(torch.bfloat16)


def test_tensors_outside_the_buffers_never_take_a_descriptor_each(urls: list[str]) -> None:
    """Numbers and small arrays (under the shared-memory threshold) are collated outside the
    buffers; torch's queue would send each through a fresh segment and a file descriptor over a
    new socket (0.5 ms a tensor). They cross inside the batch's pickle instead, a custom
    collate's large tensor is copied into a buffer; only a dtype numpy lacks goes torch's way."""
    ds = ss.ShardStream(urls, seed=1).decode().to_tuple("npy", "cls")
    with ss.Loader(ds, batch_size=8, num_workers=2) as loader:  # the default collate
        got = sorted(sum((_check(b) for b in loader), []))
        shared = loader.stats()["shared_buffers"]
    assert got == list(range(sum(COUNTS)))
    batches = -(-COUNTS[0] // 8) + -(-COUNTS[1] // 8) + -(-COUNTS[2] // 8) + -(-COUNTS[3] // 8)
    assert shared == {"batches": batches, "inline": batches, "fresh": 0}  # the labels came inline

    with ss.Loader(ds, batch_size=8, num_workers=2, collate_fn=_small_columns) as loader:
        seen, copied = [], 0
        for large, cls, small, half in loader:
            seen += _check((large, cls))
            assert (small.numpy() == (cls.numpy() % 251)[:, None]).all()
            assert half.dtype == torch.bfloat16 and (half.float() == cls.float()).all()
            # A worker's short last batch may hold a large column small enough to come inline.
            copied += large.numel() * large.element_size() > INLINE_MAX
        shared = loader.stats()["shared_buffers"]
    assert sorted(seen) == list(range(sum(COUNTS)))
    assert copied >= batches - 2  # at most one short batch per worker
    inline = 2 * batches + (batches - copied)  # labels and small arrays, and the small large ones
    assert shared == {"batches": copied, "inline": inline, "fresh": batches}  # fresh: bfloat16
