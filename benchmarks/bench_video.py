"""bench_video: 8-frame clips by seeking (VideoClips) vs decoding the whole file and slicing.

WebDataset's way to train on clips is ``.decode(wds.torch_video)`` (``torchvision.io.read_video``:
every frame of the video decoded to RGB) and then slicing a clip out. torchvision no longer ships
``read_video``, so that side is measured with our PyAV ``decode_video`` (in memory, one array, one
FFmpeg thread): a lower bound on the cost of the original. Both sides see the same shards.

* **per video, one process**: CPU per 8-frame clip at a random start vs the whole-file decode of
  the same 30 s videos (target, issue 13: a clip costs at most 1/8 of the whole file);
* **WebLoader, 1 and 2 workers**: clips/s, CPU per clip (process + workers) and the peak memory
  of the process tree (this process and its workers): the sum of PSS (``smaps_rollup``: a page
  shared by N processes counts 1/N in each, so what the workers share with their parent after the
  fork counts once) and, beside it, of RSS (which counts it in every process), sampled by a
  separate process (``_rss``), the peak after the first tenth of the videos next to the peak at
  the end (target: flat over many videos);
* **one process over many clip decodes**: its PSS and RSS after every tenth (flat).

The dataset: ``--unique`` distinct 30 s 640x360 H.264 videos (25 fps, a keyframe every
``--gop`` frames, x264 veryfast, a scrolling texture), repeated under distinct keys to
``--videos`` samples in shards of 20; cached in ``--data``. A second set with x264's default
keyframe placement (250 frames and scene cuts) shows how the clip cost depends on the GOP.

    .venv/bin/python benchmarks/bench_video.py [--videos 200] [--whole-videos 40] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import _mark, _ready, cpu_seconds, emit_report, machine_line  # noqa: E402
from _rss import PSS_SHARE, TreeMemory, rollup  # noqa: E402

SECONDS, FPS, WIDTH, HEIGHT = 30, 25, 640, 360
PER_SHARD = 20
CLIP = 8


def build_videos(root: Path, videos: int, unique: int, gop: int | None) -> tuple[list[str], list[bytes]]:
    """Shards of ``videos`` samples (``mp4`` + ``json`` + ``txt``) over ``unique`` encodings."""
    from shardstream.decoders._synthetic import encode_video
    from shardstream.tar.sharded_writer import ShardWriter

    name = f"video-{videos}-{unique}-{gop or 'default'}"
    directory = root / name
    params = {"videos": videos, "unique": unique, "gop": gop, "size": [WIDTH, HEIGHT], "version": 1}
    shards = -(-videos // PER_SHARD)
    urls = [str(directory / f"v-{i:06d}.tar") for i in range(shards)]
    cache = [directory / f"unique-{i}.mp4" for i in range(unique)]
    if not _ready(directory, params):
        directory.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        for i, path in enumerate(cache):
            texture = rng.integers(0, 256, (HEIGHT // 8, WIDTH // 8 * 2, 3), dtype=np.uint8)
            texture = texture.repeat(8, 0).repeat(8, 1)
            print(f"  encoding video {i + 1}/{unique} ({SECONDS} s {WIDTH}x{HEIGHT}, gop {gop or 'default'})")
            data = encode_video(
                SECONDS * FPS, fps=FPS, width=WIDTH, height=HEIGHT, gop=gop, texture=texture,
                options={"preset": "veryfast"}, faststart=True,
            )  # fmt: skip
            path.write_bytes(data)
        encoded = [p.read_bytes() for p in cache]
        with ShardWriter(str(directory / "v-%06d.tar"), maxcount=PER_SHARD, mtime=0) as sink:
            for k in range(videos):
                meta = {"duration": SECONDS, "source": k % unique}
                sink.write(
                    {"__key__": f"vid{k:06d}", "mp4": encoded[k % unique], "json": meta, "txt": f"video {k}"}
                )
        _mark(directory, params)
    return urls, [p.read_bytes() for p in cache]


def per_video(encoded: list[bytes], repeats: int) -> dict[str, float]:
    """Median CPU seconds: whole-file decode and 8-frame clips at random starts (one thread)."""
    from shardstream.decoders.clips import VideoClips
    from shardstream.decoders.video import decode_video

    whole, clip = [], []
    for data in encoded:
        c0 = time.process_time()
        frames = decode_video(data, threads=1)[0]
        whole.append(time.process_time() - c0)
        del frames
        for seed in range(repeats):
            c0 = time.process_time()
            VideoClips(CLIP, seed=seed, output="numpy", threads=1)(".mp4", data)
            clip.append(time.process_time() - c0)
    return {"whole": statistics.median(whole), "clip": statistics.median(clip), "clips": len(clip)}


def memory_over_many(encoded: list[bytes], count: int) -> list[tuple[int, int, int]]:
    """(videos decoded, PSS, RSS in MiB) every tenth of ``count`` 8-frame clip decodes in this process."""
    from shardstream.decoders.clips import VideoClips

    points = []
    for i in range(count):
        out = VideoClips(CLIP, seed=i, output="numpy", threads=1)(".mp4", encoded[i % len(encoded)])
        del out
        if (i + 1) % max(1, count // 10) == 0:
            pss, rss = rollup()
            points.append((i + 1, pss // 2**20, rss // 2**20))
    return points


def seek_cost(data: bytes, repeats: int = 50) -> dict[str, float]:
    """CPU ms to open a video from memory, seek to 24 s and read one packet, per container (the
    MP4 remuxed, not re-encoded): what a stored keyframe index could save at most."""
    import io

    import av

    def remux(fmt: str) -> bytes:
        out = io.BytesIO()
        with av.open(io.BytesIO(data)) as src, av.open(out, "w", format=fmt) as dst:
            stream = src.streams.video[0]
            target = dst.add_stream_from_template(stream)
            for packet in src.demux(stream):
                if packet.dts is not None:
                    packet.stream = target
                    dst.mux(packet)
        return out.getvalue()

    costs = {}
    for name, blob in (("mp4", data), ("mkv", remux("matroska")), ("mpegts", remux("mpegts"))):
        c0 = time.process_time()
        for _ in range(repeats):
            with av.open(io.BytesIO(blob)) as container:
                stream = container.streams.video[0]
                container.seek(int(24 / stream.time_base), stream=stream, backward=True)
                next(container.demux(stream))
        costs[name] = (time.process_time() - c0) / repeats * 1000
    return costs


class _SliceClip:
    """WebDataset's way: all frames decoded (torch_video), then 8 consecutive ones sliced out."""

    def __call__(self, sample: tuple[Any, Any]) -> tuple[Any, Any]:
        (frames, _audio, _info), key = sample
        start = int(np.random.default_rng(zlib.crc32(key.encode())).integers(0, len(frames) - CLIP + 1))
        return frames[start : start + CLIP].clone(), key


