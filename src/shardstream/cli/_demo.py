"""``shardstream demo``: the README's main job, end to end on this machine.

1. Write a small synthetic dataset (256x256 JPEG + class label) with :class:`ShardWriter`.
2. Stream it from local disk through ``decode("rgb8").to_tuple("jpg", "cls")`` and a DataLoader,
   and print throughput and CPU use (the ``shardstream bench`` measurement).
3. Start a SeaweedFS S3 server on 127.0.0.1 (free ports, data in a temporary directory under
   ``--dir``), upload the shards through shardstream's own ``s3://`` writer, stream them back
   over ``s3://`` the same way and print the same numbers.
4. Stop the server by PID and delete its data, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from ._bench import BenchConfig, format_result, run_bench

__all__ = ["add_arguments", "run", "synthetic_jpeg", "write_dataset"]

log = logging.getLogger(__name__)

BUCKET = "shardstream-demo"


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
    with ShardWriter(str(directory / "demo-%06d.tar"), maxcount=per_shard, mtime=0) as sink:
        for i in range(samples):
            sink.write({"__key__": f"sample{i:07d}", "jpg": synthetic_jpeg(i), "cls": str(i % 10)})
    return sorted(directory.glob("demo-*.tar"))


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


def _report(title: str, config: BenchConfig) -> None:
    out = sys.stdout
    out.write(f"\n== {title}\n")
    out.flush()
    result = run_bench(config)
    out.write(format_result(config, result))
    out.flush()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=Path(".demo"), help="working directory (default ./.demo)")
    parser.add_argument("--samples", type=int, default=2000, help="samples to generate (default 2000)")
    parser.add_argument("--per-shard", type=int, default=200, help="samples per shard (default 200)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size (default 32)")
    parser.add_argument("--local-only", action="store_true", help="skip the S3 part (no SeaweedFS)")


def run(args: argparse.Namespace) -> int:
    """Entry point of the ``demo`` subcommand."""
    from ..optional import require_torch

    # Fail before writing the dataset: streaming it goes through a torch DataLoader.
    require_torch(purpose="shardstream demo (it streams through a torch DataLoader)")
    out = sys.stdout
    root: Path = args.dir
    t0 = time.perf_counter()
    shards = write_dataset(root / "shards", args.samples, args.per_shard)
    size = sum(p.stat().st_size for p in shards)
    out.write(
        f"wrote {args.samples} samples (256x256 JPEG + cls) into {len(shards)} shards, {size / 1e6:.1f} MB, "
        f"in {root / 'shards'} ({time.perf_counter() - t0:.1f} s)\n"
    )
    common = dict(batch_size=args.batch_size, workers=args.workers, decode="rgb8", to_tuple=("jpg", "cls"))
    _report(
        "local disk: decode rgb8 + to_tuple + DataLoader", BenchConfig(urls=tuple(map(str, shards)), **common)
    )
    if args.local_only:
        return 0

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
                )
                pid = server.pid
            out.write(f"\nstopped SeaweedFS (pid {pid})\n")
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0
