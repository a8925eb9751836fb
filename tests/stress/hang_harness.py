"""Stress harness for forked-worker hangs under DDP (gloo), run as a script or by the slow test.

    python tests/stress/hang_harness.py --launches 50 --worlds 2,3 --hog --out hang-results

One *launch* starts W real rank processes (gloo over TCP on loopback, RANK/WORLD_SIZE set as
torchrun sets them). Each rank runs the distributed configurations one after another, as the
sweep that first caught the hang did: for split in (equal, exact) x shard index in (``_info.json``,
counted by reading the shards) x store in (local disk, HTTP, S3 on SeaweedFS), an in-process pass
(0 workers) and then a pass with 2 DataLoader workers over the same dataset object, alternately
through ``WebLoader`` and a plain ``torch.utils.data.DataLoader``. Every batch is followed by an
``all_reduce``; every pass ends with a check that all ranks saw the same number of batches.

A pass with workers whose next batch does not come within ``--timeout`` seconds is a *hang*. The
rank then writes ``dump-r<rank>-<config>.txt`` with, for each live worker: its ``/proc`` status and
threads, ``gdb -batch -ex "thread apply all bt"`` (native stacks, when gdb is installed), and its
Python stack (faulthandler on SIGUSR1, registered by the harness's ``worker_init_fn``); a
shardstream loader's own stuck-worker error, which carries the Python stack, is recorded too.
A launch with a hang ends there (the other ranks stop at their collective timeout).

With ``--hog``, one process spins on a core for the whole run. The launcher records every
process it starts (ranks, their workers and forkservers, the HTTP server, SeaweedFS, the hog) and
kills each by PID at the end, also when a launch fails or overruns ``--launch-wall``.

Output: ``OUT/launch-N/rank*.jsonl`` (one record per pass: config, workers, loader, status,
time to the first batch), ``OUT/summary.json`` (starts, forked starts, hangs, errors) and
``OUT/pids.txt`` (``pid:start time`` of every process the run saw, to check that none is left).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

SIZES = [37, 12, 55, 8, 41, 23, 60, 5, 30, 17, 46]  # samples per shard, uneven on purpose
BATCH = 8
SPLITS = ("equal", "exact")
INDEXES = ("info", "counted")
STORES = ("local", "http", "s3")
_FH_FILES: list[Any] = []


# ------------------------------------------------------------------------------------ data
def _jpeg(k: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32, 32), ((k * 7) % 256, (k * 13) % 256, (k * 29) % 256)).save(buf, "JPEG")
    return buf.getvalue()


def make_data(root: Path) -> None:
    """``root/info``: shards written by ShardWriter (with ``_info.json``); ``root/counted``: the
    same samples as plain tar files, whose counts shardstream finds by reading them."""
    import shardstream as ss

    (root / "info").mkdir(parents=True, exist_ok=True)
    (root / "counted").mkdir(parents=True, exist_ok=True)
    k = 0
    with ss.ShardWriter(str(root / "info" / "shard-%06d.tar"), maxcount=10**6) as sink:
        for s, n in enumerate(SIZES):
            if s:
                sink.next_stream()
            with tarfile.open(root / "counted" / f"shard-{s:06d}.tar", "w") as tar:
                for _ in range(n):
                    key = f"s{k:06d}"
                    sample = {"jpg": _jpeg(k), "cls": str(k % 10).encode()}
                    sink.write({"__key__": key, **sample})
                    for ext, data in sample.items():
                        info = tarfile.TarInfo(f"{key}.{ext}")
                        info.size, info.mtime = len(data), 0
                        tar.addfile(info, io.BytesIO(data))
                    k += 1


def spec_for(base: str, index: str) -> str:
    return f"{base}/{index}/shard-{{000000..{len(SIZES) - 1:06d}}}.tar"


# ------------------------------------------------------------------------------------ worker side
def worker_init(worker_id: int) -> None:
    """Register faulthandler on SIGUSR1 into a file the rank reads on a hang."""
    out = os.environ.get("HANG_FH_DIR")
    if out:
        f = open(os.path.join(out, f"fh-{os.getpid()}.txt"), "w")  # noqa: SIM115 - lives with the worker
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
        _FH_FILES.append(f)


# ------------------------------------------------------------------------------------ rank side
def _proc_summary(pid: int) -> str:
    lines = []
    try:
        with open(f"/proc/{pid}/status") as s:
            lines += [ln.rstrip() for ln in s if ln.split(":")[0] in ("Name", "State", "PPid", "Threads")]
        for t in sorted(os.listdir(f"/proc/{pid}/task")):
            try:
                comm = Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
                wchan = Path(f"/proc/{pid}/task/{t}/wchan").read_text().strip()
                state = Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(") ", 1)[1].split()[0]
            except OSError:
                comm = wchan = state = "?"
            lines.append(f"  task {t} comm={comm} state={state} wchan={wchan}")
    except OSError as exc:
        lines.append(f"  /proc unreadable: {exc}")
    return "\n".join(lines)


def dump_worker(pid: int, path: Path, fh_dir: str, label: str) -> None:
    with path.open("a") as f:
        f.write(f"===== {label} pid {pid} at {time.time():.3f}\n{_proc_summary(pid)}\n")
        f.flush()
        gdb = shutil.which("gdb")
        if gdb:
            with contextlib.suppress(Exception):
                r = subprocess.run(
                    [gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                f.write("--- gdb thread apply all bt\n" + r.stdout[-20000:] + r.stderr[-2000:] + "\n")
        fh = Path(fh_dir) / f"fh-{pid}.txt"
        if fh.exists():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR1)
                time.sleep(1.0)
                f.write("--- faulthandler (Python stack)\n" + fh.read_text() + "\n")
        else:
            f.write("--- faulthandler: the worker never ran its worker_init_fn\n")


def _loader(kind: str, dataset: Any, workers: int, timeout: float) -> Any:
    import torch.utils.data as tud

    import shardstream as ss

    kw: dict[str, Any] = {"batch_size": None, "num_workers": workers}
    if workers:
        kw.update(timeout=timeout, worker_init_fn=worker_init)
        recipe = getattr(ss, "worker_context", None)  # the documented recipe for plain DataLoaders
        if kind == "dataloader" and recipe is not None:
            kw["multiprocessing_context"] = recipe()
    return ss.WebLoader(dataset, **kw) if kind == "webloader" else tud.DataLoader(dataset, **kw)


def _workers_of(loader: Any, it: Any) -> list[int]:
    for candidate in [it, *list(getattr(loader, "_iterators", []))]:
        workers = getattr(candidate, "_workers", None)
        if workers:
            return [w.pid for w in workers if w.pid]
    return []


def _how_started(pids: list[int]) -> str:
    """ "fork" when this rank is the workers' parent, "server" when a forkserver is."""
    parents = set()
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            parents.add(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]))
    return "fork" if parents == {os.getpid()} else "server" if parents else "?"


