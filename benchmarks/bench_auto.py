"""bench_auto: what ss.Loader's automatic mode measures on bench_loader's pipelines, and what it picks.

``ss.Loader(dataset, batch_size=...)`` without counts measures its first batches in thread mode
(``loader/_auto.py``): the GIL's share of the time, the loader threads' time on a core and
waiting for one, and their ratio, the share of the loader's work done holding the GIL; that
share times the threads decides threads or processes (``loader/_choice.py``). This script
reports those numbers per pipeline and round, with the machine's load average beside them (the
shares of the time move with the load; the share of the work should not), so that the bound
(``GIL_BOUND``) can be checked against the pipelines of ``bench_loader.py``, whose rows say which
configuration is fastest:

* **pipelines**: bench_loader's images (2,000 256x256 JPEGs: a simplejpeg ``map_dict``, the
  ``decode("rgb8")`` stage, a Pillow ``map_dict``), tiny samples and video clips, and three
  pipelines over the tiny shards that mark the ends of the scale: a pure-Python map (about
  200 us of Python per sample), a map that sleeps 0.5 ms (the GIL free, the CPU idle) and a
  numpy matrix product per sample (the GIL free, the CPU busy). Each round builds a new loader
  and iterates whole epochs until it has chosen.
* **decoders alone**: one thread decoding the in-memory JPEGs in a loop beside the sampler for
  a second: the GIL's share of the time over the thread's share of a core is the share of the
  decode's own work done holding the GIL.

    .venv/bin/python benchmarks/bench_auto.py [--rounds 3] [--tiny-count N] [--videos N
        --video-unique N] [--markdown F]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_loader as bl  # noqa: E402
from _common import build_image_dataset, emit_report, machine_line  # noqa: E402

SPIN_S = 200e-6
NAP_S = 0.0005
_MATRIX = np.random.default_rng(0).random((200, 200))


def spin(sample: Any) -> Any:
    end = time.perf_counter() + SPIN_S
    while time.perf_counter() < end:
        pass
    return sample


def nap(sample: Any) -> Any:
    time.sleep(NAP_S)
    return sample


def matmul(sample: Any) -> Any:
    _MATRIX @ _MATRIX
    return sample


def pipelines(args: argparse.Namespace) -> dict[str, tuple[Callable[[], Any], int]]:
    """name -> (a new dataset, batch size)."""
    import shardstream as ss

    images = build_image_dataset(args.data)
    tiny = bl.build_tiny(args.data, args.tiny_count, args.tiny_shards)
    video = bl.build_video(args.data, args.videos, args.video_unique)

    def mapped(decoder: str) -> Callable[[], Any]:
        decode = bl._decoder(decoder)
        return lambda: (
            ss.ShardStream(images, shuffle_shards=False).map_dict(jpg=decode).to_tuple("jpg", "cls")
        )

    def over_tiny(fn: Callable[[Any], Any]) -> Callable[[], Any]:
        return lambda: ss.ShardStream(tiny, shuffle_shards=False).map(fn).to_tuple("json", "bin")

    return {
        "images, simplejpeg map": (mapped("simplejpeg"), bl.BATCH),
        "images, decode stage": (
            lambda: (
                ss.ShardStream(images, shuffle_shards=False)
                .decode("rgb8", jpeg_backend="simplejpeg")
                .to_tuple("jpg", "cls")
            ),
            bl.BATCH,
        ),
        "images, Pillow map": (mapped("pillow"), bl.BATCH),
        "tiny": (
            lambda: (
                ss.ShardStream(tiny, shuffle_shards=False)
                .map_dict(json=bl.tiny_label, bin=bl.tiny_payload)
                .to_tuple("json", "bin")
            ),
            bl.BATCH,
        ),
        "video": (
            lambda: (
                ss.ShardStream(video, shuffle_shards=False)
                .decode(ss.VideoClips(bl.CLIP, threads=1), only=["mp4"])
                .to_tuple("mp4", "__key__")
                .map(bl.clip_frames)
            ),
            bl.VIDEO_BATCH,
        ),
        "tiny shards, pure-Python map": (over_tiny(spin), bl.BATCH),
        "tiny shards, sleeping map": (over_tiny(nap), bl.BATCH),
        "tiny shards, numpy map": (over_tiny(matmul), bl.BATCH),
    }


def measure(make: Callable[[], Any], batch: int) -> dict[str, Any]:
    """One automatic loader's measurement and choice (whole epochs until it has chosen)."""
    import shardstream as ss

    with ss.Loader(make(), batch_size=batch) as loader:
        for _ in range(8):
            for _ in loader:
                pass
            auto = loader.stats()["auto"]
            if auto["state"] == "chosen":
                break
    auto["load"] = os.getloadavg()[0]
    return dict(auto)