def _clip_frames(sample: tuple[Any, Any]) -> tuple[Any, Any]:
    clip, key = sample
    return clip["frames"][0], key


def loader_pass(urls: list[str], approach: str, workers: int) -> dict[str, Any]:
    import shardstream as ss

    ds = ss.WebDataset(urls, shardshuffle=False, seed=0)
    if approach == "clips":
        ds = ds.decode(ss.VideoClips(CLIP), only=["mp4"]).to_tuple("mp4", "__key__").map(_clip_frames)
    else:
        ds = ds.decode(ss.torch_video, only=["mp4"]).to_tuple("mp4", "__key__").map(_SliceClip())
    loader = ss.WebLoader(ds, batch_size=None, num_workers=workers)
    tenth = max(1, len(urls) * PER_SHARD // 10)
    paused = 0.0  # the two readings of the tree's memory, taken out of the time
    early = (0, 0)
    with TreeMemory() as memory:
        c0, t0 = cpu_seconds(), time.perf_counter()
        n = 0
        for frames, _key in loader:
            assert tuple(frames.shape) == (CLIP, HEIGHT, WIDTH, 3)
            n += 1
            if n == tenth:
                p0 = time.perf_counter()
                memory.sample()
                early = memory.pss, memory.rss
                paused += time.perf_counter() - p0
        p0 = time.perf_counter()
        memory.sample()  # the workers still alive
        paused += time.perf_counter() - p0
        loader.close()
        wall, cpu = time.perf_counter() - t0 - paused, cpu_seconds() - c0
    mib = 2**20
    return {
        "clips": n, "wall": wall, "cpu": cpu, "pss_early": early[0] / mib, "rss_early": early[1] / mib,
        "pss_end": memory.pss / mib, "rss_end": memory.rss / mib,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("bench-data"))
    parser.add_argument("--videos", type=int, default=200, help="samples in the clip dataset")
    parser.add_argument("--unique", type=int, default=8, help="distinct encodings among them")
    parser.add_argument("--gop", type=int, default=50, help="keyframe interval in frames (2 s)")
    parser.add_argument("--whole-videos", type=int, default=40, help="videos for the whole-file passes")
    parser.add_argument("--repeats", type=int, default=10, help="clips per video in the per-video test")
    parser.add_argument("--rss-videos", type=int, default=1000, help="clip decodes in the RSS test")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()

    urls, encoded = build_videos(args.data, args.videos, args.unique, args.gop)
    _, default_gop = build_videos(args.data, args.unique, args.unique, None)
    whole_urls = urls[: max(2, -(-args.whole_videos // PER_SHARD))]
    size_mb = sum(len(e) for e in encoded) / len(encoded) / 1e6

    lines = [
        "# bench_video: 8-frame clips by seeking vs whole-file decode then slice",
        "",
        f"- date: {time.strftime('%Y-%m-%d')}",
        f"- machine: {machine_line()}",
        f"- command: `.venv/bin/python benchmarks/bench_video.py --videos {args.videos} "
        f"--whole-videos {args.whole_videos}`",
        f"- videos: {SECONDS} s {WIDTH}x{HEIGHT} H.264 (x264 veryfast, {FPS} fps, {size_mb:.2f} MB each), "
        f"{args.unique} distinct encodings repeated under distinct keys; shards of {PER_SHARD}",
        "- whole-file side: PyAV `decode_video` into one array (torchvision's `read_video` is gone), then a "
        "random 8-frame slice; a lower bound on WebDataset's `torch_video` cost",
        "",
        "## CPU per clip, one process, one FFmpeg thread (median over videos and random starts)",
        "",
        "| keyframes | whole-file decode | 8-frame clip | clip / whole | target |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, data in ((f"every {args.gop} frames ({args.gop / FPS:.0f} s)", encoded),
                         ("x264 default (250 frames + scene cuts)", default_gop)):  # fmt: skip
        r = per_video(data, args.repeats)
        print(f"  per video, {label}: whole {r['whole']:.3f} s, clip {r['clip']:.4f} s")
        lines.append(
            f"| {label} | {r['whole'] * 1000:.0f} ms | {r['clip'] * 1000:.1f} ms | "
            f"1/{r['whole'] / r['clip']:.1f} | <= 1/8 |"
        )
    seeks = seek_cost(encoded[0])
    print(f"  open + seek: {seeks}")
    lines += [
        "",
        "Opening a video from memory and seeking (the container's own index: MP4 `stss`, Matroska "
        "cues; a timestamp search in MPEG-TS) costs "
        + ", ".join(f"{ms:.1f} ms ({name})" for name, ms in seeks.items())
        + " per clip, so a separate keyframe index stored beside the videos was not built.",
    ]
    points = memory_over_many(encoded, args.rss_videos)
    print(f"  (clips, PSS, RSS) over {args.rss_videos} clip decodes: {points}")
    lines += [
        "",
        f"## PSS and RSS of one process over {args.rss_videos:,} clip decodes (MiB, after every tenth)",
        "",
        "| clips | " + " | ".join(str(n) for n, _, _ in points) + " |",
        "|---|" + "---:|" * len(points),
        "| PSS | " + " | ".join(str(pss) for _, pss, _ in points) + " |",
        "| RSS | " + " | ".join(str(rss) for _, _, rss in points) + " |",
    ]
    lines += [
        "",
        "## WebLoader: clips/s, CPU per clip (process + workers), peak memory of the process tree",
        "",
        "| approach | workers | videos | clips/s | CPU per clip | peak PSS of the tree after 10% | at end "
        "| peak RSS of the tree after 10% | at end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    results: list[dict[str, Any]] = []
    for workers in (1, 2):
        for approach, pass_urls in (("clips", urls), ("whole", whole_urls)):
            r = loader_pass(pass_urls, approach, workers)
            r.update(approach=approach, workers=workers)
            results.append(r)
            numbers = {k: round(v, 3) for k, v in r.items() if isinstance(v, float)}
            print(f"  {approach} x{workers}: {json.dumps(numbers)}")
            name = "VideoClips(8)" if approach == "clips" else "torch_video + slice"
            lines.append(
                f"| {name} | {workers} | {r['clips']} | {r['clips'] / r['wall']:.1f} | "
                f"{r['cpu'] / r['clips'] * 1000:.0f} ms | {r['pss_early']:.0f} MiB | "
                f"{r['pss_end']:.0f} MiB | {r['rss_early']:.0f} MiB | {r['rss_end']:.0f} MiB |"
            )
    lines += [
        "",
        "Peak memory is the largest sum over the process tree (this process and the workers) seen by "
        f"a separate sampler (`_rss`: RSS every 20 ms, PSS as often as keeps it under {PSS_SHARE:.0%} "
        "of one core) and in one reading at a tenth of the clips (not timed) and one at the end. PSS "
        "counts a page the workers share with the main process after the fork once; RSS counts it in "
        "every process (torch and numpy: most of the RSS floor). CPU per clip through the loader adds "
        "to the decode: reading each sample's shard bytes, moving the 5.5 MB clip to shared memory "
        "for the main process, starting the workers.",
    ]
    TreeMemory.close()
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
