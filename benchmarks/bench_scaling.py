"""bench_scaling: how the loader's rate scales with cores when the per-sample work releases the GIL.

This machine has 2 cores; training nodes have 32-192. To see past 2 cores, every loader here gets
per-sample work that is a **wait of D us in a C call that releases the GIL and uses no CPU while
it waits** (``--us``, default 400: about one 256x256 JPEG's decode). N threads waiting stand for
N cores decoding: with nothing else to do, they would make N/D samples/s (the *ideal*). Everything
the loader does around the work (reading the shards, its stages' dispatch, collation, the
hand-offs between threads and processes) holds the GIL in its process, and the shortfall from
N/D measures it.

**The wait** (``_gilfree.py``). ``time.sleep(D)`` (``clock_nanosleep``, the GIL released around
it) by default; ``--wait select`` (``select.select([], [], [], t)``) and ``--wait event``
(``threading.Event().wait(t)``, which also takes a lock in Python) are the other C calls offered.
Linux lets a sleeper wake up to its *timer slack* late (50 us by default), so the benchmark sets
this process's slack to 1 us first (``prctl(PR_SET_TIMERSLACK)``): threads inherit it from the
thread that starts them, and processes across ``fork`` and ``exec`` (the loader's workers,
forkserver-started or forked). The run then calibrates the three calls on one idle thread (median,
mean and 99th percentile of the actual wait, CPU per wait) and reports it: ``time.sleep`` was
picked for being the most faithful of the three (the smallest overshoot and the least CPU per
wait) when the benchmark was written. The serial estimates below use the *calibrated mean* of the
chosen call (``D_eff``), so that its own overshoot is not counted as the loader's serial time; the
ideal N/D uses the nominal D. A pure-Python loop is also timed alone and beside 8 threads waiting
back to back (the GIL check: the waits must leave the GIL to the loop). Each wait still costs the
kernel some CPU to arm the timer and wake the thread; the "waits alone" rows (N threads doing
nothing but the wait) show how many samples/s this machine can emulate at all.

**Rows**, for each N of ``--cores`` (default 1 4 16 64 128, emulated cores):

* **waits alone**: N threads looping the wait, no loader: the emulation's own ceiling;
* **ss.Loader, threads**: ``ss.Loader(ds, batch_size=32, num_threads=N)``, one process (at N = 1
  the producer thread runs the work itself, in series with the reading, as thread mode does with
  one thread);
* **ss.Loader, M processes x T threads**: ``num_workers=M, num_threads=T`` with M x T = N, for
  each M of ``--workers`` (default 1 2 4: each process costs memory); T = 1 is process mode alone;
* **torchdata.nodes 0.11.0**: ``ParallelMapper(work, num_workers=N, method="thread")`` on the
  samples (its getting-started shape), then ``Batcher(32)``, ``Mapper(default_collate)``,
  ``Prefetcher(2)``, ``Loader`` (``_torchdata.sample_loader``); and the same with
  ``prebatch=32``, its documented option for small items (one task per 32 samples);
* **thread pool**: a bare ``ThreadPoolExecutor(N)`` mapping ``work`` over the samples in order
  with 2N tasks in flight (``window_map``: ``Executor.map`` as Python 3.14's ``buffersize=`` makes
  it; before 3.14 it submits every input before it yields the first result, so the first batch
  would wait for the whole pass's submissions), batched by 32 and collated in the calling thread;
  and the same over runs of 32 samples, each task working its run and collating it (chunking by
  hand: ``chunksize`` only applies to process pools).

``ds`` is ``ss.ShardStream(urls).map(work)`` over ``bench_loader``'s tiny samples (a ~60-byte JSON
label and a 16-byte payload; 100,000 samples in 20 shards here, made once in ``--data``), and
``work(sample)`` waits D, then returns ``(json, bin)`` as they are; each loader collates the
batches its own default way (lists of bytes). The peers read with shardstream's reader too
(``ss.ShardStream``'s raw samples): the rows differ in what runs around the work.

**Measurement.** Each row makes its loader, runs a few unmeasured batches (threads and processes
start, imports), then times one pass of ``count`` samples from ``iter()`` to the last batch:
``count`` is what the row would make in ``--seconds`` at ``min(N/D, --cap)`` samples/s, and a row
still running after 3 x ``--seconds`` (at least ``--seconds`` + 2 s) stops there. Rounds alternate
the order of the rows (``--rounds``); the table shows medians. CPU is the process tree's (workers
included) per sample. The defaults keep a full run well under 10 minutes here; ``--quick`` is a
smoke run (1 round of 0.2 s passes at N = 1 4 16, 2 workers) whose figures mean nothing.

**Serial time per sample**, from a row's rate R at N threads (with ``D_eff``):

* *Amdahl*: ``s = 1/R - D/N`` (clipped at 0): the serial time adds to the parallel time spread
  over N. It assumes nothing runs beside the serial part. With threads, one thread's serial work
  overlaps the others' waits, so at small N it reads up to N times too low (it is exact at N = 1
  and tends to ``1/R`` when the GIL saturates, as the other estimate does).
* *queueing*: the threads as a closed queueing network, N customers cycling between the wait (a
  delay of D, no queue) and the GIL (one server, s per sample), solved by mean-value analysis; s is
  the value for which the model's throughput is R (bisection). It counts the overlap and the
  queueing for the GIL; it models one lock where CPython's GIL also makes a thread that wants it
  wait up to the switch interval, so it is an estimate, not an exact inversion.
* *per process* (M processes x T threads): each process makes R/M samples/s with T threads:
  ``s_p`` is the queueing estimate for R/M and T. A process whose serial part is s per sample
  feeds at most D/s cores (``cores per process``): C cores need at least P = C x s / D such
  processes, of C / P threads each (the report's closing lines work this out for 64 and 128
  cores). For thread mode (one process) the same column reads D/s.
* *cores busy*: the rate times the CPU per sample. Near this machine's 2 cores the row is bound
  by the CPU here, not by a GIL (the README says what that means for the process rows).

What the rows do and do not predict: ``benchmarks/README.md``.

    .venv/bin/python benchmarks/bench_scaling.py [--us 400] [--cores 1 4 16 64 128]
        [--workers 1 2 4] [--rounds 3] [--seconds 1.5] [--wait sleep|select|event] [--quick]
        [--markdown F]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_seconds, emit_report, machine_line  # noqa: E402
from _gilfree import WAITS, Work, calibrate, gil_check, set_timer_slack  # noqa: E402
from bench_loader import build_tiny  # noqa: E402

BATCH = 32
#: The tiny samples: 100,000 in 20 shards (enough for the fastest rows' passes).
SAMPLES, SHARDS = 100_000, 20
#: Unmeasured batches before each timed pass.
WARM_BATCHES = 4
# ------------------------------------------------------------------------------------------------
# Contenders


class Runner(Protocol):
    """A row's loader: ``batches(count)`` yields collated batches (a pass of at least ``count``
    samples, or fewer at the end of the data); ``close()`` stops its threads and processes."""

    def batches(self, count: int) -> Iterator[Any]: ...

    def close(self) -> None: ...


def batch_len(batch: Any) -> int:
    """Samples in a batch: every loader here collates ``(json, bin)`` into two columns."""
    return len(batch[0])


class LoaderRunner:
    """Anything iterable by epochs with a ``close()``: ss.Loader, torchdata's ``NodesLoader``."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def batches(self, count: int) -> Iterator[Any]:
        return iter(self.loader)

    def close(self) -> None:
        self.loader.close()


