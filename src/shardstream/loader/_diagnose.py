"""Which sample kills (or stalls) a loader's workers: one worker's share run again, traced.

When a worker is lost for good (``_heal.py``: the same position lost twice, or the restarts used
up), the loader starts one sacrificial process as that worker, restored at the position its last
delivered batch left it (the restore its replacement got), with the worker's own init
(``worker_init_fn``, shardstream's setup) and its pipeline run with a trace
(``pipeline/trace.py``): every node writes each item it yields, with that item's position, to a
file, one ``write`` per line, so a line written survives the process's death. The process pulls
the items the worker would have made for the batches it owed, on one thread, with JPEGs decoded
by the decode stage itself (a loader's collation may decode them into the batch otherwise), until
it dies, stalls (no new line for the loader's bound), raises, or has made them all.

The last line names the item a node had just handed on: the next stage was making it when the
process died. Its position leads back to the reader's line for the same raw sample, which holds
the shard's URL, the sample's byte offset (the reader's position) and its key, even when the item
itself has lost its key (after ``to_tuple``). A run that does not die says so: the losses are not
tied to one sample.

Chosen over a slot the reader writes per sample in shared memory, which would name the sample
just as well but costs every sample of every run; the diagnostic run costs nothing until a
worker is lost for good, and then one worker's few batches.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import random
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import redact_url
from ..pipeline.pipeline import DataPipeline, run_in_worker
from ..pipeline.trace import BUILT
from ._watchdog import signal_name

__all__ = ["Finding", "diagnose"]

log = logging.getLogger(__name__)

#: Seconds a diagnostic run may go without a new line when the loader waits forever (bound 0).
UNBOUNDED = 60.0


@dataclass(frozen=True)
class Finding:
    """What a diagnostic run of one worker's share found.

    Attributes:
        outcome: ``"SIGKILL"`` (or another signal), ``"exit code N"``, ``"stalled"``,
            ``"raised <error>"``, or ``"ended"`` (it made every item without dying).
        sample: the sample being made when it died or stalled (``url``, ``offset``, ``key``,
            ``stage``: the stage making it), or ``None``.
        items: items the run's last stage yielded.
    """

    outcome: str
    sample: dict[str, Any] | None
    items: int

    def describe(self, worker: int) -> str:
        run = f"A diagnostic run of worker {worker}'s share from the same position"
        if self.outcome == "ended":
            return (
                f"{run} made every item of the batches it owed ({self.items}) without dying: the losses "
                "are not tied to one sample (memory that grows, a leak in a transform, an unstable "
                "store or machine)."
            )
        how = "stalled" if self.outcome == "stalled" else f"ended with {self.outcome}"
        if self.sample is None:
            return f"{run} {how} too, but named no sample (it had yielded {self.items} items)."
        s = self.sample
        at = f" at byte offset {s['offset']}" if s.get("offset") is not None else ""
        return (
            f"{run} {how} too, while {s['stage']} was making the sample with key {s['key']!r} of "
            f"shard {s['url']}{at}."
        )


def diagnose(loader: Any, epoch: int, states: list[Any], roles: list[int], slot: int) -> Finding:
    """Run worker ``slot`` of ``loader`` (a WebLoader) from ``states``/``roles`` (what its workers
    were restored with), traced, in a sacrificial process; what it found."""
    items = (int(loader.prefetch_factor or 2) + 2) * int(loader.batch_size or 1)
    bound = loader._wait_bound()
    if bound <= 0:
        bound = UNBOUNDED
    fd, path = tempfile.mkstemp(prefix="shardstream-trace-")
    os.close(fd)
    try:
        outcome, records = _traced_run(loader, epoch, states, roles, slot, path, items, bound)
    finally:
        with contextlib.suppress(OSError):  # the trace is read: nothing of the run is left
            os.unlink(path)
    ended = [r for r in records if "end" in r]
    if ended and outcome == "exit code 0":
        outcome = "ended" if ended[-1]["end"] is None else f"raised {ended[-1]['end']}"
    yielded = sum(1 for r in records if r.get("last"))
    sample = _culprit(records) if outcome != "ended" else None
    log.info(
        "diagnostic run of worker %d's share: %s, %d items, sample %s", roles[slot], outcome, yielded, sample
    )
    return Finding(outcome, sample, yielded)


def _traced_run(
    loader: Any,
    epoch: int,
    states: list[Any],
    roles: list[int],
    slot: int,
    path: str,
    items: int,
    bound: float,
) -> tuple[str, list[dict[str, Any]]]:
    """Start the sacrificial process, wait for it (see :func:`_wait`) and end it; its outcome and
    the trace it wrote into ``path``."""
    dataset, workers = loader.dataset, max(loader.num_workers, 1)
    context = loader.multiprocessing_context or multiprocessing.get_context()
    seed = random.getrandbits(32)
    dataset.restore_workers(epoch, states, roles)
    try:
        process = context.Process(
            target=_run,
            args=(dataset, slot, workers, seed, loader.worker_init_fn, path, items),
            name=f"shardstream-diagnosis-w{slot}",
            daemon=True,
        )
        process.start()
    finally:
        dataset.workers_started()
    try:
        return _wait(process, Path(path), bound), _records(Path(path))
    finally:
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGKILL)
        process.join(10)
        loader._workers_gone([process.pid])


def _wait(process: Any, path: Path, bound: float) -> str:
    """Wait for the run to end, or to write nothing for ``bound`` seconds (then it is stalled)."""
    size, since = -1, time.monotonic()
    while True:
        process.join(0.05)
        if process.exitcode is not None:
            code = int(process.exitcode)
            return signal_name(-code) if code < 0 else f"exit code {code}"
        now = path.stat().st_size
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since > bound:
            return "stalled"


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):  # a line cut short by the death
            out.append(json.loads(line))
    return out


def _culprit(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The sample being made when the run died: the last item a node handed on, named by the
    latest line with a key at the same position (see the module docstring)."""
    items = [r for r in records if "token" in r]
    if not items:
        return None
    last = items[-1]
    labels = {r["n"]: r["stage"] for r in records if "built" in r}
    after = labels.get(last["n"] + 1)
    stage = f"stage {after!r}" if after is not None else "the loader's collation"
    target = last["token"]
    for r in reversed(items):
        if "key" in r and (r is last or _same(target, r["token"])):
            url = r.get("url")
            return {
                "url": redact_url(url) if url is not None else None,
                "offset": _offset(r["token"]),
                "key": r["key"],
                "stage": stage,
            }
    return None


