"""Fault injection, by hand: kill a writer, rewrite shards under a checkpoint, fill a small disk.

``python tests/fault_injection.py`` runs the three faults against real processes and files and
prints, for each, what happened and the error or warning shardstream gave; it exits non-zero
when one of them did not end as expected. ``tests/integration/test_fault_script.py`` runs it in
the suite; the detailed cases are in ``test_writer_faults.py``, ``test_rewritten_shards.py`` and
``test_cache_full.py``.

1. A ``ShardWriter`` process is killed (SIGKILL) in the middle of its fourth shard: the three
   finished shards are whole, no shard is left under the fourth name, and they read cleanly.
2. A dataset is checkpointed 370 samples into an epoch, its shards are rewritten under the same
   names, and the checkpoint is restored: a ``StateError`` names the shard and the offset.
3. A cache lives on a 1 MiB tmpfs (or, where mounting is not allowed, under a 300 kB file-size
   limit) while 2.4 MB of shards are read through it over HTTP: every sample arrives, one warning
   names the cache directory, and no partial entry is left.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent / "integration"
sys.path.insert(0, str(HERE))

import shardstream as ss  # noqa: E402
from shardstream.errors import StateError  # noqa: E402
from shardstream.tar import ShardWriter, TarWriter  # noqa: E402


def killed_writer(root: Path) -> str:
    pattern = str(root / "shard-%06d.tar")
    proc = subprocess.Popen([sys.executable, str(HERE / "_writer_child.py"), pattern, "{}", "slow"])
    deadline = time.monotonic() + 60
    while not (root / "shard-000002.tar").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError("the writer made no progress")
        time.sleep(0.01)
    time.sleep(0.08)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    names = sorted(os.listdir(root))
    final = [n for n in names if n.endswith(".tar")]
    assert final == [f"shard-00000{k}.tar" for k in range(3)], names
    keys = [s["__key__"] for s in ss.ShardStream([str(root / n) for n in final], shuffle_shards=False)]
    assert len(keys) == 150
    hidden = [n for n in names if ".partial~" in n]
    return f"killed in shard 3: shards 0-2 whole (150 samples read), no shard-000003.tar; hidden: {hidden}"


def rewritten_shards(root: Path) -> str:
    def write(payload: int) -> list[str]:
        with ShardWriter(str(root / "s-%02d.tar"), maxcount=200) as sink:
            for i in range(1000):
                sink.write({"__key__": f"{payload}-{i:04d}", "txt": "x" * (payload + i % 7)})
        return [str(root / f"s-{k:02d}.tar") for k in range(5)]

    urls = write(100)
    ds = ss.ShardStream(urls, seed=1)
    it = iter(ds)
    for _ in range(370):
        next(it)
    state = json.loads(json.dumps(ds.state_dict()))
    write(150)
    resumed = ss.ShardStream(urls, seed=1)
    resumed.load_state_dict(state)
    try:
        list(resumed)
    except StateError as exc:
        return f"StateError: {exc}"
    raise AssertionError("a checkpoint over rewritten shards was restored without an error")


def small_disk(root: Path) -> str:
    from _servers import HTTPFileServer

    server = HTTPFileServer(root / "http").start()
    try:
        urls = []
        for s in range(4):
            buf = io.BytesIO()
            with TarWriter(buf) as tar:
                for i in range(6):
                    tar.write({"__key__": f"{s}-{i}", "txt": f"{s}-{i}", "bin": os.urandom(100_000)})
            urls.append(server.write(f"d/shard-{s}.tar", buf.getvalue()))
        mount = root / "small"
        mount.mkdir()
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
        )
        fsize = None if mounted.returncode == 0 else 300_000
        job = {"urls": urls, "cache_dir": str(mount), "cache_size": None, "fsize": fsize}
        (root / "job.json").write_text(json.dumps(job))
        try:
            subprocess.run(
                [
                    sys.executable,
                    str(HERE / "_cache_full.py"),
                    str(root / "job.json"),
                    str(root / "out.json"),
                ],
                check=True,
                cwd=HERE,
            )
        finally:
            if mounted.returncode == 0:
                subprocess.run(["umount", "-l", str(mount)], check=False)
        out = json.loads((root / "out.json").read_text())
        assert all(len(epoch) == 24 for epoch in out["keys"]), out["keys"]
        warnings = [w for w in out["warnings"] if "has no room" in w]
        assert len(warnings) == 1, out["warnings"]
        how = "a 1 MiB tmpfs" if fsize is None else "a 300 kB file-size limit (tmpfs not mountable here)"
        return f"{how}: 24 samples in each of 2 epochs; warning: {warnings[0]}"
    finally:
        server.stop()


def main() -> int:
    failed = 0
    for name, fault in (
        ("kill a writer", killed_writer),
        ("rewrite shards", rewritten_shards),
        ("fill a small disk", small_disk),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                print(f"[ok]   {name}: {fault(Path(tmp))}")
            except Exception as exc:
                failed += 1
                print(f"[FAIL] {name}: {type(exc).__name__}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
