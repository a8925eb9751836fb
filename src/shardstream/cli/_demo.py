"""``shardstream demo``: the README's main job, end to end on this machine.

1. Write a small synthetic dataset (256x256 JPEG + class label) with :class:`ShardWriter`, or
   reuse the one an earlier run wrote: a stamp file beside the shards records the demo's data
   version, the arguments and every shard's size, and the shards are written again only when the
   stamp is missing or differs (another version or ``--samples``, a shard missing or cut short).
   Encoding the JPEGs was most of a repeated run's time.
2. Measure this machine's decode-only capacity (:mod:`._capacity`): the same JPEGs decoded from
   memory by as many processes as the loader has workers, for a few seconds.
3. Stream the dataset from local disk through ``decode("rgb8").to_tuple("jpg", "cls")`` and a
   DataLoader, and print throughput and CPU use (the ``shardstream bench`` measurement) and the
   rate as a share of that capacity: on a host busy with other work both are lower, the share
   says how much of what the machine has left the loader gets.
4. Start a SeaweedFS S3 server on 127.0.0.1 (free ports, data in a temporary directory under
   ``--dir``), upload the shards through shardstream's own ``s3://`` writer, stream them back
   over ``s3://`` the same way and print the same numbers.
5. Stop the server by PID and delete its data, also on Ctrl-C, SIGTERM or an error, and print
   the commands to try next (each runs as printed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from ._bench import BenchConfig, BenchResult, format_result, run_bench
from ._capacity import MEASURE_S, Capacity, decode_capacity

__all__ = ["add_arguments", "next_commands", "prepare_dataset", "run", "synthetic_jpeg", "write_dataset"]

log = logging.getLogger(__name__)

BUCKET = "shardstream-demo"
#: The data :func:`write_dataset` makes: change it whenever that changes (the images, the fields,
#: the names), so that shards an older demo wrote are written again.
DATA_VERSION = 1
STAMP = ".demo-stamp.json"


def synthetic_jpeg(i: int, size: int = 256) -> bytes:
    """A deterministic photo-like JPEG (smooth colour waves plus noise), about 25-30 KB at 256 px."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(i)
    axis = np.arange(size, dtype=np.float32)
    fx, fy = rng.uniform(8, 40, 3), rng.uniform(8, 40, 3)
    phase = rng.uniform(0, 6.28, 3)
    # Separable waves (a sin row times a cos column per channel): cheap enough, with the JPEG
    # encode, that a few thousand samples take seconds, not minutes.
    rows = np.sin(axis[None, :] / fx[:, None] + phase[:, None])
    cols = np.cos(axis[None, :] / fy[:, None] - phase[:, None])
    image = 127 + 100 * np.einsum("cy,cx->yxc", cols, rows)
    image += rng.integers(-20, 21, (size, size, 3), dtype=np.int8)
    buf = io.BytesIO()
    Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_dataset(directory: Path, samples: int, per_shard: int) -> list[Path]:
    """Write ``samples`` JPEG + cls samples into ``directory/demo-NNNNNN.tar``; returns the shards."""
    from ..tar.sharded_writer import ShardWriter

    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("demo-*.tar"):
        old.unlink()
    # The index of other shards would otherwise be merged into the new one.
    (directory / "_info.json").unlink(missing_ok=True)
    shutil.rmtree(directory / "_offsets", ignore_errors=True)
    with ShardWriter(str(directory / "demo-%06d.tar"), maxcount=per_shard, mtime=0) as sink:
        for i in range(samples):
            sink.write({"__key__": f"sample{i:07d}", "jpg": synthetic_jpeg(i), "cls": str(i % 10)})
    return sorted(directory.glob("demo-*.tar"))


def _stamp(samples: int, per_shard: int) -> dict[str, object]:
    return {"version": DATA_VERSION, "samples": samples, "per_shard": per_shard}


