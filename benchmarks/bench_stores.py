"""Every object store against curl on the same emulator: shard streaming MB/s and small objects/s (issue 28).

Run from the repository root::

    .venv/bin/python benchmarks/bench_stores.py [--rounds 3] [--mb 64] [--objects 200] [--markdown FILE]

Starts each store's server on loopback (free ports, stopped by PID at the end, also on errors):
SeaweedFS (``s3://``), fake-gcs-server (``gs://``), Azurite (``az://``; skipped without Node.js)
and the Hugging Face Hub stand-in (``hf://``, run in a child process so that its Python server
threads do not share this process's interpreter with the client measured). Into each it puts one
``--mb`` MB object and ``--objects`` objects of 10 KB, then measures, alternating every round:

* streaming: shardstream ``open_url(url)`` read to the end into a reused 1 MiB buffer, against
  curl fetching the same object to ``/dev/null`` (a presigned S3 URL, the emulator's media URL for
  GCS, a SAS URL for Azure; for the Hub the signed CDN URL its ``resolve`` URL redirects to,
  resolved once as the hf:// source does, so each side makes one request per object per pass);
* small objects: the source's ``get_many`` session with 32 requests in flight, against
  ``curl --parallel --parallel-max 32`` over the same URLs.

Both sides are warm: ours keeps its process and connection pool from pass to pass, and curl is
one process per measurement that fetches a warm-up pass and then K passes of the URLs over the
connections it keeps alive (``_curl.WarmCurl``: timed from its own per-transfer output, so its
start-up and its connection set-up fall in the warm-up pass, not in the measured passes). The
report counts the TCP connections each side opens per measured pass (curl's ``num_connects``;
ours in one more pass with ``socket.connect`` counted).

Targets (issue 28): streaming >= 90% of curl, small objects >= 85% of the concurrent curl. The
servers run on the same 2 cores as the clients, so the figures compare clients, not networks.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Side, emit_report, machine_line, paired_ratio, run_alternating  # noqa: E402
from _curl import WarmCurl  # noqa: E402

SMALL = 10_000
WINDOW = 32
_HUB_CHILD = """
import sys, time
from shardstream.testing.hub import HubStandIn
hub = HubStandIn(sys.argv[1]).start()
print(hub.endpoint, flush=True)
try:
    for line in sys.stdin:
        repo, path, size, seed = line.split()
        import random
        hub.add_file(repo, path, random.Random(int(seed)).randbytes(int(size)))
        print("ok", flush=True)
finally:
    hub.stop()
"""


@dataclass
class Store:
    """One store, loaded with the benchmark's objects: what both sides need to read them."""

    name: str
    big: str  # our URL of the large object
    small: list[str]  # our URLs of the small objects
    options: dict[str, Any]
    curl_big: str  # a URL curl can GET without signing
    curl_small: list[str]


def _payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


@contextmanager
def s3_store(tmp: Path, big: bytes, count: int) -> Iterator[Store]:
    from shardstream.testing.seaweed import SeaweedS3

    with SeaweedS3(tmp / "seaweed") as server:
        bucket = server.create_bucket("bench-stores")
        big_url = server.put_object(bucket, "big.bin", big)
        small = [server.put_object(bucket, f"small/{i:05d}.bin", _payload(i, SMALL)) for i in range(count)]
        client = server.client()

        def signed(url: str) -> str:
            key = url.split("/", 3)[3]
            return str(
                client.generate_presigned_url(
                    "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600
                )
            )

        yield Store(
            "s3:// (SeaweedFS)",
            big_url,
            small,
            server.storage_options,
            signed(big_url),
            [signed(u) for u in small],
        )


@contextmanager
def gcs_store(tmp: Path, big: bytes, count: int) -> Iterator[Store]:
    from shardstream.testing.fakegcs import FakeGCS

    with FakeGCS(tmp / "fake-gcs") as server:
        bucket = server.create_bucket("bench-stores")
        big_url = server.put_object(bucket, "big.bin", big)
        small = [server.put_object(bucket, f"small/{i:05d}.bin", _payload(i, SMALL)) for i in range(count)]

        def media(url: str) -> str:
            key = url.split("/", 3)[3]
            return f"{server.endpoint_url}/download/storage/v1/b/{bucket}/o/{quote(key, safe='')}?alt=media"

        yield Store(
            "gs:// (fake-gcs-server)",
            big_url,
            small,
            server.storage_options,
            media(big_url),
            [media(u) for u in small],
        )


@contextmanager
def azure_store(tmp: Path, big: bytes, count: int) -> Iterator[Store | None]:
    from shardstream.testing.azurite import Azurite, azurite_binary

    if azurite_binary() is None:
        print("Azurite is not installed (bash run.sh setup installs it with npm): az:// skipped")
        yield None
        return
    with Azurite(tmp / "azurite") as server:
        container = server.create_container("bench-stores")
        big_url = server.put_blob(container, "big.bin", big)
        small = [server.put_blob(container, f"small/{i:05d}.bin", _payload(i, SMALL)) for i in range(count)]
        sas = server.sas_token(container, permissions="r")

        def signed(url: str) -> str:
            key = url.split("/", 3)[3]
            return f"{server.endpoint_url}/{container}/{quote(key)}?{sas}"

        yield Store(
            "az:// (Azurite)",
            big_url,
            small,
            server.storage_options,
            signed(big_url),
            [signed(u) for u in small],
        )


