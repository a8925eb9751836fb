"""Random access into tar shards on S3 (issue 26): ShardDataset by byte range against its peers.

A local SeaweedFS holds one dataset twice: 20 tar shards x 200 samples (one ``bin`` field of
20-100 KB each, ``_info.json`` with each sample's offset and size, as ShardWriter writes it) and
the same 4,000 samples as single objects (``{key}.bin``). Random sample numbers are read in
batches of 32 (``__getitems__``, in this process) by:

(a) the wids way: every shard touched is first downloaded whole (one GET of the object into a
    temp directory, as ``wids`` does), then the sample is read from the local file (its members
    found with ``tarfile``, the shard's listing kept for later samples of it); the download cache
    starts empty in each pass, as for a job that samples a dataset it has not downloaded;
(b) ``ss.ObjectDataset`` over the single objects (one whole-object GET per sample);
(c) ``ss.ShardDataset`` over the shards (one ranged GET per sample; its LRU is cleared between
    passes so that no pass is served from memory);
(d) curl objects: the system ``curl``, one ``curl --parallel --parallel-max 32 -K FILE`` per batch
    of 32, each sample a GET of its single object (a presigned URL, as in ``bench_stores.py``);
(e) curl ranges: the same, each sample a ranged GET of its shard (``range = "start-end"`` in the
    config file): the very bytes ShardDataset asks for, ``ShardDataset.locate``'s offset and size.

(d) and (e) are what the server allows with a client that is not ours: their ratio is the
server's floor for ranges against objects (SeaweedFS reads the whole stored chunk that holds a
range to serve it), and (c) / (e) and (b) / (d) say how close our readers come to curl. curl's
cost includes its start-up, paid once per batch: a new process (measured on its own, shown under
each workload with the floor less it) and new connections (32 transfers in parallel over
HTTP/1.1 open about 32; our readers keep theirs). That cost is the same on both curl sides, so it
pulls their ratio towards 1: the server's own ratio is at most the floor shown. What does not
depend on the client is the time ranges add to a batch: (e) - (d) for curl against (c) - (b)
for ours; ObjectDataset's batch plus curl's extra gives the ratio ShardDataset could reach on this
server with ObjectDataset's client costs (shown under each workload). curl also writes
the bytes to ``/dev/null`` where our readers keep them (and ShardDataset parses the tar headers);
the presigned URLs and the ranges are computed before the timed passes. Each curl run's status
codes and byte counts are checked, and once, untimed, curl's bytes for 40 samples are compared
with ShardDataset's (the raw ranges, tar headers included) and ObjectDataset's.

Two workloads: *sparse*, 100 random samples per pass (a cold start that touches most shards once
or twice: what random access costs when the data is not local), and *epoch*, a random
permutation of all 4,000 (where wids' downloads are amortised over every sample of a shard).
All five run in the same alternating rounds. Bytes read at the server per sample are counted by
a pass-through proxy in front of SeaweedFS (the test suite's ``FaultProxy``; curl's URLs are
presigned for the proxy's address), in a separate untimed pass, and compared with the samples'
own bytes (the ``bin`` payload; the tar headers of a sample are 1 KB of its range).

    python benchmarks/bench_random_access.py --markdown benchmarks/results/bench_random_access.md
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from _common import emit_report, machine_line, paired_ratio, run_alternating  # noqa: E402

BUCKET = "bench-random"
SHARDS, PER_SHARD, BATCH = 20, 200, 32
SAMPLES = SHARDS * PER_SHARD


def _payload(i: int) -> bytes:
    size = 20_000 + (i * 7_919) % 80_000  # 20-100 KB, spread evenly
    return (i.to_bytes(4, "little") * (size // 4 + 1))[:size]


def populate(server: Any, root: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import shardstream as ss

    server.create_bucket(BUCKET)
    local = root / "shards"
    local.mkdir()
    with ss.ShardWriter(str(local / "part-%06d.tar"), maxcount=PER_SHARD) as sink:
        for i in range(SAMPLES):
            sink.write({"__key__": f"s{i:05d}", "bin": _payload(i)})
    client = server.client()
    files = sorted(p for p in local.rglob("*") if p.is_file())  # the shards, _info.json, _offsets/

    def put_file(path: Path) -> None:
        key = f"shards/{path.relative_to(local).as_posix()}"
        client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())

    def put_object(i: int) -> None:
        client.put_object(Bucket=BUCKET, Key=f"objects/s{i:05d}.bin", Body=_payload(i))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put_file, files))
        list(pool.map(put_object, range(SAMPLES)))
    shutil.rmtree(local)


class WholeShards:
    """The wids way: download each touched shard whole into ``directory``, then read samples
    from the local file (members listed once per shard with ``tarfile``)."""

    def __init__(self, options: dict[str, Any], directory: Path) -> None:
        self.options, self.directory = options, directory
        self.listings: dict[int, dict[str, tuple[int, int]]] = {}
        self.downloaded = 0

    def reset(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        self.listings.clear()

    def _shard(self, k: int) -> dict[str, tuple[int, int]]:
        listing = self.listings.get(k)
        if listing is None:
            from shardstream.sources import open_url

            path = self.directory / f"part-{k:06d}.tar"
            with open_url(f"s3://{BUCKET}/shards/part-{k:06d}.tar", storage_options=self.options) as stream:
                data = stream.read()
            path.write_bytes(data)
            self.downloaded += len(data)
            with tarfile.open(path) as tar:
                listing = {m.name: (m.offset_data, m.size) for m in tar.getmembers()}
            self.listings[k] = listing
        return listing

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        out = []
        for i in indices:
            k = i // PER_SHARD
            offset, size = self._shard(k)[f"s{i:05d}.bin"]
            with open(self.directory / f"part-{k:06d}.tar", "rb") as f:
                f.seek(offset)
                out.append({"__key__": f"s{i:05d}", "bin": f.read(size)})
        return out


class CurlBatches:
    """(d) and (e): one ``curl --parallel --parallel-max 32 -K config`` per batch of samples.

    ``requests`` maps each sample number to ``(presigned URL, "start-end" or None, size)``; each
    sample is its own transfer (a ``next`` block in the config file, which resets per-transfer
    options). The status codes and byte counts curl writes out are checked on every run.
    """

    def __init__(self, curl: str, requests: dict[int, tuple[str, str | None, int]], config: Path) -> None:
        self.curl, self.requests, self.config = curl, requests, config

    def fetch(self, indices: Sequence[int], outputs: Sequence[Path] | None = None) -> list[int]:
        blocks = []
        for j, i in enumerate(indices):
            url, span, _size = self.requests[i]
            out = outputs[j] if outputs is not None else "/dev/null"
            blocks.append(
                f'url = "{url}"\noutput = "{out}"\n'
                + (f'range = "{span}"\n' if span else "")
                + 'fail\nwrite-out = "%{http_code} %{size_download}\\n"\n'
            )
        self.config.write_text("next\n".join(blocks))
        done = subprocess.run(
            [self.curl, "-s", "--parallel", "--parallel-max", str(BATCH), "-K", str(self.config)],
            check=True,
            capture_output=True,
            text=True,
        )
        status = "206" if self.requests[indices[0]][1] else "200"
        got = [line.split() for line in done.stdout.splitlines()]
        sizes = sorted(int(n) for _code, n in got)
        if {code for code, _n in got} != {status} or sizes != sorted(self.requests[i][2] for i in indices):
            raise RuntimeError(f"curl did not get the expected {status} responses: {done.stdout!r}")
        return sizes


def locate_all(options: dict[str, Any]) -> dict[int, tuple[str, int, int]]:
    """``(shard URL, offset, size)`` of every sample: the range ShardDataset reads for it, from an
    instance of its own (so that the sidecars it reads are neither cached for (c) nor counted)."""
    import shardstream as ss

    located = ss.ShardDataset(
        f"s3://{BUCKET}/shards/part-{{000000..{SHARDS - 1:06d}}}.tar", storage_options=options
    )
    try:
        return {i: located.locate(i) for i in range(SAMPLES)}
    finally:
        located.close()


def curl_sides(
    curl: str, client: Any, located: dict[int, tuple[str, int, int]], scratch: Path
) -> tuple[CurlBatches, CurlBatches]:
    """(d) curl objects and (e) curl ranges, with URLs presigned by ``client`` (for its endpoint)."""

    def sign(key: str) -> str:
        return str(
            client.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=3600)
        )

    objects = {i: (sign(f"objects/s{i:05d}.bin"), None, len(_payload(i))) for i in range(SAMPLES)}
    signed = {url: sign(url.split("/", 3)[3]) for url, _offset, _size in located.values()}
    ranges = {
        i: (signed[url], f"{offset}-{offset + size - 1}", size) for i, (url, offset, size) in located.items()
    }
    return (
        CurlBatches(curl, objects, scratch / "curl-objects.cfg"),
        CurlBatches(curl, ranges, scratch / "curl-ranges.cfg"),
    )


def curl_start(curl: str, runs: int = 21) -> float:
    """Median seconds of a curl that transfers nothing (``file:///dev/null``): the start-up each
    batch of (d) and (e) pays before its first request."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([curl, "-s", "-o", "/dev/null", "file:///dev/null"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _batches(order: list[int]) -> list[list[int]]:
    return [order[k : k + BATCH] for k in range(0, len(order), BATCH)]


def _pass(
    read: Callable[[list[int]], list[Any]], order: list[int], before: Callable[[], None]
) -> Callable[[], int]:
    def run() -> int:
        before()
        n = 0
        for batch in _batches(order):
            got = read(batch)
            n += len(got)
        return n

    return run


def contenders(options: dict[str, Any], scratch: Path) -> tuple[Any, Any, Any]:
    import shardstream as ss

    shards = ss.ShardDataset(
        f"s3://{BUCKET}/shards/part-{{000000..{SHARDS - 1:06d}}}.tar", storage_options=options
    )
    objects = ss.ObjectDataset(f"s3://{BUCKET}/objects/", storage_options=options)
    whole = WholeShards(options, scratch / "wids")
    return whole, objects, shards


def check_same(
    whole: Any, objects: Any, shards: Any, curls: tuple[CurlBatches, CurlBatches], scratch: Path
) -> None:
    """The five sides return the same bytes for the same sample numbers: curl's ranges are the
    bytes ShardDataset reads (tar headers included), curl's objects ObjectDataset's."""
    from shardstream.tar.sample_range import parse_sample

    picks = random.Random(7).sample(range(SAMPLES), 40)
    whole.reset()
    a = [s["bin"] for s in whole.__getitems__(picks)]
    b = [s["bin"] for s in objects.__getitems__(picks)]
    c = [s["bin"] for s in shards.__getitems__(picks)]
    want = [_payload(i) for i in picks]
    if not a == b == c == want:
        raise RuntimeError("the contenders disagree on the samples' bytes")
    located = [shards.locate(i) for i in picks]
    ours = shards.reader.read(located, keep=False)  # the ranges' bytes, as ShardDataset gets them
    for curl, name in zip(curls, ("objects", "ranges"), strict=True):
        outputs = [scratch / f"curl-{name}-{i}.out" for i in picks]
        curl.fetch(picks, outputs)
        got = [path.read_bytes() for path in outputs]
        if name == "ranges":
            parsed = [
                parse_sample(g, url, off)["bin"] for g, (url, off, _n) in zip(got, located, strict=True)
            ]
            same = got == ours and parsed == want
        else:
            same = got == want
        if not same:
            raise RuntimeError(f"curl's {name} differ from ours")
        for path in outputs:
            path.unlink()


def server_bytes(
    server: Any, scratch: Path, order: list[int], curl: str, located: dict[int, tuple[str, int, int]]
) -> dict[str, tuple[int, int]]:
    """(requests, response bytes) at a pass-through proxy for one pass of each side."""
    from _faults import FaultProxy

    out: dict[str, tuple[int, int]] = {}
    with FaultProxy(server.endpoint_url) as proxy:
        options = server.options_for(endpoint_url=proxy.url)
        whole, objects, shards = contenders(options, scratch)
        curl_objects, curl_ranges = curl_sides(curl, server.client(endpoint_url=proxy.url), located, scratch)
        for name, read in (
            ("(a) wids-style", whole.__getitems__),
            ("(b) ObjectDataset", objects.__getitems__),
            ("(c) ShardDataset", shards.__getitems__),
            ("(d) curl objects", curl_objects.fetch),
            ("(e) curl ranges", curl_ranges.fetch),
        ):
            if name.startswith("(a)"):
                whole.reset()
            proxy.clear()
            for batch in _batches(order):
                read(batch)
            out[name] = (sum(proxy.requests.values()), proxy.response_bytes)
            print(f"    {name}: {proxy.connections} new connections for {len(order)} samples")
        objects.close()
        shards.close()
    return out


def _weed_chunks(megabytes: int) -> None:
    """Add ``-filer.maxMB`` to the ``weed`` command line SeaweedS3 starts (bench-only experiment)."""
    import subprocess

    import shardstream.testing.seaweed as seaweed

    real = subprocess.Popen

    class Popen(real):  # type: ignore[misc, type-arg]
        def __init__(self, args: Any, *rest: Any, **kw: Any) -> None:
            if args and str(args[0]).endswith("weed"):
                args = [*args, f"-filer.maxMB={megabytes}"]
            super().__init__(args, *rest, **kw)

    seaweed.subprocess.Popen = Popen  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--markdown", type=Path, help="also write the results as Markdown here")
    parser.add_argument(
        "--chunk-mb",
        type=int,
        help="start SeaweedFS with -filer.maxMB=N (it stores objects in chunks of 4 MB by default and "
        "reads a whole chunk to serve a range of it)",
    )
    args = parser.parse_args(argv)

    from shardstream.testing.seaweed import SeaweedS3

    curl = shutil.which("curl")
    if curl is None:
        print("curl is not installed: it is the server's floor here", file=sys.stderr)
        return 2
    if args.chunk_mb:
        _weed_chunks(args.chunk_mb)

    with tempfile.TemporaryDirectory() as tmp, SeaweedS3(Path(tmp) / "weed") as server:
        scratch = Path(tmp)
        populate(server, scratch)
        options = server.storage_options
        whole, objects, shards = contenders(options, scratch)
        located = locate_all(options)
        curls = curl_sides(curl, server.client(), located, scratch)
        check_same(whole, objects, shards, curls, scratch)
        start = curl_start(curl)
        chunks = f"-filer.maxMB={args.chunk_mb}" if args.chunk_mb else "its default"
        rng = random.Random(0)
        sparse = rng.sample(range(SAMPLES), 100)
        epoch = rng.sample(range(SAMPLES), SAMPLES)
        lines = [
            "# bench_random_access: random samples from tar shards on S3",
            "",
            f"- {machine_line()}; SeaweedFS on loopback (same 2 cores)",
            f"- {SHARDS} shards x {PER_SHARD} samples of one 20-100 KB field (mean 60 KB), the same "
            f"samples also as {SAMPLES} single objects; batches of {BATCH} through `__getitems__` in "
            f"this process; best of {args.rounds} alternating rounds; SeaweedFS chunk size "
            f"{args.chunk_mb or 4} MB ({chunks})",
            "",
        ]
        for label, order, rounds in (
            ("sparse: 100 random samples, cold", sparse, args.rounds),
            ("epoch: all 4,000 in a random order", epoch, max(1, args.rounds - 1)),
        ):
            print(f"== {label}")
            cases = [
                ("(a) wids-style whole shards", _pass(whole.__getitems__, order, whole.reset)),
                ("(b) ObjectDataset", _pass(objects.__getitems__, order, lambda: None)),
                ("(c) ShardDataset", _pass(shards.__getitems__, order, shards.reader.close)),
                ("(d) curl objects", _pass(curls[0].fetch, order, lambda: None)),
                ("(e) curl ranges", _pass(curls[1].fetch, order, lambda: None)),
            ]
            sides = run_alternating(cases, rounds=rounds, expect=len(order), min_time=0.0)
            by = {s.name: s for s in sides}
            counted = server_bytes(server, scratch, order, curl, located)
            own = sum(len(_payload(i)) for i in order) / len(order)
            lines += [
                f"## {label}",
                "",
                "| contender | samples/s | CPU-s / 1k samples | GETs / sample | bytes at the server / sample "
                "| / the sample's bytes |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            for s, (gets, nbytes) in zip(sides, counted.values(), strict=True):
                m = s.best
                lines.append(
                    f"| {s.name} | {m.rate:,.0f} | {m.cpu_per_1k:.2f} | {gets / len(order):.2f} | "
                    f"{nbytes / len(order):,.0f} | {nbytes / len(order) / own:.2f}x |"
                )
            ours = by["(c) ShardDataset"]
            lines.append("")
            for other, target in (("(a) wids-style whole shards", ">= 5x"), ("(b) ObjectDataset", ">= 0.8x")):
                best, paired = paired_ratio(ours, by[other], lambda m: m.rate)
                lines.append(
                    f"- ShardDataset / {other}: **{best:.2f}x** "
                    f"(median per round {paired:.2f}x; target {target})"
                )
            for text, a, b in (
                ("server floor: curl ranges / curl objects", "(e) curl ranges", "(d) curl objects"),
                ("ShardDataset / curl ranges", "(c) ShardDataset", "(e) curl ranges"),
                ("ObjectDataset / curl objects", "(b) ObjectDataset", "(d) curl objects"),
            ):
                best, paired = paired_ratio(by[a], by[b], lambda m: m.rate)
                lines.append(f"- {text}: **{best:.2f}x** (median per round {paired:.2f}x)")
            batches = len(_batches(order))
            wall_d, wall_e = by["(d) curl objects"].best.wall, by["(e) curl ranges"].best.wall
            lines.append(
                f"- curl start-up (a `curl file:///dev/null`, median of 21): {start * 1e3:.1f} ms, paid once "
                f"per batch by (d) and (e): {start * batches / wall_d:.0%} of (d)'s time "
                f"({wall_d / batches * 1e3:.1f} ms a batch), {start * batches / wall_e:.0%} of (e)'s; "
                "the server floor less it (each side's best pass less "
                f"{batches} start-ups): {(wall_d - batches * start) / (wall_e - batches * start):.2f}x"
            )
            ms = {name: side.best.wall / batches * 1e3 for name, side in by.items()}
            extra_curl = ms["(e) curl ranges"] - ms["(d) curl objects"]
            extra_ours = ms["(c) ShardDataset"] - ms["(b) ObjectDataset"]
            reach = ms["(b) ObjectDataset"] / (ms["(b) ObjectDataset"] + extra_curl)
            lines.append(
                "- ranges' extra time a batch over objects (best passes): curl (e) - (d) "
                f"{extra_curl:.1f} ms, ours (c) - (b) {extra_ours:.1f} ms; ObjectDataset's batch "
                f"({ms['(b) ObjectDataset']:.1f} ms) plus curl's extra would be **{reach:.2f}x** "
                "ObjectDataset's rate (ShardDataset with ObjectDataset's client costs on this server)"
            )
            lines.append(
                f"- mean sample: {own:,.0f} bytes of payload (+ 1,024 bytes of tar headers in its range)"
            )
            lines.append("")
        objects.close()
        shards.close()
    emit_report(lines, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
