"""Clip batches from a video2dataset-style shard set ({key}.mp4 + {key}.json + {key}.txt).

One process with 2 DataLoader workers (writes a small synthetic shard set first)::

    python examples/video_clips.py --demo-data /tmp/video-shards

2 ranks x 2 workers on one machine (torchrun sets the ranks; gloo on CPU)::

    torchrun --nproc_per_node=2 examples/video_clips.py --demo-data /tmp/video-shards

Real data: ``--shards 'videos/{00000..00099}.tar'`` (or ``s3://...``, ``https://...``).

Each video becomes ``--clips`` clips of ``--frames`` frames (every 2nd frame, shorter side resized
to ``--size`` while decoding): a uint8 tensor ``batch x clips x frames x H x W x 3`` per batch. Only
the clips are decoded (PyAV seeks to the keyframe before each one), each DataLoader worker decodes
with one FFmpeg thread, and random clip starts depend on (seed, epoch, key) only, so a resumed run
draws the same clips. ``split="equal"`` gives every rank the same number of batches; a decode
handler that skips broken videos (``handler=wds.warn_and_continue``) would break that equality,
so filter broken videos out when writing shards instead.

Needs ``pip install av`` (or ``shardstream[video]``) and torch.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch.distributed as dist

import shardstream as wds
from shardstream.shards import World

log = logging.getLogger("video_clips")


def synthetic_mp4(seconds: float, fps: int = 25, size: tuple[int, int] = (128, 96)) -> bytes:
    """A small H.264 (or MPEG-4) video of a moving gradient, encoded in memory with PyAV."""
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    width, height = size
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        ramp = np.linspace(0, 255, width, dtype=np.float32)
        for i in range(round(seconds * fps)):
            image = np.empty((height, width, 3), np.uint8)
            image[..., 0] = np.roll(ramp, 3 * i).astype(np.uint8)[None, :]
            image[..., 1] = (i * 4) % 256
            image[..., 2] = np.linspace(0, 255, height, dtype=np.uint8)[:, None]
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode(None))
    return buffer.getvalue()


def write_demo_shards(directory: Path, shards: int = 4, per_shard: int = 6) -> str:
    """video2dataset's layout: the video, its metadata and its caption under one key."""
    directory.mkdir(parents=True, exist_ok=True)
    n = 0
    for shard in range(shards):
        with wds.ShardWriter(str(directory / f"{shard:05d}-%d.tar"), maxcount=per_shard) as sink:
            for _ in range(per_shard):
                seconds = 2.0 + (n % 5)
                key = f"{shard:05d}{n:04d}"
                meta = {"key": key, "duration": seconds, "status": "success"}
                sink.write({"__key__": key, "mp4": synthetic_mp4(seconds), "json": meta, "txt": f"clip {n}"})
                n += 1
    return f"{directory}/{{00000..{shards - 1:05d}}}-0.tar"


def to_item(sample: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """(clip dict, caption, metadata) -> (frames, caption, duration); runs in the workers."""
    clip, caption, meta = sample
    return clip["frames"], caption, float(meta["duration"])  # the json metadata rides along


def init_distributed() -> World:
    world = World.current()  # torchrun's RANK/WORLD_SIZE, SLURM, or one process
    if world.world_size > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group(
            "gloo", rank=world.rank, world_size=world.world_size, timeout=timedelta(minutes=5)
        )
    return world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", help="shard spec; default: the demo shards")
    parser.add_argument("--demo-data", type=Path, help="rank 0 writes demo shards here first")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--frames", type=int, default=8, help="frames per clip")
    parser.add_argument("--clips", type=int, default=2, help="clips per video")
    parser.add_argument("--size", type=int, default=64, help="shorter side after resizing")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    world = init_distributed()
    spec = args.shards
    if spec is None:
        if args.demo_data is None:
            parser.error("pass --shards or --demo-data")
        box = [write_demo_shards(args.demo_data) if world.rank == 0 else None]
        if world.world_size > 1:
            dist.broadcast_object_list(box, src=0)  # also waits until rank 0 has written them
        spec = box[0]

    dataset = (
        wds.WebDataset(spec, split="equal", batch_size=args.batch_size, shardshuffle=True, seed=0)
        .shuffle(16)
        .decode(wds.VideoClips(args.frames, clips=args.clips, step=2, size=args.size))
        .to_tuple("mp4", "txt", "json")
        .map(to_item)
        .batched(args.batch_size)
    )
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=args.num_workers)
    for epoch in range(args.epochs):
        start, clips, batches = time.perf_counter(), 0, 0
        seconds = 0.0
        for frames, captions, durations in loader:  # each iter() is the next epoch
            clips += frames.shape[0] * frames.shape[1]
            seconds += float(durations.sum())
            batches += 1
            if batches == 1 and epoch == 0:
                log.info("rank %d: frames %s %s, captions %s", world.rank, tuple(frames.shape), frames.dtype,
                         captions[:2])  # fmt: skip
            if world.world_size > 1:
                dist.barrier()  # stands in for DDP's gradient all-reduce: equal batch counts per rank
        elapsed = time.perf_counter() - start
        log.info(
            "rank %d epoch %d: %d batches (len %d), %d clips from %.0f s of video, %.1f clips/s",
            world.rank, epoch, batches, len(loader), clips, seconds, clips / elapsed,
        )  # fmt: skip
    loader.close()
    if world.world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