@contextmanager
def hf_store(tmp: Path, big: bytes, count: int) -> Iterator[Store]:
    child = subprocess.Popen(
        [sys.executable, "-c", _HUB_CHILD, str(tmp / "hub")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        endpoint = child.stdout.readline().strip()
        repo = "bench/stores"

        def add(path: str, size: int, seed: int) -> None:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(f"{repo} {path} {size} {seed}\n")
            child.stdin.flush()
            if child.stdout.readline().strip() != "ok":
                raise RuntimeError("the Hub stand-in did not take the file")

        add("big.bin", len(big), -1)
        for i in range(count):
            add(f"small/{i:05d}.bin", SMALL, i)
        ours = f"hf://datasets/{repo}"
        resolve = f"{endpoint}/datasets/{repo}/resolve/main"
        small = [f"small/{i:05d}.bin" for i in range(count)]
        yield Store(
            "hf:// (Hub stand-in)",
            f"{ours}/big.bin",
            [f"{ours}/{p}" for p in small],
            {"endpoint": endpoint, "token": False},
            _cdn_url(f"{resolve}/big.bin"),
            [_cdn_url(f"{resolve}/{p}") for p in small],
        )
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, 9)
            child.wait()


def _cdn_url(resolve: str) -> str:
    """The signed CDN URL the Hub's ``resolve`` URL redirects to (every file here is an LFS file).
    The hf:// source resolves a file once and reads the CDN URL until it expires; curl is given it
    the same way, so both make one request per object per pass (with ``-L`` curl would ask the Hub
    for the redirect again on every pass: two requests per object)."""
    parts = urlsplit(resolve)
    conn = http.client.HTTPConnection(parts.netloc, timeout=30)
    try:
        conn.request("HEAD", parts.path)
        answer = conn.getresponse()
        location = answer.getheader("Location")
        if answer.status != 302 or location is None:
            raise RuntimeError(
                f"the Hub stand-in answered {answer.status} without a CDN redirect for {resolve}"
            )
        return location
    finally:
        conn.close()


def stream_ours(store: Store) -> Callable[[], int]:
    from shardstream.sources import open_url

    buf = bytearray(1 << 20)

    def run() -> int:
        total = 0
        with open_url(store.big, storage_options=store.options) as stream:
            while n := stream.readinto(buf):  # type: ignore[attr-defined]
                total += n
        return total

    return run


def stream_curl(store: Store, curl: str, size: int, config: Path) -> WarmCurl:
    """One curl process per measurement, the object fetched once per pass over one kept-alive
    connection; a pass counts its bytes as samples, as :func:`stream_ours` does."""
    return WarmCurl(curl, [store.curl_big], config, samples=size, nbytes=size, min_time=0.5)


def small_ours(store: Store) -> Callable[[], int]:
    from shardstream.sources import OK, get_source, with_defaults

    def run() -> int:
        source = with_defaults(get_source(store.small[0], store.options)).route(store.small[0])
        gets = source.get_many(window=WINDOW)
        urls = iter(enumerate(store.small))
        in_flight = done = 0
        for token, url in urls:
            if gets.submit(token, url) is not None:
                raise RuntimeError(f"{url} failed at submit")
            in_flight += 1
            if in_flight == WINDOW:
                break
        while in_flight:
            for outcome in gets.wait():
                in_flight -= 1
                if outcome.kind != OK or len(outcome.body) != SMALL:
                    raise RuntimeError(f"{store.small[outcome.token]}: {outcome.kind} {outcome.error}")
                done += 1
                nxt = next(urls, None)
                if nxt is not None:
                    gets.submit(*nxt)
                    in_flight += 1
        gets.pause()
        return done

    return run


def small_curl(store: Store, curl: str, config: Path) -> WarmCurl:
    """One curl process per measurement with ``WINDOW`` transfers in flight over the connections
    it keeps alive from pass to pass."""
    flags = ("--parallel", "--parallel-max", str(WINDOW))
    count = len(store.curl_small)
    return WarmCurl(
        curl, store.curl_small, config, flags=flags, samples=count, nbytes=count * SMALL, min_time=0.5
    )


@contextmanager
def counting_connects() -> Iterator[list[int]]:
    """Count the TCP connections this process opens meanwhile: every client of shardstream's
    sources connects through Python's ``socket.socket`` (``connect`` or ``connect_ex``)."""
    count = [0]
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def counted(self: socket.socket, address: Any) -> None:
        count[0] += 1
        connect(self, address)

    def counted_ex(self: socket.socket, address: Any) -> int:
        count[0] += 1
        return connect_ex(self, address)

    socket.socket.connect = counted  # type: ignore[method-assign]
    socket.socket.connect_ex = counted_ex  # type: ignore[method-assign]
    try:
        yield count
    finally:
        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]