def rank_main(a: argparse.Namespace) -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    out = Path(a.out)
    fh_dir = str(out / f"fh{rank}")
    os.makedirs(fh_dir, exist_ok=True)
    os.environ["HANG_FH_DIR"] = fh_dir
    import torch
    import torch.distributed as dist

    import shardstream as ss

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=a.timeout + 30),
    )
    bases = {"local": a.data, "http": a.http, "s3": a.s3}
    options = json.loads(a.storage_options) if a.storage_options else None
    records = (out / f"rank{rank}.jsonl").open("a")
    configs = [(sp, ix, st) for sp in SPLITS for ix in INDEXES for st in STORES if bases[st]]
    try:
        for n, (split, index, store) in enumerate(configs):
            kind = ("webloader", "dataloader")[(n + a.launch) % 2]
            name = f"{split}-{index}-{store}-{kind}"
            dataset = (
                ss.WebDataset(
                    spec_for(bases[store], index),
                    split=split,
                    batch_size=BATCH,
                    seed=a.launch,
                    storage_options=options if store == "s3" else None,
                )
                .decode()
                .to_tuple("jpg", "cls")
                .batched(BATCH)
            )
            for workers in (0, 2):
                rec: dict[str, Any] = {"rank": rank, "config": name, "workers": workers, "kind": kind}
                loader = _loader(kind, dataset, workers, a.timeout)
                start = time.monotonic()
                it: Any = None
                batches = 0
                try:
                    it = iter(loader)
                    for _batch in it:
                        if batches == 0:
                            rec["t_first"] = round(time.monotonic() - start, 3)
                            if workers:
                                rec["started"] = _how_started(_workers_of(loader, it))
                        batches += 1
                        dist.all_reduce(torch.ones(1))
                    counts = torch.tensor([batches])
                    dist.all_reduce(counts, op=dist.ReduceOp.MAX)
                    if int(counts.item()) != batches:
                        raise RuntimeError(f"{batches} batches here, {int(counts.item())} on another rank")
                    rec["status"] = "ok"
                except Exception as exc:  # noqa: BLE001 - every failure is recorded
                    _record_failure(rec, exc, workers, out / f"dump-r{rank}-{name}.txt", loader, it, fh_dir)
                finally:
                    rec["batches"] = batches
                    rec["t_total"] = round(time.monotonic() - start, 3)
                    records.write(json.dumps(rec) + "\n")
                    records.flush()
                    close = getattr(loader, "close", None)
                    if close is not None:
                        close()
                    del it, loader
                if rec["status"] != "ok":
                    _end_rank(records)  # the other ranks stop at their collective timeout
        if a.lightning:
            name = "lightning-ddp-equal-info-local"
            rec = {"rank": rank, "config": name, "workers": 2, "kind": "lightning"}
            start = time.monotonic()
            loader = make_lightning_loader(spec_for(a.data, "info"), a.timeout)
            try:
                rec["batches"] = lightning_fit(loader, world)
                rec["status"] = "ok"
            except Exception as exc:  # noqa: BLE001
                _record_failure(rec, exc, 2, out / f"dump-r{rank}-{name}.txt", loader, None, fh_dir)
            rec["t_total"] = round(time.monotonic() - start, 3)
            records.write(json.dumps(rec) + "\n")
            records.flush()
            if rec["status"] != "ok":
                _end_rank(records)
        dist.barrier()
    finally:
        records.close()
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _record_failure(
    rec: dict[str, Any], exc: Exception, workers: int, dump: Path, loader: Any, it: Any, fh_dir: str
) -> None:
    """Record a failed pass; on a hang, dump the stacks of the loader's live workers."""
    text = f"{type(exc).__name__}: {exc}"
    hang = workers > 0 and ("timed out" in text or "WorkerStuck" in text)
    rec["status"] = "hang" if hang else "error"
    rec["error"] = text[-6000:]
    if hang:
        dump.write_text(f"{text}\n")
        for pid in _workers_of(loader, it):
            if os.path.exists(f"/proc/{pid}"):
                dump_worker(pid, dump, fh_dir, f"worker of rank {rec['rank']}")