def _collate() -> Callable[[list[Any]], Any]:
    from torch.utils.data import default_collate

    return default_collate  # type: ignore[no-any-return]


def _runs(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while run := list(itertools.islice(it, size)):
        yield run


class RunTask:
    """A task of the chunked pool: work a run of samples, collate it."""

    def __init__(self, work: Work, collate: Callable[[list[Any]], Any]) -> None:
        self.work, self.collate = work, collate

    def __call__(self, run: list[Any]) -> Any:
        work = self.work
        return self.collate([work(sample) for sample in run])


def window_map(
    pool: ThreadPoolExecutor, fn: Callable[[Any], Any], items: Iterable[Any], depth: int
) -> Iterator[Any]:
    """``pool.map(fn, items)`` with at most ``depth`` tasks submitted ahead of the results taken
    (Python 3.14's ``Executor.map(buffersize=)``): in order, and without taking the whole input
    first as ``Executor.map`` does before 3.14."""
    pending: deque[Any] = deque()
    for item in items:
        if len(pending) >= depth:
            yield pending.popleft().result()
        pending.append(pool.submit(fn, item))
    while pending:
        yield pending.popleft().result()


class PoolRunner:
    """A bare ``ThreadPoolExecutor`` over shardstream's raw samples, ``2 x threads`` tasks ahead
    (torchdata's ``ParallelMapper`` keeps as many in flight by default)."""

    def __init__(self, urls: list[str], work: Work, threads: int, chunked: bool) -> None:
        self.urls, self.work, self.chunked, self.depth = urls, work, chunked, 2 * threads
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-pool")
        self.collate = _collate()

    def batches(self, count: int) -> Iterator[Any]:
        import shardstream as ss

        samples = itertools.islice(ss.ShardStream(self.urls, shuffle_shards=False), count)
        if self.chunked:
            task = RunTask(self.work, self.collate)
            yield from window_map(self.pool, task, _runs(samples, BATCH), self.depth)
            return
        batch: list[Any] = []
        for item in window_map(self.pool, self.work, samples, self.depth):
            batch.append(item)
            if len(batch) == BATCH:
                yield self.collate(batch)
                batch = []
        if batch:
            yield self.collate(batch)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class WaitsAlone:
    """N threads looping the wait and counting, no loader: one 'batch' per ``BATCH`` waits."""

    def __init__(self, work: Work, threads: int) -> None:
        self.work, self.threads = work, threads

    def batches(self, count: int) -> Iterator[Any]:
        done = [0] * self.threads
        stop = threading.Event()
        seconds, wait = self.work.seconds, self.work.wait

        def loop(k: int) -> None:
            while not stop.is_set():
                wait(seconds)
                done[k] += 1

        pool = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(self.threads)]
        for t in pool:
            t.start()
        try:
            given = 0
            while given < count:
                time.sleep(0.005)
                while sum(done) - given >= BATCH:
                    given += BATCH
                    yield (range(BATCH), None)
        finally:
            stop.set()
            for t in pool:
                t.join()

    def close(self) -> None:
        pass