def connects_per_pass(run: Callable[[], int]) -> int:
    """The connections one more pass of ``run`` opens (after the measured ones: a warm pool)."""
    with counting_connects() as count:
        run()
    return count[0]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=int, default=64, help="size of the streamed object in MB")
    parser.add_argument("--objects", type=int, default=200, help="number of 10 KB objects")
    parser.add_argument("--only", nargs="*", choices=["s3", "gcs", "azure", "hf"], help="stores to run")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    args = parser.parse_args()
    curl = shutil.which("curl")
    if curl is None:
        print("curl is not installed: nothing to compare with", file=sys.stderr)
        return 2
    size = args.mb * 1_000_000
    big = _payload(-1, size)
    makers = {"s3": s3_store, "gcs": gcs_store, "azure": azure_store, "hf": hf_store}
    chosen = args.only or list(makers)
    rows: list[tuple[str, Side, Side, Side, Side]] = []
    connections: list[tuple[str, int, float, int, float]] = []  # new connections per measured pass
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as tmp, ExitStack() as stack:
        for name in chosen:
            store = stack.enter_context(makers[name](Path(tmp) / name, big, args.objects))
            if store is None:
                continue
            print(f"== {store.name}")
            t0 = time.perf_counter()
            ours_stream, curl_stream = (
                stream_ours(store),
                stream_curl(store, curl, size, Path(tmp) / f"{name}.big"),
            )
            streamed = run_alternating(
                [("ours", ours_stream), ("curl", curl_stream)], rounds=args.rounds, nbytes=size, min_time=0.5
            )
            ours_small, curl_small = small_ours(store), small_curl(store, curl, Path(tmp) / f"{name}.small")
            objects = run_alternating(
                [("ours", ours_small), ("curl", curl_small)],
                rounds=args.rounds,
                expect=args.objects,
                min_time=0.5,
            )
            print(f"   {time.perf_counter() - t0:.1f} s")
            rows.append((store.name, *streamed, *objects))
            connections.append(
                (
                    store.name,
                    connects_per_pass(ours_stream),
                    max(curl_stream.connects),
                    connects_per_pass(ours_small),
                    max(curl_small.connects),
                )
            )
    lines = [
        f"# bench_stores: each store against curl on the same emulator ({datetime.date.today()})",
        "",
        f"Machine: {machine_line()}. One {args.mb} MB object streamed; {args.objects} objects of 10 KB with "
        f"{WINDOW} requests in flight. Best round of {args.rounds} (median of per-round ratios in brackets). "
        "Both sides warm: ours keeps its process and connections from pass to pass; curl is one process "
        "per measurement that fetches a warm-up pass, then the measured passes over the connections it "
        "keeps alive, timed from its own per-transfer output (`benchmarks/_curl.py`), so neither "
        "side's start-up nor its first connections are in the figures. One difference remains: with "
        "`--parallel` curl starts a pass's first transfers while the previous pass's last are running, "
        "where ours drains its window at the end of each pass (in curl's favour). The Hub's objects are "
        "fetched by curl from the signed CDN URLs their `resolve` URLs redirect to, resolved once, as "
        "the hf:// source resolves and caches them: one request per object per pass on each side.",
        "",
        "| store | ours MB/s | curl MB/s | streaming vs curl (target >= 0.90) | ours objects/s | "
        "curl --parallel objects/s | objects vs curl (target >= 0.85) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, ours_s, curl_s, ours_o, curl_o in rows:
        s_best, s_med = paired_ratio(ours_s, curl_s, lambda m: m.mb_per_s)
        o_best, o_med = paired_ratio(ours_o, curl_o, lambda m: m.rate)
        lines.append(
            f"| {name} | {ours_s.best.mb_per_s:,.0f} | {curl_s.best.mb_per_s:,.0f} | "
            f"{s_best:.2f}x ({s_med:.2f}x) | {ours_o.best.rate:,.0f} | {curl_o.best.rate:,.0f} | "
            f"{o_best:.2f}x ({o_med:.2f}x) |"
        )
    lines += [
        "",
        "New TCP connections per measured pass (ours: counted at `socket.connect` in one more pass "
        "after the rounds; curl: its `num_connects`, the most over its measurements):",
        "",
        "| store | streaming: ours | streaming: curl | small objects: ours | small objects: curl |",
        "|---|---:|---:|---:|---:|",
        *(f"| {name} | {a} | {b:g} | {c} | {d:g} |" for name, a, b, c, d in connections),
    ]
    lines += [
        "",
        "Each server shares the client's 2 cores; the Hub stand-in is a Python server (in a child "
        "process), so its figures say more about the stand-in than about the Hub.",
    ]
    emit_report(lines, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
