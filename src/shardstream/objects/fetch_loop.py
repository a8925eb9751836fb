"""The fetch-ahead engine for S3 objects on one thread: non-blocking sockets, no thread per request.

Same contract as :class:`~.fetch.FetchAhead` (samples in sampler order, up to ``window`` ahead
and ``max_bytes`` fetched but not consumed, delivered in order or as they complete, a failed
sample delivered as its exception), for sources that can hand out signed request bytes
(``S3Source.get_request``). The consumer's own thread writes each object's GET on a connection of
the source's lean client and reads the answers that ``epoll`` reports
(:class:`~shardstream.net.multiplex.LeanMulti`); requests in flight pass the same AIMD gate
(:class:`~._aimd.Concurrency`) as the threaded path, so a 503 SlowDown halves them.

Why: a window of threads pays for waking a thread and handing over the GIL several times per
GET; at the same window that engine costs 1.4-2.2x this loop's client CPU per sample on our
runner (``benchmarks/bench_objects.py`` compares both in one process).

Only the plain success (a 2xx with the whole body) is handled in the loop. Every other outcome
(an error status, a throttle, a cut, a timeout, a chunked answer) sends that one object to
:meth:`ObjectGetter.get <._get.ObjectGetter.get>` on a small pool of helper threads, which
retries, resumes, backs off and raises the clear error exactly as the threaded path does; so
faults keep one set of rules, and the common case pays for none of them.

Gathering answers: under load, every wake-up of this thread costs a context switch and a pass of
the loop, and with ``epoll`` reporting answers as they land, a DataLoader worker woke about once
per 1.3 answers. So while many requests are in flight (:data:`GATHER_MIN` or more), the loop
sleeps briefly before it waits, and one wake-up then collects what arrived meanwhile (and sends
their successors together, which the server handles more cheaply too). The pause is a share of
the measured request latency (:data:`GATHER_SHARE`, at most :data:`GATHER_MAX`): a request that
completes during it waits half of it on average, at most about 6% of its latency, which is all a
stream bound by latency rather than CPU can lose (a window of 34 instead of 32 makes up for it).
On our 2-core runner, where client and server share the CPU, the 2-worker stream spent about 15%
less client CPU and up to 10% less server CPU per sample, and ran 1.05-1.13x faster
(``benchmarks/bench_objects.py`` runs it with and without; shares of 1/16 to 1/4 and caps of 1-4
ms were compared, alternating in one process).

Stopping: closing the iterator sets the stop event (helper backoffs end), closes the connections
of requests in flight, gives idle ones back to the pool and joins the helper threads.
"""

from __future__ import annotations

import collections
import queue
import time
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any

from ..forks import GatedExecutor
from ..net.multiplex import borrow

if TYPE_CHECKING:
    from .reader import ObjectReader

__all__ = ["loop_fetch"]

#: Helper threads for objects that need the blocking path (errors, throttling, odd answers).
HELPERS = 4
#: Gather answers before waiting only with at least this many requests in flight ...
GATHER_MIN = 8
#: ... for this share of the average request latency ...
GATHER_SHARE = 1 / 8
#: ... and at most this long (seconds).
GATHER_MAX = 0.002


class _Sample:
    __slots__ = ("i", "left", "sample", "error", "size")

    def __init__(self, i: int, sample: dict[str, Any], left: int, size: int) -> None:
        self.i = i
        self.sample = sample
        self.left = left
        self.error: BaseException | None = None
        self.size = size


def loop_fetch(
    reader: ObjectReader, source: Any, indices: Iterable[int]
) -> Generator[tuple[int, dict[str, Any] | BaseException], None, None]:
    """``(i, sample or error)`` for ``indices``, fetched ahead on this thread (see the module doc)."""
    table = reader.table
    manifest = table.manifest
    root, keys, sizes = manifest.root, manifest.keys, manifest.sizes
    fields, names = table.fields, table.keys
    getter, gate, stop = reader.getter, reader.concurrency, reader._stop
    window, max_bytes, ordered = reader.window, reader.max_bytes, reader.ordered
    nbytes = table.nbytes
    gather = reader.gather
    latency = 0.0  # moving average of a request's time to its whole answer (seconds)
    sleep, monotonic = time.sleep, time.monotonic

    stop.clear()
    multi = borrow(source.lean)  # the loop parked by the last call, with its connections
    helped: queue.SimpleQueue[tuple[_Sample, str, Any, BaseException | None]] = queue.SimpleQueue()
    helpers: GatedExecutor | None = None
    waiting: collections.deque[tuple[_Sample, str, int]] = collections.deque()  # objects not sent
    pending: collections.deque[_Sample] = collections.deque()  # samples not delivered (ordered)
    ready: collections.deque[_Sample] = collections.deque()  # complete, not delivered (unordered)
    todo = iter(indices)
    exhausted = False
    count = held = 0  # samples taken and not delivered; their bytes
    fast = 0  # requests in flight in the loop (each holds a slot of the gate)
    finished = False

    def help_with(record: _Sample, ext: str, j: int) -> None:
        def run() -> None:
            try:
                result = getter.get(root + keys[j], sizes[j])
            except BaseException as exc:  # delivered in the sample's place, as FetchAhead does
                helped.put((record, ext, None, exc))
            else:
                helped.put((record, ext, result, None))
            multi.wake()

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

    try:
        while True:
            # take samples while the window and the byte bound allow
            while not exhausted and count < window and (not count or held < max_bytes):
                i = next(todo, None)
                if i is None:
                    exhausted = True
                    break
                parts = fields[i]
                record = _Sample(i, {"__key__": names[i], "__url__": root}, len(parts), nbytes(i))
                count += 1
                held += record.size
                if ordered:
                    pending.append(record)
                for ext, j in parts:
                    waiting.append((record, ext, j))
            # send what the gate lets through
            while waiting and gate.try_acquire():
                record, ext, j = waiting.popleft()
                try:
                    address, request = source.get_request(root + keys[j])
                except Exception:  # (a bad key or credentials): the blocking path raises it clearly
                    gate.release(ok=False)
                    help_with(record, ext, j)
                    continue
                getter.requests += 1
                failed = multi.submit((record, ext, j), address, request)
                fast += 1
                if failed is not None:
                    fast -= 1
                    gate.release(ok=False)
                    help_with(record, ext, j)
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
                sleep(min(GATHER_MAX, latency * GATHER_SHARE))
            answers = multi.wait(None)
            now = monotonic()
            for answer in answers:
                fast -= 1
                record, ext, j = answer.token
                status = answer.status
                if answer.error is None and 200 <= status < 300:
                    latency += (now - answer.sent - latency) * 0.05
                    gate.release(ok=True)
                    finish(record, ext, answer.body, None)
                    continue
                gate.release(ok=False)
                if status in (429, 503):
                    gate.throttled()
                if answer.error is not None or status >= 500 or status in (408, 429):
                    getter.retries += 1
                help_with(record, ext, j)
            while True:
                try:
                    record, ext, body, error = helped.get_nowait()
                except queue.Empty:
                    break
                finish(record, ext, body, error)
    finally:
        if not finished:  # stopped early: helpers' backoffs end, requests not started are dropped
            stop.set()
        if helpers is not None:  # (before the loop closes: a helper's last act is a wake)
            helpers.shutdown(wait=True, cancel_futures=True)
        if finished:
            multi.park()  # for the next call (a DataLoader batch of a map-style dataset)
        else:
            multi.close()
        for _ in range(fast):
            gate.release(ok=False)
        if not finished:
            stop.clear()  # as FetchAhead: fetches made directly afterwards run
