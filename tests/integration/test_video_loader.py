"""Video clips through WebLoader: a video2dataset-style shard set (key.mp4 + key.json + key.txt)
read by 2 DataLoader workers, and by 2 gloo ranks x 2 workers with an all_reduce per batch.

Every frame of the generated videos draws its own index, so each batch proves its clips are the
frames named by ``indices``; clip starts are checked to be a function of (seed, epoch, key) only.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _components import require_module

require_module("av", "video and audio decoding with PyAV", package="PyAV")
torch = require_module("torch", "the PyTorch DataLoader and tensor paths")

from _procs import run_spawned  # noqa: E402

import shardstream as ss  # noqa: E402
from shardstream.decoders._av import thread_count  # noqa: E402
from shardstream.decoders._synthetic import encode_video, read_pattern  # noqa: E402
from shardstream.tar.sharded_writer import ShardWriter  # noqa: E402

SHARDS, PER_SHARD = 4, 3
BATCH = 2
JOIN_TIMEOUT = 120.0


def write_video_shards(directory: Path) -> list[str]:
    """video2dataset's layout: ``{key}.mp4``, ``{key}.json`` (metadata), ``{key}.txt`` (caption)."""
    directory.mkdir(parents=True, exist_ok=True)
    urls = []
    n = 0
    for shard in range(SHARDS):
        with ShardWriter(str(directory / f"{shard:05d}-%d.tar"), maxcount=100) as sink:
            for _ in range(PER_SHARD):
                frames = 30 + 11 * n  # 1.2 s .. 5.6 s
                codec = "h264" if n % 2 else "mpeg4"
                video = encode_video(frames, codec=codec, gop=12, audio_rate=16000 if n % 3 == 0 else None)
                meta = {"url": f"https://example.com/{n}", "duration": frames / 25, "status": "success"}
                sink.write(
                    {"__key__": f"{shard:05d}{n:04d}", "mp4": video, "json": meta, "txt": f"video {n}"}
                )
                n += 1
        urls.append(str(directory / f"{shard:05d}-0.tar"))
    return urls


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_video_shards(tmp_path_factory.mktemp("videos"))


def to_item(sample: tuple[Any, ...]) -> tuple[Any, ...]:
    """Runs in the worker: frames, indices, caption, key, and the FFmpeg threads used there."""
    clip, caption, key = sample
    return clip["frames"], clip["indices"], caption, key, thread_count(None)


def dataset(urls: list[str], **kw: Any) -> Any:
    return (
        ss.WebDataset(urls, shardshuffle=False, seed=9, **kw)
        .decode(ss.VideoClips(4, clips=2, step=2, size=32))
        .to_tuple("mp4", "txt", "__key__")
        .map(to_item)
        .batched(BATCH)
    )


def check_batch(batch: tuple[Any, ...], threads_expected: int = 1) -> dict[str, list[int]]:
    """Frames match indices; FFmpeg ran with 1 thread in a worker (0: automatic, in the main process)."""
    frames, indices, captions, keys, threads = batch
    assert frames.shape == (len(keys), 2, 4, 32, 32, 3) and frames.dtype == torch.uint8
    assert indices.shape == (len(keys), 2, 4) and indices.dtype == torch.int64
    decoded = np.array([read_pattern(f) for f in frames.reshape(-1, 32, 32, 3).numpy()])
    np.testing.assert_array_equal(decoded, indices.reshape(-1).numpy())
    assert all(caption.startswith("video ") for caption in captions)
    assert threads.tolist() == [threads_expected] * len(keys)
    return {key: row[:, 0].tolist() for key, row in zip(keys, indices, strict=True)}


def starts_per_key(loader: Any, threads_expected: int = 1) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for batch in loader:
        batch_starts = check_batch(batch, threads_expected)
        assert not set(batch_starts) & set(seen), "a sample was read twice"
        seen.update(batch_starts)
    return seen


@pytest.mark.timeout(180)
def test_two_workers_read_every_clip_with_one_ffmpeg_thread_each(urls: list[str]) -> None:
    loader = ss.WebLoader(dataset(urls), batch_size=None, num_workers=2)
    epoch0 = starts_per_key(loader)
    epoch1 = starts_per_key(loader)  # the loader's second pass is epoch 1
    loader.close()
    assert len(epoch0) == len(epoch1) == SHARDS * PER_SHARD
    assert epoch0 != epoch1, "random clips change with the epoch"
    # The same epoch again, in one process: clips depend on (seed, epoch, key), not on the worker.
    single = ss.WebLoader(dataset(urls), batch_size=None, num_workers=0)
    assert starts_per_key(single, threads_expected=0) == epoch0
    single.close()


# -- 2 gloo ranks x 2 workers -------------------------------------------------------------------


def rank_main(rank: int, world_size: int, port: int, urls: list[str], out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=30),
    )
    try:
        loader = ss.WebLoader(dataset(urls, split="equal", batch_size=BATCH), batch_size=None, num_workers=2)
        seen: dict[str, list[int]] = {}
        batches = 0
        for batch in loader:
            seen.update(check_batch(batch))
            batches += 1
            step = torch.ones(1)
            dist.all_reduce(step)  # a rank with an extra batch would wait here alone
        loader.close()
        Path(out).write_text(json.dumps({"batches": batches, "starts": seen}))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(180)
@pytest.mark.skipif(sys.platform == "win32", reason="gloo over tcp on loopback")
def test_two_ranks_times_two_workers_finish_together(urls: list[str], tmp_path: Path) -> None:
    from shardstream.testing import free_port

    port = free_port()
    outs = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    codes = run_spawned(rank_main, [(r, 2, port, urls, outs[r]) for r in range(2)], timeout=JOIN_TIMEOUT)
    assert codes == [0, 0]
    reports = [json.loads(Path(o).read_text()) for o in outs]
    assert reports[0]["batches"] == reports[1]["batches"] == SHARDS * PER_SHARD // (2 * BATCH)
    keys = [k for r in reports for k in r["starts"]]
    assert len(keys) == len(set(keys)) == SHARDS * PER_SHARD