def decoder_alone(decoder: str, jpegs: list[bytes], seconds: float = 1.0) -> float:
    """The share of one thread's decoding done holding the GIL (the sampler beside it)."""
    from shardstream.telemetry.gil import GilSampler

    decode = bl._decoder(decoder)
    stop = threading.Event()
    spent = [0.0]

    def work() -> None:
        start = time.thread_time()
        while not stop.is_set():
            for data in jpegs:
                decode(data)
        spent[0] = time.thread_time() - start

    thread = threading.Thread(target=work)
    thread.start()
    sampler = GilSampler()
    t0 = time.perf_counter()
    time.sleep(seconds)
    sampler.stop()
    stop.set()
    thread.join()
    wall = time.perf_counter() - t0
    return (sampler.share or 0.0) / (spent[0] / wall)


def _span(values: list[float], digits: int = 2) -> str:
    lo, hi = min(values), max(values)
    return (
        f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) else f"{lo:.{digits}f}-{hi:.{digits}f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("bench-data"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny-count", type=int, default=bl.TINY[0])
    parser.add_argument("--tiny-shards", type=int, default=bl.TINY[1])
    parser.add_argument("--videos", type=int, default=bl.VIDEOS)
    parser.add_argument("--video-unique", type=int, default=bl.VIDEO_UNIQUE)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    from _ceiling import load_jpegs

    from shardstream.loader._choice import GIL_BOUND
    from shardstream.loader._cores import detect_cores

    cases = pipelines(args)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    for r in range(args.rounds):
        for name, (make, batch) in cases.items() if r % 2 == 0 else reversed(cases.items()):
            auto = measure(make, batch)
            found[name].append(auto)
            m = auto["measured"] or {}
            print(
                f"round {r + 1} {name:<30} {auto['num_workers']}x{auto['num_threads']} "
                f"share of work {m.get('gil_share_of_work')} of time {m.get('gil_share')} "
                f"load {auto['load']:.1f}",
                flush=True,
            )
    jpegs = load_jpegs(build_image_dataset(args.data)[:1])[:100]
    alone = {d: [decoder_alone(d, jpegs) for _ in range(args.rounds)] for d in ("simplejpeg", "pillow")}

    cores = detect_cores()
    command = f".venv/bin/python benchmarks/bench_auto.py --rounds {args.rounds}"
    for flag, value, default in (
        ("--tiny-count", args.tiny_count, bl.TINY[0]),
        ("--tiny-shards", args.tiny_shards, bl.TINY[1]),
        ("--videos", args.videos, bl.VIDEOS),
        ("--video-unique", args.video_unique, bl.VIDEO_UNIQUE),
    ):
        if value != default:
            command += f" {flag} {value}"
    loads = [a["load"] for runs in found.values() for a in runs]
    lines = [
        "# bench_auto: what ss.Loader's automatic mode measures, and what it picks",
        "",
        f"- date: {time.strftime('%Y-%m-%d')}",
        f"- machine: {machine_line()}",
        f"- command: `{command}`",
        f"- cores the loader may use: {cores.usable} ({cores.limit}); the bound: threads x share of "
        f"the work >= {GIL_BOUND} picks processes",
        f"- load average (1 min) during the rounds: {_span(loads, 1)} runnable threads on "
        f"{cores.machine} cores",
        f"- {args.rounds} rounds, the order reversed every other round; per pipeline the range over rounds",
        "",
        "| pipeline | picked | share of the loader's work holding the GIL | x threads | share of the "
        "time the GIL was held | loader threads on a core, cores | waiting for a core, cores |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, runs in found.items():
        picked = sorted(
            {
                f"{a['num_workers']} processes x {a['num_threads']}"
                if a["num_workers"]
                else f"{a['num_threads']} threads"
                for a in runs
            }
        )
        measured = [a["measured"] for a in runs if a["measured"] is not None]
        if not measured:
            lines.append(f"| {name} | {', '.join(picked)} | (not measured: {runs[0]['why']}) | | | | |")
            continue
        threads = measured[0]["threads"]
        work = [m["gil_share_of_work"] for m in measured]
        lines.append(
            f"| {name} | {', '.join(picked)} | {_span(work)} | {_span([threads * w for w in work])} | "
            f"{_span([m['gil_share'] for m in measured])} | {_span([m['loader_cores'] for m in measured])} | "
            f"{_span([m['loader_queued'] for m in measured])} |"
        )
    lines += [
        "",
        "## Decoders alone",
        "",
        "One thread decoding 100 of the JPEGs in memory in a loop for 1 s, the GIL sampler beside "
        "it: the GIL's share of the time over the thread's share of a core.",
        "",
        "| decoder | share of its work holding the GIL |",
        "|---|---:|",
        *(f"| {d} | {_span(v)} |" for d, v in alone.items()),
    ]
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