@dataclass
class Row:
    """One contender at one N; ``make()`` builds its loader for a round."""

    kind: str
    cores: int
    workers: int  # processes (0: one process)
    threads: int  # per process
    make: Callable[[], Runner]
    rates: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # CPU us per sample
    first: list[float] = field(default_factory=list)  # ms
    short: int = 0  # rounds that stopped on the time limit

    @property
    def name(self) -> str:
        threads = f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        if not self.workers:
            return f"{self.kind}, {threads}"
        return f"{self.kind}, {self.workers} process{'es' if self.workers > 1 else ''} x {threads}"


def rows_for(urls: list[str], work: Work, cores: list[int], workers: list[int], torchdata: bool) -> list[Row]:
    import _torchdata

    import shardstream as ss

    def ours(threads: int, processes: int) -> Callable[[], Runner]:
        def make() -> Runner:
            dataset = ss.ShardStream(urls, shuffle_shards=False).map(work)
            return LoaderRunner(
                ss.Loader(dataset, batch_size=BATCH, num_threads=threads, num_workers=processes)
            )

        return make

    def nodes(threads: int, prebatch: int | None) -> Callable[[], Runner]:
        def make() -> Runner:
            source = ss.ShardStream(urls, shuffle_shards=False)
            return LoaderRunner(_torchdata.sample_loader(source, work, threads, BATCH, prebatch=prebatch))

        return make

    rows: list[Row] = []
    for n in cores:
        rows.append(Row("waits alone", n, 0, n, partial(WaitsAlone, work, n)))
        rows.append(Row("ss.Loader", n, 0, n, ours(n, 0)))
        for m in workers:
            if n % m == 0:
                rows.append(Row("ss.Loader", n, m, n // m, ours(n // m, m)))
        if torchdata:
            rows.append(Row("torchdata.nodes", n, 0, n, nodes(n, None)))
            rows.append(Row(f"torchdata.nodes prebatch={BATCH}", n, 0, n, nodes(n, BATCH)))
        for chunked, kind in (
            (False, "thread pool, a task per sample"),
            (True, f"thread pool, a task per {BATCH}"),
        ):
            rows.append(Row(kind, n, 0, n, partial(PoolRunner, urls, work, n, chunked)))
    return rows


# ------------------------------------------------------------------------------------------------
# Measurement


def settle(seconds: float = 2.0) -> None:
    """Wait (a while at most) for the threads of the row before to end: none of them should take
    the GIL from the next row, and process mode forks its workers only when no other thread runs
    (``loader/_start.py``)."""
    end = time.monotonic() + seconds
    while threading.active_count() > 1 and time.monotonic() < end:
        time.sleep(0.01)


def measure(row: Row, count: int, limit: float) -> None:
    """Warm-up batches, then one timed pass of ``count`` samples (or until ``limit`` seconds)."""
    settle()
    runner = row.make()
    try:
        for k, _ in enumerate(runner.batches(WARM_BATCHES * BATCH)):
            if k + 1 >= WARM_BATCHES:
                break
        c0 = cpu_seconds()
        t0 = time.perf_counter()
        n, first, short = 0, None, False
        for batch in runner.batches(count):
            if first is None:
                first = time.perf_counter() - t0
            n += batch_len(batch)
            if n >= count:
                break
            if time.perf_counter() - t0 > limit:
                short = True
                break
        wall = time.perf_counter() - t0
        cpu = cpu_seconds() - c0
    finally:
        runner.close()
    row.rates.append(n / wall)
    row.cpu.append(cpu / n * 1e6)
    row.first.append(1000 * (first or 0.0))
    row.short += short


def count_for(row: Row, seconds: float, micros: float, cap: float) -> int:
    """Samples for a pass of about ``seconds`` at the row's expected rate, whole batches."""
    expected = min(row.cores / (micros / 1e6), cap)
    return max(2 * BATCH, min(SAMPLES, math.ceil(expected * seconds / BATCH) * BATCH))


# ------------------------------------------------------------------------------------------------
# Serial time per sample


def mva_rate(n: int, delay: float, serial: float) -> float:
    """Throughput of n customers cycling between a delay and one FIFO server (mean-value analysis)."""
    queue = rate = 0.0
    for k in range(1, n + 1):
        response = serial * (1 + queue)
        rate = k / (delay + response)
        queue = rate * response
    return rate


def serial_queueing(rate: float, n: int, delay: float) -> float:
    """The server's time per sample for which :func:`mva_rate` is ``rate`` (seconds)."""
    if rate >= n / delay:
        return 0.0
    lo, hi = 0.0, 1.0 / rate  # the model's rate at s = 1/rate is at most 1/s = rate
    for _ in range(60):
        mid = (lo + hi) / 2
        if mva_rate(n, delay, mid) > rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def serial_amdahl(rate: float, n: int, delay: float) -> float:
    return max(0.0, 1 / rate - delay / n)


# ------------------------------------------------------------------------------------------------
# Report


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _cores(serial: float, delay: float) -> str:
    return f"{delay / serial:,.1f}" if serial > 0 else "-"


def table(rows: list[Row], micros: float, delay: float) -> list[str]:
    """Markdown rows (medians over rounds); ``delay``: the calibrated wait (D_eff), seconds."""
    alone = {row.cores: statistics.median(row.rates) for row in rows if row.kind == "waits alone"}
    head = (
        "| loader | N | samples/s | ideal N/D | efficiency | vs waits alone | serial us/sample, Amdahl "
        "| serial us/sample, queueing | per process: serial us/sample | cores per process "
        "| CPU us/sample | cores busy | first batch, ms |"
    )
    lines = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    for row in rows:
        rate, cpu = statistics.median(row.rates), statistics.median(row.cpu)
        ideal = row.cores / (micros / 1e6)
        if row.kind == "waits alone":
            amdahl = queueing = per_process = cores = "-"
        else:
            amdahl = _us(serial_amdahl(rate, row.cores, delay))
            s = serial_queueing(rate, row.cores, delay)
            queueing = _us(s)
            if row.workers:
                s_p = serial_queueing(rate / row.workers, row.threads, delay)
                per_process, cores = _us(s_p), _cores(s_p, delay)
            else:
                per_process, cores = queueing, _cores(s, delay)
        mark = f" ({row.short} of its rounds cut at the time limit)" if row.short else ""
        lines.append(
            f"| {row.name}{mark} | {row.cores} | {rate:,.0f} | {ideal:,.0f} | {rate / ideal:.0%} "
            f"| {rate / alone[row.cores]:.0%} | {amdahl} | {queueing} | {per_process} | {cores} "
            f"| {cpu:,.1f} | {rate * cpu / 1e6:.2f} | {statistics.median(row.first):,.0f} |"
        )
    return lines


def summary(rows: list[Row], delay: float) -> list[str]:
    """Each ss.Loader row's serial part (per process) and the processes it implies for 64 and 128
    cores: a process whose serial part is s per sample feeds at most D/s cores."""
    lines = []
    for row in rows:
        if row.kind != "ss.Loader":
            continue
        rate = statistics.median(row.rates)
        s = serial_queueing(rate / max(1, row.workers), row.threads, delay)
        if s <= 0:
            lines.append(f"- {row.name}: at the ideal, no serial time to estimate")
            continue
        per = delay / s
        need = []
        for cores in (64, 128):
            processes = math.ceil(cores / per)
            need.append(
                f"{cores} cores at least {processes} processes of {math.ceil(cores / processes)} threads"
            )
        lines.append(
            f"- {row.name}: {s * 1e6:,.1f} us of serial time per sample in each process (queueing "
            f"estimate), so one process feeds at most {per:,.1f} cores at D_eff = {delay * 1e6:,.0f} us; "
            f"with that serial part, {' and '.join(need)}"
        )
    return lines


# ------------------------------------------------------------------------------------------------
# Main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("bench-data"))
    parser.add_argument("--us", type=float, default=400.0, help="the GIL-free wait per sample, microseconds")
    parser.add_argument(
        "--cores", type=int, nargs="+", help="emulated cores (threads); default 1 4 16 64 128, --quick 1 4 16"
    )
    parser.add_argument(
        "--workers", type=int, nargs="+", help="processes of process rows; default 1 2 4, --quick 2"
    )
    parser.add_argument("--rounds", type=int, help="default 3, --quick 1")
    parser.add_argument("--seconds", type=float, help="the length of a timed pass; default 1.5, --quick 0.2")
    parser.add_argument("--cap", type=float, default=40_000.0, help="the rate that sizes a pass at most")
    parser.add_argument("--wait", choices=sorted(WAITS), default="sleep")
    parser.add_argument("--quick", action="store_true", help="a smoke run (the defaults above); no figures")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    quick = args.quick
    # torch's advice against more workers than cores: here they stand for a node's processes.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    args.cores = args.cores or ([1, 4, 16] if quick else [1, 4, 16, 64, 128])
    args.workers = args.workers or ([2] if quick else [1, 2, 4])
    args.rounds = args.rounds or (1 if quick else 3)
    args.seconds = args.seconds or (0.2 if quick else 1.5)

    slack = set_timer_slack(1000)
    seconds = args.us / 1e6
    calibrations = [calibrate(name, seconds, 100 if args.quick else 400) for name in sorted(WAITS)]
    chosen = next(c for c in calibrations if c.name == args.wait)
    delay = chosen.mean / 1e6
    gil = gil_check(WAITS[args.wait], seconds)
    print(
        f"wait {args.wait}: mean {chosen.mean:.1f} us for {args.us:.0f} us; GIL check {gil:.0%}", flush=True
    )

    import _torchdata

    why = _torchdata.unavailable()
    if why is not None:
        print(f"torchdata.nodes rows skipped: {why}; install: {_torchdata.INSTALL}")
    urls = build_tiny(args.data, SAMPLES, SHARDS)
    work = Work(seconds, args.wait)
    rows = rows_for(urls, work, args.cores, args.workers, why is None)
    for r in range(args.rounds):
        for row in rows if r % 2 == 0 else rows[::-1]:
            measure(
                row, count_for(row, args.seconds, args.us, args.cap), max(3 * args.seconds, args.seconds + 2)
            )
            print(
                f"round {r + 1} {row.name:<58} N={row.cores:<4} {row.rates[-1]:10,.0f} samples/s", flush=True
            )

    command = f".venv/bin/python benchmarks/bench_scaling.py --us {args.us:g} --wait {args.wait}"
    command += " --quick" if args.quick else ""
    command += f" --cores {' '.join(map(str, args.cores))} --workers {' '.join(map(str, args.workers))}"
    command += f" --rounds {args.rounds} --seconds {args.seconds:g}"
    lines = [
        f"# bench_scaling: a GIL-free wait of {args.us:g} us per sample, 1 thread per emulated core",
        "",
        f"- date: {time.strftime('%Y-%m-%d')}",
        f"- machine: {machine_line()}",
        f"- command: `{command}`",
        f"- {args.rounds} alternating rounds, one timed pass of about {args.seconds:g} s per row and "
        f"round after {WARM_BATCHES} unmeasured batches; medians over rounds",
        f"- samples: {SAMPLES:,} tiny samples in {SHARDS} shards (`bench_loader`'s), batch {BATCH}; the "
        "work returns `(json, bin)` as they are, collated into lists",
        "- timer slack set to 1 us: " + ("yes" if slack else "no (not Linux?): waits may wake up 50 us late"),
        f"- the wait: `{args.wait}`, D = {args.us:g} us nominal; D_eff = {chosen.mean:,.1f} us (its mean "
        "on one idle thread below), used by the serial estimates",
        f"- GIL check: a pure-Python loop ran at {gil:.0%} of its speed alone while 8 threads waited "
        "back to back (a wait that kept the GIL would leave it next to nothing; each wake-up takes the "
        "GIL once to return to Python, which this share pays for)",
        "",
        "| wait call | median, us | mean, us | 99th percentile, us | CPU per wait, us |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| `{c.name}`{' (used)' if c.name == args.wait else ''} | {c.median:,.1f} | {c.mean:,.1f} "
            f"| {c.p99:,.1f} | {c.cpu:,.1f} |"
            for c in calibrations
        ),
        "",
        "N: emulated cores (threads in all). Efficiency: the rate over N/D. Serial estimates and "
        "`cores per process`: see the script's docstring. Cores busy: the rate times the CPU per "
        "sample; near this machine's 2 cores, a row is bound by the CPU here (the serial parts of "
        "several processes, the main process and the waits' wake-ups share them), not by a GIL.",
        "",
        *table(rows, args.us, delay),
        "",
        *summary(rows, delay),
    ]
    if why is not None:
        lines.append(f"- torchdata.nodes rows skipped: {why} (install: {_torchdata.INSTALL})")
    emit_report(lines, args.markdown)


if __name__ == "__main__":
    main()