def _same(target: Any, token: Any) -> bool:
    """Whether position ``target`` names the sample at ``token``: the same position, or one that
    wraps it as its last element (a mixture's ``[source, pass, position]``, a batch's list)."""
    if target is None:
        return False
    if target == token:
        return True
    return (
        isinstance(target, list)
        and bool(target)
        and isinstance(target[-1], list)
        and _same(target[-1], token)
    )


def _offset(token: Any) -> int | None:
    """The byte offset in a reader's position ``[shard or piece, offset]`` (unwrapped first)."""
    while isinstance(token, list) and token and isinstance(token[-1], list):
        token = token[-1]
    if (
        isinstance(token, list)
        and len(token) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in token)
    ):
        return int(token[1])
    return None


# -- the sacrificial process ---------------------------------------------------------------------
class _Lines:
    """The trace (``pipeline/trace.py``): one JSON line per item per node, written at once."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.last = -1  # the number of the last node built: its items are the run's output

    def __call__(self, number: int, label: str, kind: str, token: Any, item: Any) -> None:
        if item is BUILT:
            self.last = max(self.last, number)
            self.write({"n": number, "stage": label, "kind": kind, "built": True})
            return
        record: dict[str, Any] = {"n": number, "token": token}
        if number == self.last:
            record["last"] = True
        if isinstance(item, dict) and "__key__" in item:
            record["key"], record["url"] = str(item["__key__"]), item.get("__url__")
        self.write(record)

    def write(self, record: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(record, default=str) + "\n").encode())


_END = object()


def _run(dataset: Any, slot: int, workers: int, seed: int, init: Any, path: str, items: int) -> None:
    """In the sacrificial process: be worker ``slot`` of ``workers`` and pull ``items`` items."""
    import torch
    from torch.utils.data._utils import worker as torch_worker

    random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    # What get_worker_info() answers in a DataLoader worker: the pipeline takes its share and
    # its restored position from it.
    torch_worker._worker_info = torch_worker.WorkerInfo(
        id=slot, num_workers=workers, seed=seed, dataset=dataset
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    lines = _Lines(fd)
    if init is not None:
        init(slot)
    if isinstance(dataset, DataPipeline):
        run_in_worker(dataset, None, fills=False, trace=lines)
    outcome: str | None = None
    try:
        it = iter(dataset)
        for _ in range(items):
            if next(it, _END) is _END:
                break
    except Exception as exc:  # a Python error: not what the loader lost the worker to
        outcome = f"{type(exc).__name__}: {exc}"
    lines.write({"end": outcome})
