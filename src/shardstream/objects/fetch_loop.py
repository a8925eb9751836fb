"""The fetch-ahead engine for objects and byte ranges on one thread, over a source's ``get_many`` session.

What it fetches is a :class:`Jobs` table: job ``i`` is a dict to fill and its parts, each a
field name and a :data:`Request` ``(url, offset, length, size)``: a whole object
(``(url, 0, None, size)``, a sample of :class:`~.samples.SampleTable`, ``size`` from its manifest)
or a byte range (a run of tar samples of ``shardstream.ShardDataset``). Each answer is bounded by
what the request expects (the range's length, the object's size, else the source's
``max_body``). Same contract as :class:`~.fetch.FetchAhead` (jobs in sampler order, up to
``window`` ahead and ``max_bytes`` fetched but not consumed, delivered in order or as they
complete, a failed job delivered as its exception). The consumer's own thread submits
each request to the source's :class:`~shardstream.sources.ManyGets` session and takes the
outcomes it reports: for S3 that session is one ``epoll`` loop (no thread woken per GET, which
is what a window of threads pays for; both are measured in
``benchmarks/results/bench_objects.md``), for other sources ``get_into`` on threads. The loop
never sees a wire request or a status: only the outcome kinds of :mod:`shardstream.sources.many`.

Requests in flight pass the AIMD gate (:class:`~._aimd.Concurrency`), which stays here rather
than in the source: it bounds one consumer's window, is shared with the helper threads and the
map-style path (:class:`~._get.ObjectGetter`), and reacts to an outcome kind (``THROTTLED``
halves it), not to a status. An ``OK`` outcome completes its object here; ``FAILED`` is
delivered in the sample's place; ``THROTTLED`` and ``RETRY`` send that one object to
:meth:`ObjectGetter.get <._get.ObjectGetter.get>` on a small pool of helper threads, which
retries, resumes, backs off and raises the clear error exactly as the blocking path does, so
faults keep one set of rules and the common case pays for none of them.

Gathering: under load every wake-up of this thread costs a context switch and a pass of the
loop, and the session reports answers as they land. So while many requests are in flight
(:data:`GATHER_MIN` or more) the loop pauses briefly before it waits, and one wake-up then
collects what arrived meanwhile (and sends their successors together, which the server handles
more cheaply too). The pause is a share of the measured request latency (:data:`GATHER_SHARE`)
and at most ``FetchRun.gather`` seconds (:data:`DEFAULT_GATHER`; 0 turns it off): a request that
completes during it waits half of it on average, a few percent of its latency, which a stream
bound by latency rather than CPU makes up with a slightly larger window. The benchmark runs the
stream with and without it.

Stopping: closing the iterator sets the stop event (helper backoffs end), closes the session
(requests in flight are dropped, connections closed) and joins the helper threads; a run that
ends normally pauses the session instead, keeping its connections for the next run.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..faults import FAULTS
from ..forks import GatedExecutor
from ..sources import FAILED, OK, THROTTLED, ManyGets, Outcome
from ._aimd import Concurrency
from ._get import ObjectGetter

__all__ = ["DEFAULT_GATHER", "FetchRun", "Jobs", "Request", "loop_fetch"]

#: Helper threads for objects that need the blocking path (errors, throttling, odd answers).
HELPERS = 4
#: Gather answers before waiting only with at least this many requests in flight ...
GATHER_MIN = 8
#: ... for this share of the average request latency ...
GATHER_SHARE = 1 / 8
#: ... and at most this long (seconds), unless ``FetchRun.gather`` says otherwise.
DEFAULT_GATHER = 0.002


#: One GET: bytes ``[offset, offset + length)`` of ``url`` (to its end when ``length`` is ``None``;
#: ``(url, 0, None, size)`` is the whole object) and the object's ``size`` when known (a manifest's;
#: ``None``: unknown), which bounds the answer.
Request = tuple[str, int, int | None, int | None]


class Jobs(Protocol):
    """What :func:`loop_fetch` fetches, by job number."""

    def job(self, i: int) -> tuple[dict[str, Any], Sequence[tuple[str, Request]], int]:
        """``(head, parts, nbytes)`` of job ``i``: the dict its parts' bytes are stored in (under
        their field names), its parts ``(field, request)`` (at least one), and its expected size
        in bytes (for ``max_bytes``; 0 when unknown)."""
        ...


@dataclass(frozen=True)
class FetchRun:
    """What one run of :func:`loop_fetch` fetches, and within which bounds.

    Attributes:
        table: the jobs (samples and their objects, or runs of byte ranges).
        getter: the blocking path for faults (retries, resume, backoff).
        gate: requests in flight, shared with ``getter`` (AIMD on throttling).
        stop: set when the consumer stops: helper backoffs end.
        window: samples fetched ahead at most.
        max_bytes: bytes fetched ahead and not consumed at most (one sample always allowed).
        ordered: deliver in sampler order, or as samples complete.
        gather: the longest pause before a wait under load, in seconds (0: none).
    """

    table: Jobs
    getter: ObjectGetter
    gate: Concurrency
    stop: threading.Event
    window: int
    max_bytes: int
    ordered: bool = True
    gather: float = DEFAULT_GATHER


class _Sample:
    __slots__ = ("i", "left", "sample", "error", "size")

    def __init__(self, i: int, sample: dict[str, Any], left: int, size: int) -> None:
        self.i = i
        self.sample = sample
        self.left = left
        self.error: BaseException | None = None
        self.size = size


def loop_fetch(
    run: FetchRun, gets: ManyGets, indices: Iterable[int]
) -> Generator[tuple[int, dict[str, Any] | BaseException], None, None]:
    """``(i, sample or error)`` for ``indices``, fetched ahead on this thread through ``gets``
    (see the module doc); ``gets`` is paused at the end of the run, or closed when it stops early."""
    job = run.table.job
    getter, gate, stop = run.getter, run.gate, run.stop
    window, max_bytes, ordered = run.window, run.max_bytes, run.ordered
    gather = run.gather
    latency = 0.0  # moving average of a request's time to its whole answer (seconds)
    sleep, monotonic = time.sleep, time.monotonic

    stop.clear()
    helped: queue.SimpleQueue[tuple[_Sample, str, Any, BaseException | None]] = queue.SimpleQueue()
    helpers: GatedExecutor | None = None
    waiting: collections.deque[tuple[_Sample, str, Request]] = collections.deque()  # parts not sent
    pending: collections.deque[_Sample] = collections.deque()  # samples not delivered (ordered)
    ready: collections.deque[_Sample] = collections.deque()  # complete, not delivered (unordered)
    todo = iter(indices)
    exhausted = False
    count = held = 0  # samples taken and not delivered; their bytes
    fast = 0  # requests in flight in the session (each holds a slot of the gate)
    finished = False

    def help_with(record: _Sample, ext: str, request: Request) -> None:
        def run() -> None:
            url, offset, length, size = request
            try:
                result = getter.get(url, -1 if size is None else size, offset=offset, length=length)
            except BaseException as exc:  # delivered in the sample's place, as FetchAhead does
                helped.put((record, ext, None, exc))
            else:
                helped.put((record, ext, result, None))
            gets.wake()

        nonlocal helpers
        if helpers is None:
            helpers = GatedExecutor(HELPERS, thread_name_prefix="shardstream-fetch-retry")
        helpers.submit(run)

    def finish(record: _Sample, ext: str, body: Any, error: BaseException | None) -> None:
        if error is not None:
            if record.error is None:
                record.error = error
        else:
            record.sample[ext] = body
        record.left -= 1
        if not record.left and not ordered:
            ready.append(record)

    def fault(outcome: Outcome) -> None:
        """An outcome that is not OK: deliver a final error, retry anything else on a helper."""
        record, ext, request = outcome.token
        gate.release(ok=False)
        if outcome.kind == FAILED:
            finish(record, ext, None, outcome.error)
            return
        if outcome.kind == THROTTLED:
            gate.throttled()
        getter.retries += 1
        FAULTS.retry(throttled=outcome.kind == THROTTLED)  # the helper's first attempt is a retry
        help_with(record, ext, request)

    try:
        while True:
            # take samples while the window and the byte bound allow
            while not exhausted and count < window and (not count or held < max_bytes):
                i = next(todo, None)
                if i is None:
                    exhausted = True
                    break
                head, parts, size = job(i)
                record = _Sample(i, head, len(parts), size)
                count += 1
                held += size
                if ordered:
                    pending.append(record)
                for ext, request in parts:
                    waiting.append((record, ext, request))
            # send what the gate lets through
            while waiting and gate.try_acquire():
                part = waiting.popleft()
                url, offset, length, known = part[2]
                getter.requests += 1
                failed = gets.submit(part, url, offset, length, known)
                if failed is None:
                    fast += 1
                elif failed.kind == OK:  # (answered at once: an empty range)
                    gate.release(ok=True)
                    finish(part[0], part[1], failed.body, None)
                else:
                    fault(failed)
            # deliver what is complete
            if ordered:
                while pending and not pending[0].left:
                    record = pending.popleft()
                    count -= 1
                    held -= record.size
                    yield record.i, (record.error if record.error is not None else record.sample)
            else:
                while ready:
                    record = ready.popleft()
                    count -= 1
                    held -= record.size
                    yield record.i, (record.error if record.error is not None else record.sample)
            if not count:
                if exhausted:
                    finished = True  # every helper has delivered: nothing to stop
                    return
                continue  # all delivered: take the next samples before waiting
            # wait for answers (or a helper's result), gathering them under load (module doc)
            if gather and fast >= GATHER_MIN and latency:
                sleep(min(gather, latency * GATHER_SHARE))
            outcomes = gets.wait()
            now = monotonic()
            for outcome in outcomes:
                fast -= 1
                if outcome.kind == OK:
                    latency += (now - outcome.started - latency) * 0.05
                    gate.release(ok=True)
                    record, ext, _ = outcome.token
                    finish(record, ext, outcome.body, None)
                else:
                    fault(outcome)
            while True:
                try:
                    record, ext, body, error = helped.get_nowait()
                except queue.Empty:
                    break
                finish(record, ext, body, error)
    finally:
        if not finished:  # stopped early: helpers' backoffs end, requests not started are dropped
            stop.set()
        if helpers is not None:  # (before the session closes: a helper's last act is a wake)
            helpers.shutdown(wait=True, cancel_futures=True)
        if finished:
            gets.pause()  # for the next run (a DataLoader batch of a map-style dataset)
        else:
            gets.close()
        for _ in range(fast):
            gate.release(ok=False)
        if not finished:
            stop.clear()  # as FetchAhead: fetches made directly afterwards run