def make_lightning_loader(spec: str, timeout: float) -> Any:
    import shardstream as ss

    dataset = ss.WebDataset(spec, split="equal", batch_size=BATCH, seed=3).decode().to_tuple("jpg", "cls")
    return ss.WebLoader(
        dataset.batched(BATCH), batch_size=None, num_workers=2, timeout=timeout, worker_init_fn=worker_init
    )


def lightning_fit(loader: Any, world: int) -> int:
    """One epoch of Lightning DDP (CPU, this rank in the process group already made) over
    ``loader``; returns the number of training batches."""
    import lightning as L
    import torch

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.batches = 0

        def training_step(self, batch: Any, index: int) -> Any:
            self.batches += 1
            return self.layer(batch[1].float().view(-1, 1)).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.0)

    trainer = L.Trainer(
        accelerator="cpu",
        devices=world,
        strategy="ddp",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Model()
    trainer.fit(model, loader)
    loader.close()
    return model.batches


def _end_rank(records: Any) -> None:
    """End this rank now: a stuck worker would keep it from exiting; the launcher kills the rest."""
    records.close()
    os._exit(3)


# ------------------------------------------------------------------------------------ launcher
def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    found, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def _kill(pids: set[int]) -> None:
    for pid in sorted(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _hog(out: str) -> subprocess.Popen[bytes]:
    """A process spinning on a core (``out`` in its command line names it as the harness's)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass", "cpu-hog", out])


def identity(pid: int) -> str | None:
    """``pid:start time`` (in clock ticks since boot): names one process, even after its PID is reused."""
    try:
        return f"{pid}:{Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[19]}"
    except (OSError, IndexError):
        return None


def _record(root: Path, pids: set[int]) -> None:
    """Append the identities of ``pids`` to ``root/pids.txt``: every process the run started."""
    with (root / "pids.txt").open("a") as f:
        for pid in sorted(pids):
            if (name := identity(pid)) is not None:
                f.write(name + "\n")


def launch_once(a: argparse.Namespace, n: int, world: int, env_extra: dict[str, str]) -> None:
    """One launch of ``world`` ranks; every process seen is recorded, then killed by PID."""
    from shardstream.testing import free_port

    out = Path(a.out) / f"launch-{n:03d}-w{world}"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **env_extra, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1")
    env["MASTER_PORT"] = str(free_port())
    env["PYTHONUNBUFFERED"] = "1"
    args = [sys.executable, os.path.abspath(__file__), "--rank-run", "--out", str(out), "--launch", str(n)]
    args += ["--timeout", str(a.timeout), "--data", a.data, "--http", a.http or "", "--s3", a.s3 or ""]
    args += ["--storage-options", a.storage_options or ""]
    if not a.lightning:
        args.append("--no-lightning")
    procs = []
    for r in range(world):
        log = (out / f"rank{r}.log").open("w")
        procs.append(
            subprocess.Popen(
                args, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=log, stderr=subprocess.STDOUT
            )
        )
    seen: set[int] = {p.pid for p in procs}
    _record(Path(a.out), seen)
    deadline = time.monotonic() + a.launch_wall
    try:
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            for p in procs:
                found = set(descendants(p.pid)) - seen
                _record(Path(a.out), found)
                seen |= found
            time.sleep(0.5)
        if any(p.poll() is None for p in procs):
            with (out / "wall.txt").open("w") as f:
                alive = [p.pid for p in procs if p.poll() is None]
                f.write(f"launch overran {a.launch_wall}s; alive: {alive}\n")
    finally:
        for p in procs:
            found = set(descendants(p.pid)) - seen
            _record(Path(a.out), found)
            seen |= found
        _kill(seen)
        for p in procs:
            p.wait()


def summarize(root: Path) -> dict[str, Any]:
    recs = [json.loads(line) for f in sorted(root.glob("launch-*/rank*.jsonl")) for line in f.open()]
    forked = [r for r in recs if r["workers"] > 0]
    summary = {
        "launches": len(list(root.glob("launch-*"))),
        "starts": len(recs),
        "forked_starts": len(forked),
        "hangs": sum(r["status"] == "hang" for r in recs),
        "errors": sum(r["status"] == "error" for r in recs),
        "hung": [f"{r['rank']}:{r['config']}" for r in recs if r["status"] == "hang"],
        "error_samples": [r["error"][-400:] for r in recs if r["status"] == "error"][:3],
        "walls": len(list(root.glob("launch-*/wall.txt"))),
        "started_by": {how: sum(r.get("started") == how for r in forked) for how in ("fork", "server", "?")},
        "median_first_batch_s": sorted(r["t_first"] for r in forked if "t_first" in r)[len(forked) // 2]
        if forked
        else None,
    }
    (root / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=4)
    p.add_argument("--worlds", default="2,3", help="world sizes, used in turn")
    p.add_argument("--hog", action="store_true", help="one process spinning on a core meanwhile")
    p.add_argument("--timeout", type=float, default=40.0, help="seconds a pass waits for a batch")
    p.add_argument("--launch-wall", type=float, default=300.0)
    p.add_argument("--stores", default="local,http,s3")
    p.add_argument("--no-lightning", dest="lightning", action="store_false", help="no Lightning DDP fit")
    p.add_argument("--out", default="hang-results")
    # rank-side arguments (set by the launcher)
    p.add_argument("--rank-run", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--launch", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--data", default="", help=argparse.SUPPRESS)
    p.add_argument("--http", default="", help=argparse.SUPPRESS)
    p.add_argument("--s3", default="", help=argparse.SUPPRESS)
    p.add_argument("--storage-options", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.rank_run:
        rank_main(a)
        return 0
    return run(a)


def run(a: argparse.Namespace) -> int:
    from shardstream.testing import SeaweedS3, free_port

    root = Path(a.out).resolve()
    root.mkdir(parents=True, exist_ok=True)
    a.out = str(root)
    stores = set(a.stores.split(","))
    data = root / "data"
    make_data(data)
    a.data = str(data)
    a.http = a.s3 = ""
    a.storage_options = ""
    started: list[subprocess.Popen[bytes]] = []
    seaweed = None
    try:
        if "http" in stores:
            port = free_port()
            server = subprocess.Popen(
                [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
                + ["--directory", str(data)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            started.append(server)
            a.http = f"http://127.0.0.1:{port}"
        if "s3" in stores:
            seaweed = SeaweedS3(root / "seaweed").start()
            bucket = seaweed.create_bucket("hang")
            for path in sorted(data.rglob("*")):
                if path.is_file():
                    seaweed.upload_file(path, bucket, str(path.relative_to(data)))
            a.s3 = f"s3://{bucket}"
            a.storage_options = json.dumps(seaweed.storage_options)
        if a.hog:
            started.append(_hog(a.out))
        worlds = [int(w) for w in a.worlds.split(",")]
        if a.http:  # wait for the HTTP server to answer
            import urllib.request

            for _ in range(100):
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"{a.http}/info/_info.json", timeout=2).read()
                    break
                time.sleep(0.1)
        for n in range(a.launches):
            world = worlds[n % len(worlds)]
            launch_once(a, n, world, {})
            s = summarize(root)
            print(
                f"launch {n + 1}/{a.launches} (world {world}): starts={s['starts']} "
                f"forked={s['forked_starts']} hangs={s['hangs']} errors={s['errors']}",
                flush=True,
            )
        summary = summarize(root)
        print(json.dumps(summary), flush=True)
        return 0 if summary["hangs"] == 0 and summary["errors"] == 0 else 1
    finally:
        # Launches killed their own processes as they ended; what is left is ours now (a PID seen
        # in an earlier launch may belong to another program by now, so it is not killed here).
        mine = {proc.pid for proc in started}
        for proc in started:
            mine.update(descendants(proc.pid))
        mine.update(descendants(os.getpid()))
        _record(root, mine | ({seaweed.pid} if seaweed is not None and seaweed.pid else set()))
        _kill(mine - {seaweed.pid} if seaweed is not None and seaweed.pid else mine)
        for proc in started:
            proc.wait()
        if seaweed is not None:
            seaweed.stop()
        left = [pid for pid in descendants(os.getpid()) if _alive(pid)]
        if left:
            print(f"processes still alive after the kill: {left}", flush=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


if __name__ == "__main__":
    sys.exit(main())