def _reusable(directory: Path, samples: int, per_shard: int) -> list[Path] | None:
    """The shards an earlier run wrote with these arguments, if its stamp matches and every shard
    it lists is there with its size (else ``None``)."""
    try:
        found = json.loads((directory / STAMP).read_text())
        sizes = {str(name): int(size) for name, size in found.pop("shards").items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if found != _stamp(samples, per_shard) or not sizes:
        return None
    shards = sorted(directory.glob("demo-*.tar"))
    if [p.name for p in shards] != sorted(sizes) or any(p.stat().st_size != sizes[p.name] for p in shards):
        return None
    return shards


def prepare_dataset(directory: Path, samples: int, per_shard: int) -> tuple[list[Path], bool]:
    """The demo's shards in ``directory``: those an earlier run wrote when they are all there
    (see the module doc), else new ones. Returns ``(shards, written)``."""
    shards = _reusable(directory, samples, per_shard)
    if shards is not None:
        return shards, False
    (directory / STAMP).unlink(missing_ok=True)  # an interrupted write leaves no stamp behind
    shards = write_dataset(directory, samples, per_shard)
    stamp = {**_stamp(samples, per_shard), "shards": {p.name: p.stat().st_size for p in shards}}
    partial = directory / f"{STAMP}.tmp"
    partial.write_text(json.dumps(stamp, indent=1) + "\n")
    os.replace(partial, directory / STAMP)
    return shards, True


def _load_jpegs(shards: list[Path]) -> list[bytes]:
    """Every sample's ``jpg`` field, read with shardstream (no decoding)."""
    from ..datasets import ShardStream

    return [bytes(sample["jpg"]) for sample in ShardStream([str(p) for p in shards], shuffle_shards=False)]


def next_commands(shards: Path, workers: int) -> list[tuple[str, str]]:
    """``(command, what it shows)`` for the commands to try after the demo, on its shards."""
    where = shlex.quote(str(shards))
    decode = f"--workers {workers} --decode rgb8 --to-tuple jpg cls"
    return [
        (f"shardstream ls {where}", "samples, bytes and extensions of each shard, from the index"),
        (f"shardstream verify {where} --decode jpg", "read every shard, decode every JPEG"),
        (
            f"shardstream bench {where} {decode} --profile",
            "ss.Loader with worker processes (JPEGs decoded into the batch), time per stage",
        ),
    ]


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while the demo runs, so ``finally`` blocks stop the server."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signal handling alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _upload(shards: list[Path], storage_options: dict[str, object]) -> list[str]:
    from ..sources import create_url

    urls = []
    for path in shards:
        url = f"s3://{BUCKET}/{path.name}"
        with (
            open(path, "rb") as src,
            contextlib.closing(create_url(url, storage_options=storage_options)) as dst,
        ):
            shutil.copyfileobj(src, dst, 8 << 20)
        urls.append(url)
    return urls


def _report(title: str, config: BenchConfig, capacity: Capacity | None = None) -> BenchResult:
    out = sys.stdout
    out.write(f"\n== {title}\n")
    out.flush()
    result = run_bench(config)
    out.write(format_result(config, result))
    if capacity is not None:
        out.write(_share_line(result.samples_per_s, capacity))
    out.flush()
    return result


def _share_line(samples_per_s: float, capacity: Capacity) -> str:
    cores = f"{capacity.processes} core{'s' if capacity.processes != 1 else ''}"
    return (
        f"=> {samples_per_s:,.0f} samples/s, {capacity.share(samples_per_s):.0%} of this machine's "
        f"decode-only capacity ({capacity.samples_per_s:,.0f} samples/s on {cores})\n"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=Path(".demo"), help="working directory (default ./.demo)")
    parser.add_argument("--samples", type=int, default=2000, help="samples to generate (default 2000)")
    parser.add_argument("--per-shard", type=int, default=200, help="samples per shard (default 200)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size (default 32)")
    parser.add_argument("--local-only", action="store_true", help="skip the S3 part (no SeaweedFS)")
    parser.add_argument(
        "--rewrite", action="store_true", help="write the dataset again even if an earlier run's is there"
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of the ``demo`` subcommand."""
    from ..optional import require_torch

    # Fail before writing the dataset: streaming it goes through a torch DataLoader.
    require_torch(purpose="shardstream demo (it streams through a torch DataLoader)")
    out = sys.stdout
    root: Path = args.dir
    t0 = time.perf_counter()
    if args.rewrite:
        (root / "shards" / STAMP).unlink(missing_ok=True)
    shards, written = prepare_dataset(root / "shards", args.samples, args.per_shard)
    size = sum(p.stat().st_size for p in shards)
    what = f"{args.samples} samples (256x256 JPEG + cls)"
    if written:
        out.write(
            f"wrote {what} into {len(shards)} shards, {size / 1e6:.1f} MB, in {root / 'shards'} "
            f"({time.perf_counter() - t0:.1f} s)\n"
        )
    else:
        out.write(
            f"using the {what} in {len(shards)} shards, {size / 1e6:.1f} MB, that an earlier run wrote "
            f"in {root / 'shards'} (--rewrite writes them again)\n"
        )
    processes = max(1, args.workers)
    out.write(
        f"\n== this machine's decode-only capacity: the same JPEGs decoded from memory (rgb8) by "
        f"{processes} process{'es' if processes != 1 else ''} for {MEASURE_S:.0f} s, "
        "no reading, no batching\n"
    )
    out.flush()
    capacity = decode_capacity(_load_jpegs(shards), processes, seconds=MEASURE_S)
    out.write(f"{capacity.samples_per_s:,.0f} samples/s ({capacity.decoded:,} decoded)\n")
    common = dict(batch_size=args.batch_size, workers=args.workers, decode="rgb8", to_tuple=("jpg", "cls"))
    _report(
        "local disk: decode rgb8 + to_tuple + DataLoader",
        BenchConfig(urls=tuple(map(str, shards)), **common),
        capacity,
    )
    if not args.local_only:
        _s3_part(root, shards, common, capacity)
    out.write("\nnext, try (each runs as printed):\n")
    for command, shows in next_commands(root / "shards", args.workers):
        out.write(f"  {command}\n      {shows}\n")
    return 0


def _s3_part(root: Path, shards: list[Path], common: dict[str, Any], capacity: Capacity) -> None:
    """Steps 4 and 5: the same stream over ``s3://`` from a SeaweedFS server started here."""
    out = sys.stdout

    from ..testing.seaweed import SeaweedS3

    with _sigterm_unwinds():
        data_dir = Path(tempfile.mkdtemp(prefix="seaweed-", dir=root))
        try:
            t1 = time.perf_counter()
            out.write(f"\nstarting SeaweedFS (S3 on 127.0.0.1, data in {data_dir}) ...\n")
            out.flush()
            with SeaweedS3(data_dir) as server:
                out.write(
                    f"SeaweedFS pid {server.pid} ready at {server.endpoint_url} "
                    f"in {time.perf_counter() - t1:.1f} s\n"
                )
                server.create_bucket(BUCKET)
                options = server.storage_options
                t2 = time.perf_counter()
                urls = _upload(shards, options)
                out.write(
                    f"uploaded {len(urls)} shards to s3://{BUCKET}/ in {time.perf_counter() - t2:.1f} s\n"
                )
                _report(
                    f"s3://{BUCKET}/ via {server.endpoint_url}: decode rgb8 + to_tuple + DataLoader",
                    BenchConfig(urls=tuple(urls), storage_options=options, **common),
                    capacity,
                )
                pid = server.pid
            out.write(f"\nstopped SeaweedFS (pid {pid})\n")
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
