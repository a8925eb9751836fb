"""Single-sample objects in S3, side by side in one run (issue 12's experiment).

A local SeaweedFS holds 2,000 samples = 4,000 objects (``{i}.bin`` of 1-40 KB and ``{i}.cls``);
an empty training loop with batch size 4 reads them through:

(a) boto3 at the same concurrency as (c): in each process, one client shared by 32 threads
    (``max_pool_connections=32``), each fetching one sample's two objects with ``get_object``, so
    32 GETs are in flight per process, as in ObjectStream's window; samples yielded as they complete;
    DataLoader with 2 workers and in this process (0 workers);
(b) the s5cmd background-copy sampler as published: the sampler copies the next 1,000 samples'
    objects to local disk with ``s5cmd run`` (one ``cp`` per object), double-buffered, and the
    Dataset reads the files (2 workers);
(c) ``shardstream.ObjectDataset`` and ``shardstream.ObjectStream``, DataLoader with 2 workers, and
    ObjectStream alone in this process (the engine without the DataLoader's processes);
(d) the same data packed into tar shards (``shardstream pack``), read by webdataset 1.0.2 over
    ``pipe:s5cmd cat``;
(e) the ceiling: ``curl --parallel --parallel-max 64`` over presigned URLs of every object;
(f) the floor the DataLoader itself sets: ready-made batches of the same bytes, no I/O, from 2
    workers (its per-batch hand-off and the workers' start-up cost CPU that the server, on the
    same 2 cores, then lacks).

It prints samples/s (objects/s for the ceiling) and CPU-seconds per 1,000 samples (this process,
DataLoader workers and subprocesses; the server's CPU is not counted), then the ratios of the
targets. Two micro-measurements follow: client CPU per signed GET (ours vs boto3 ``get_object``),
and ObjectStream throughput by window size (requests in flight) for both fetch engines (one
thread on epoll, the default for S3, and a thread per request), which chose the defaults.

    python benchmarks/bench_objects.py --markdown benchmarks/results/bench_objects.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from itertools import islice
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_seconds, emit_report, machine_line, paired_ratio, run_alternating  # noqa: E402

BUCKET = "bench-objects"
PREFIX = "train/"
SAMPLES = 2_000
BATCH = 4
#: Requests in flight per process: ObjectStream's default window (shardstream.objects.DEFAULT_WINDOW),
#: and boto3's threads per process, so that (a) and (c) differ in the client, not in concurrency.
WINDOW = 32
BOTO3_TWO = f"(a) boto3, {WINDOW} threads, 2 workers"
BOTO3_ONE = f"(a) boto3, {WINDOW} threads, one process"


def _payload(i: int) -> bytes:
    size = 1_000 + (i * 7_919) % 39_000  # 1-40 KB, spread evenly
    return (i.to_bytes(4, "little") * (size // 4 + 1))[:size]


def populate(server: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    server.create_bucket(BUCKET)
    client = server.client()

    def put(i: int) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}{i:06d}.bin", Body=_payload(i))
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}{i:06d}.cls", Body=str(i % 10).encode())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(SAMPLES)))


# ------------------------------------------------------------------------------------------ (a)
def boto3_stream(server: Any, window: int) -> Any:
    """boto3 at its documented best for many parallel GETs, at ObjectStream's concurrency: in each
    process (this one, or each DataLoader worker: a client is not shared across a fork), one
    client shared by ``window`` threads (boto3's low-level clients are thread-safe) with botocore's
    connection pool raised to ``window`` (``max_pool_connections``, 10 by default: more threads
    would wait for a connection). Each thread fetches one sample's two objects in turn, so
    ``window`` GETs are in flight; a finished sample's successor is submitted before the sample is
    yielded, in completion order (ObjectStream's default too). The samples are split between
    DataLoader workers like ObjectStream's."""
    import torch

    endpoint, opts = server.endpoint_url, server.storage_options

    class Boto3Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            self.pid = 0
            self.client: Any = None
            self.pool: ThreadPoolExecutor | None = None

        def _session(self) -> tuple[Any, ThreadPoolExecutor]:
            if self.pid != os.getpid() or self.pool is None:
                import boto3
                from botocore.config import Config

                self.pid = os.getpid()
                self.client = boto3.client(
                    "s3",
                    endpoint_url=endpoint,
                    aws_access_key_id=opts["access_key_id"],
                    aws_secret_access_key=opts["secret_access_key"],
                    region_name="us-east-1",
                    # A loaded local server occasionally stalls one response; as a user would,
                    # time out and retry (botocore does not retry a failed body read by itself).
                    config=Config(
                        max_pool_connections=window,
                        read_timeout=10,
                        retries={"max_attempts": 5, "mode": "standard"},
                    ),
                )
                self.pool = ThreadPoolExecutor(window, thread_name_prefix="bench-boto3")
            return self.client, self.pool

        def _get(self, key: str) -> bytes:
            from botocore.exceptions import ReadTimeoutError, ResponseStreamingError

            for attempt in range(3):
                try:
                    body: bytes = self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                    return body
                except (ReadTimeoutError, ResponseStreamingError):
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        def _sample(self, i: int) -> tuple[bytes, bytes]:
            return self._get(f"{PREFIX}{i:06d}.bin"), self._get(f"{PREFIX}{i:06d}.cls")

        def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
            info = torch.utils.data.get_worker_info()
            k, n = (info.id, info.num_workers) if info is not None else (0, 1)
            _, pool = self._session()
            todo = iter(range(k, SAMPLES, n))
            pending = {pool.submit(self._sample, i) for i in islice(todo, window)}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for _ in done:
                    i = next(todo, None)
                    if i is not None:
                        pending.add(pool.submit(self._sample, i))
                for future in done:
                    yield future.result()

    return Boto3Stream()


# ------------------------------------------------------------------------------------------ (b)
class S5cmdSampler:
    """The published recipe: copy the next chunk of samples with ``s5cmd run`` in the background
    (double-buffered), then hand out their indices; the dataset reads the local copies."""

    def __init__(
        self, s5cmd: str, endpoint: str, env: dict[str, str], root: Path, chunk: int = 1_000
    ) -> None:
        self.s5cmd, self.endpoint, self.env, self.root, self.chunk = s5cmd, endpoint, env, root, chunk

    def __len__(self) -> int:
        return SAMPLES

    def _start(self, k: int) -> subprocess.Popen[bytes]:
        lines = "".join(
            f"cp s3://{BUCKET}/{PREFIX}{i:06d}.{e} {self.root}/{i:06d}.{e}\n"
            for i in range(k * self.chunk, min(SAMPLES, (k + 1) * self.chunk))
            for e in ("bin", "cls")
        )
        cmds = self.root / f"cmds-{k}.txt"
        cmds.write_text(lines)
        return subprocess.Popen(
            [self.s5cmd, "--endpoint-url", self.endpoint, "run", str(cmds)],
            env=self.env,
            stdout=subprocess.DEVNULL,
        )

    def __iter__(self) -> Iterator[int]:
        chunks = -(-SAMPLES // self.chunk)
        running = self._start(0)
        for k in range(chunks):
            running.wait()
            if running.returncode:
                raise RuntimeError(f"s5cmd run failed with status {running.returncode}")
            if k + 1 < chunks:
                running = self._start(k + 1)
            yield from range(k * self.chunk, min(SAMPLES, (k + 1) * self.chunk))


class LocalFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[bytes, bytes]:
        return (self.root / f"{i:06d}.bin").read_bytes(), (self.root / f"{i:06d}.cls").read_bytes()


def ready_batches() -> Any:
    """(f) The DataLoader's own cost: an IterableDataset whose workers yield ready batches of the
    same bytes (no I/O at all), split between the workers like ObjectStream's samples."""
    import torch

    class ReadyBatches(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            self.payloads = [_payload(i) for i in range(SAMPLES)]

        def __iter__(self) -> Iterator[tuple[list[bytes], list[bytes]]]:
            info = torch.utils.data.get_worker_info()
            k, n = (info.id, info.num_workers) if info is not None else (0, 1)
            for start in range(k * BATCH, SAMPLES, n * BATCH):
                batch = range(start, min(start + BATCH, SAMPLES))
                yield [self.payloads[i] for i in batch], [str(i % 10).encode() for i in batch]

    return ReadyBatches()


def _raw_collate(batch: list[Any]) -> list[Any]:
    return batch


def _loop(loader: Any) -> int:
    n = 0
    for batch in loader:
        n += len(batch)
    return n


def cases(
    server: Any, s5cmd: str, curl: str | None, shards: list[str]
) -> list[tuple[str, Callable[[], int]]]:
    import torch
    import webdataset

    import shardstream as ss

    DataLoader = torch.utils.data.DataLoader  # noqa: N806
    url = f"s3://{BUCKET}/{PREFIX}"
    opts = server.storage_options
    objects = ss.ObjectDataset(url, storage_options=opts)

    def batched_stream() -> Any:
        return (
            ss.ObjectStream(url, storage_options=opts, shuffle=True, seed=0)
            .to_tuple("bin", "cls")
            .batched(BATCH)
        )

    stream = batched_stream()
    if stream.reader.window != WINDOW:
        raise RuntimeError(f"ObjectStream's window is {stream.reader.window}, not {WINDOW}: update WINDOW")
    boto = boto3_stream(server, WINDOW)
    eager = batched_stream()  # the same stream without the fetch loop's gathering of answers
    eager.reader.gather = 0.0  # (ObjectReader's gather=0)
    ready = ready_batches()
    env = {**os.environ, **server.env()}
    scratch = Path(tempfile.mkdtemp(prefix="bench-s5cmd-"))

    def s5cmd_recipe() -> int:
        for f in scratch.iterdir():
            f.unlink()
        sampler = S5cmdSampler(s5cmd, server.endpoint_url, env, scratch)
        return _loop(
            DataLoader(
                LocalFiles(scratch), batch_size=BATCH, sampler=sampler, num_workers=2, collate_fn=_raw_collate
            )
        )

    pipes = [f"pipe:{s5cmd} --endpoint-url {server.endpoint_url} cat {u}" for u in shards]
    out: list[tuple[str, Callable[[], int]]] = [
        (
            BOTO3_ONE,
            lambda: _loop(DataLoader(boto, batch_size=BATCH, collate_fn=_raw_collate)),
        ),
        (
            BOTO3_TWO,
            lambda: _loop(DataLoader(boto, batch_size=BATCH, num_workers=2, collate_fn=_raw_collate)),
        ),
        ("(b) s5cmd copy sampler, 2 w", s5cmd_recipe),
        (
            "(c) ObjectDataset, 2 workers",
            lambda: _loop(
                DataLoader(objects, batch_size=BATCH, shuffle=True, num_workers=2, collate_fn=_raw_collate)
            ),
        ),
        (
            "(c) ObjectStream, 2 workers",
            lambda: _stream_count(DataLoader(stream, batch_size=None, num_workers=2)),
        ),
        (
            "(c) ObjectStream, 2 w, no gathering",
            lambda: _stream_count(DataLoader(eager, batch_size=None, num_workers=2)),
        ),
        (
            # The same stream without a DataLoader: the engine alone, with no worker processes
            # and no batch pickling competing with the server for the 2 cores.
            "(c) ObjectStream, one process",
            lambda: _stream_count(stream),
        ),
        (
            "(f) DataLoader floor, 2 w",
            lambda: _stream_count(DataLoader(ready, batch_size=None, num_workers=2)),
        ),
        (
            "(d) tar via webdataset+s5cmd",
            lambda: _loop(
                DataLoader(
                    webdataset.WebDataset(pipes, shardshuffle=False),
                    batch_size=BATCH,
                    num_workers=2,
                    collate_fn=_raw_collate,
                )
            ),
        ),
    ]
    if curl is not None:
        client = server.client()
        args = [curl, "-sS", "--no-progress-meter", "--fail", "--parallel", "--parallel-max", "64"]
        for i in range(SAMPLES):
            for e in ("bin", "cls"):
                args += [
                    client.generate_presigned_url(
                        "get_object", Params={"Bucket": BUCKET, "Key": f"{PREFIX}{i:06d}.{e}"}, ExpiresIn=7200
                    ),
                    "-o",
                    "/dev/null",
                ]
        out.append(("(e) curl, 64 parallel", lambda: (subprocess.run(args, check=True), SAMPLES)[1]))
    return out


def _stream_count(loader: Any) -> int:
    return sum(len(b[0]) for b in loader)


# ------------------------------------------------------------------------------ micro-benchmarks
def per_get_cpu(server: Any, n: int = 1_000) -> list[str]:
    """Client CPU per small signed GET, one at a time: ours (cached-key signer + the lean client,
    and + pooled http.client) vs botocore presign per request (the S3 source before) vs boto3
    get_object."""
    import boto3

    from shardstream.sources.s3 import S3Source

    src = S3Source(**server.storage_options)
    keys = [f"s3://{BUCKET}/{PREFIX}{i:06d}.cls" for i in range(n)]
    client = boto3.client(
        "s3",
        **{
            "endpoint_url": server.endpoint_url,
            "region_name": "us-east-1",
            "aws_access_key_id": server.storage_options["access_key_id"],
            "aws_secret_access_key": server.storage_options["secret_access_key"],
        },
    )

    def ours() -> None:
        for k in keys:
            src.get_into(k, bytearray())

    def ours_http_client() -> None:
        for k in keys:
            body = src.open_once(k).body
            body.readinto(memoryview(bytearray(16)))
            body.readinto(memoryview(bytearray(16)))

    def presign() -> None:
        for k in keys:
            body = src.pool.request(
                "GET", src._presign("get_object", k), headers={"Accept-Encoding": "identity"}
            )
            body.readinto(memoryview(bytearray(16)))
            body.readinto(memoryview(bytearray(16)))

    def boto() -> None:
        for k in keys:
            client.get_object(Bucket=BUCKET, Key=k.split("/", 3)[3])["Body"].read()

    lines = [
        "",
        "### Client CPU per signed GET (one at a time, 1 KB objects)",
        "",
        "| client | ms CPU / GET | GET/s |",
        "|---|---:|---:|",
    ]
    for name, fn in [
        ("shardstream get_into (cached-key SigV4 + lean HTTP/1.1), one blocking GET", ours),
        ("shardstream open_once (cached-key SigV4 + http.client), the shard path", ours_http_client),
        ("botocore presign per request + http.client (before)", presign),
        ("boto3 get_object", boto),
    ]:
        fn()  # warm up: connections, credential lookup
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        c1, t1 = time.process_time(), time.perf_counter()
        lines.append(f"| {name} | {1000 * (c1 - c0) / n:.3f} | {n / (t1 - t0):,.0f} |")
    src.close()
    return lines


def window_sweep(server: Any, rounds: int = 2) -> list[str]:
    """ObjectStream in this process (no workers) by requests in flight, for both fetch engines:
    one thread on epoll (S3's ``get_many``, the default for S3) and a thread per request in
    flight (the default ``SourceBase.get_many``, which S3 uses where epoll is missing). Engines
    alternate per window; the best of ``rounds`` passes is shown."""
    import shardstream as ss
    from shardstream.sources import SourceBase
    from shardstream.sources.s3 import S3Source

    epoll_get_many = S3Source.get_many

    url = f"s3://{BUCKET}/{PREFIX}"
    lines = [
        "",
        "### ObjectStream by window (requests in flight) and fetch engine, one process",
        "",
        "| window | epoll loop samples/s | CPU-s / 1k | threads samples/s | CPU-s / 1k | CPU threads/loop |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for window in (1, 8, 16, 32, 64):
        best: dict[bool, tuple[float, float]] = {}
        for _ in range(rounds):
            for loop in (True, False):
                ds = ss.ObjectStream(url, storage_options=server.storage_options, window=window)
                S3Source.get_many = epoll_get_many if loop else SourceBase.get_many  # type: ignore[method-assign]
                try:
                    c0, t0 = cpu_seconds(), time.perf_counter()
                    n = sum(1 for _ in ds)
                    c1, t1 = cpu_seconds(), time.perf_counter()
                finally:
                    S3Source.get_many = epoll_get_many  # type: ignore[method-assign]
                    ds.reader.close()
                got = (n / (t1 - t0), 1000 * (c1 - c0) / n)
                if loop not in best or got[1] < best[loop][1]:
                    best[loop] = got
        (lr, lc), (tr, tc) = best[True], best[False]
        lines.append(f"| {window} | {lr:,.0f} | {lc:.3f} | {tr:,.0f} | {tc:.3f} | {tc / lc:.2f}x |")
    alive = [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("shardstream-fetch", "shardstream-get-many"))
    ]
    assert not alive, alive
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    parser.add_argument("--markdown", type=Path, help="also write the results as Markdown here")
    args = parser.parse_args(argv)

    from shardstream.cli._pack import pack
    from shardstream.testing.seaweed import SeaweedS3

    s5cmd = shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")
    curl = shutil.which("curl")
    with tempfile.TemporaryDirectory() as tmp, SeaweedS3(Path(tmp) / "weed") as server:
        os.environ.update(server.env())  # for the s5cmd pipes of (d)
        populate(server)
        pack(
            f"s3://{BUCKET}/{PREFIX}",
            f"s3://{BUCKET}/packed",
            shard_size=16 << 20,
            storage_options=server.storage_options,
        )
        shards = sorted(
            f"s3://{BUCKET}/{o['Key']}"
            for o in server.client().list_objects_v2(Bucket=BUCKET, Prefix="packed/")["Contents"]
            if o["Key"].endswith(".tar")
        )
        sides = run_alternating(
            cases(server, s5cmd, curl, shards), rounds=args.rounds, expect=SAMPLES, min_time=0.0
        )
        by = {s.name: s for s in sides}
        lines = [
            "# bench_objects: single-sample objects in S3",
            "",
            f"- {machine_line()}; SeaweedFS on loopback (same 2 cores)",
            f"- {SAMPLES} samples = {2 * SAMPLES} objects (1-40 KB + label), batch {BATCH}, empty loop; "
            f"best of {args.rounds} alternating rounds; (d) = {len(shards)} tar shards",
            "",
            "| contender | samples/s | objects/s | CPU-s / 1k samples |",
            "|---|---:|---:|---:|",
        ]
        for s in sides:
            m = s.best
            lines.append(f"| {s.name} | {m.rate:,.0f} | {2 * m.rate:,.0f} | {m.cpu_per_1k:.2f} |")
        lines.append("")
        ours = by["(c) ObjectStream, 2 workers"]
        for other in ("(e) curl, 64 parallel", "(b) s5cmd copy sampler, 2 w", BOTO3_TWO):
            if other in by:
                best, paired = paired_ratio(ours, by[other], lambda m: m.rate)
                lines.append(f"- ObjectStream / {other}: **{best:.2f}x** (median per round {paired:.2f}x)")
        best, paired = paired_ratio(by["(c) ObjectStream, one process"], by[BOTO3_ONE], lambda m: m.rate)
        lines.append(
            f"- ObjectStream in one process / {BOTO3_ONE}: **{best:.2f}x** (median per round {paired:.2f}x); "
            f"boto3 here and ObjectStream keep the same {WINDOW} GETs in flight per process, so the "
            "ratios to (a) compare the clients, not their concurrency (ObjectStream in one process runs "
            "without a DataLoader; boto3's row with 0 workers, in this process)"
        )
        floor = by["(f) DataLoader floor, 2 w"].best
        lines.append(
            f"- (f) the DataLoader alone (2 workers, ready batches of {BATCH}, no I/O) costs "
            f"{floor.cpu_per_1k:.2f} CPU-s per 1k samples: ObjectStream's "
            f"{ours.best.cpu_per_1k:.2f} includes it; curl's "
            f"{by['(e) curl, 64 parallel'].best.cpu_per_1k:.2f} does not"
            if "(e) curl, 64 parallel" in by
            else f"- (f) the DataLoader alone costs {floor.cpu_per_1k:.2f} CPU-s per 1k samples"
        )
        if "(e) curl, 64 parallel" in by:
            best, paired = paired_ratio(
                by["(c) ObjectStream, one process"], by["(e) curl, 64 parallel"], lambda m: m.rate
            )
            lines.append(
                f"- ObjectStream in one process (no DataLoader) / (e) curl: **{best:.2f}x** (median per "
                f"round {paired:.2f}x): the fetch engine alone; with 2 workers, their processes and the "
                "batches' pickling share the 2 cores with the server"
            )
        eager = by["(c) ObjectStream, 2 w, no gathering"]
        best, paired = paired_ratio(ours, eager, lambda m: m.rate)
        lines.append(
            f"- ObjectStream, 2 workers, with / without the fetch loop's gathering of answers: "
            f"**{best:.2f}x** (median per round {paired:.2f}x), CPU-s per 1k samples "
            f"{ours.best.cpu_per_1k:.2f} / {eager.best.cpu_per_1k:.2f}"
        )
        mapped = by["(c) ObjectDataset, 2 workers"]
        for other in ("(e) curl, 64 parallel", "(b) s5cmd copy sampler, 2 w"):
            if other in by:
                best, paired = paired_ratio(mapped, by[other], lambda m: m.rate)
                lines.append(f"- ObjectDataset / {other}: **{best:.2f}x** (median per round {paired:.2f}x)")
        lines += per_get_cpu(server)
        lines += window_sweep(server)
    emit_report(lines, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
