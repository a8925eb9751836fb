"""``DirectoryShardList``: shards claimed from a directory by concurrent readers (WebDataset's feature)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import shardstream as wds
from shardstream.compat.shardlists import DirectoryShardList, get_pid_from_filename, without_last_extension

READER = textwrap.dedent(
    """
    import json, os, sys, time
    from shardstream.shardlists import DirectoryShardList

    path, out, ready, go = sys.argv[1:5]
    open(ready, "w").close()  # imported: both readers start claiming together
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.005)
    claimed = []
    for shard in DirectoryShardList(path, pattern="*.tar", mode="unlink", poll=None):
        claimed.append(shard["url"])
        shard["stream"].read()  # the consumer reads the shard
        shard["stream"].close()
        time.sleep(0.01)
    with open(out, "w") as f:
        json.dump(claimed, f)
    """
)


def make_shards(directory: Path, n: int) -> list[str]:
    names = []
    for i in range(n):
        with wds.TarWriter(str(directory / f"part-{i:04d}.tar")) as sink:
            sink.write({"__key__": f"k{i}", "cls": i})
        names.append(str(directory / f"part-{i:04d}.tar"))
    return names


def test_two_processes_share_a_directory_each_shard_read_once(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    names = make_shards(shards, 60)
    outs = [tmp_path / f"reader{i}.json" for i in range(2)]
    ready = [tmp_path / f"reader{i}.ready" for i in range(2)]
    go = tmp_path / "go"
    # A reader that imports first (a cold start compiles the package) would otherwise claim all
    # 60 shards before the other one has started.
    procs = [
        subprocess.Popen([sys.executable, "-c", READER, f"{shards}/", str(out), str(r), str(go)])
        for out, r in zip(outs, ready, strict=True)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            time.sleep(0.005)
        go.touch()
    except BaseException:
        for proc in procs:
            proc.kill()
        raise
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    claims = [json.loads(out.read_text()) for out in outs]
    originals = [[without_last_extension(url) for url in claim] for claim in claims]
    assert all(claim for claim in claims), "both readers claimed shards"
    assert sorted(originals[0] + originals[1]) == names  # every shard once, none twice
    for proc, claim in zip(procs, claims, strict=True):
        assert {get_pid_from_filename(url) for url in claim} == {proc.pid}
    assert list(shards.iterdir()) == []  # mode="unlink": read shards are removed


def test_claimed_shards_are_readable_and_recycled(tmp_path: Path) -> None:
    make_shards(tmp_path, 3)
    source = DirectoryShardList(f"{tmp_path}/", pattern="*.tar", mode="keep", poll=None, select="oldest")
    pipeline = wds.DataPipeline(source, wds.tarfile_to_samples(), wds.decode(), wds.to_tuple("cls"))
    assert sorted(pipeline) == [(0,), (1,), (2,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"part-{i:04d}.tar._done_" for i in range(3)]


def test_a_shard_claimed_by_a_dead_process_is_released(tmp_path: Path) -> None:
    make_shards(tmp_path, 2)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    pid = int(dead.stdout)
    os.rename(tmp_path / "part-0000.tar", tmp_path / f"part-0000.tar._{pid}_")
    source = DirectoryShardList(f"{tmp_path}/", pattern="*.tar", mode="resample", poll=None)
    it = iter(source)
    first = next(it)
    first["stream"].close()
    assert first["url"].endswith(f"part-0001.tar._{os.getpid()}_")
    second = next(it)  # finishing the first recycles the dead process's claim
    second["stream"].close()
    assert without_last_extension(second["url"]).endswith(("part-0000.tar", "part-0001.tar"))
    it.close()


def test_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must end with '/'"):
        DirectoryShardList(str(tmp_path))
    with pytest.raises(ValueError, match="mode="):
        DirectoryShardList(f"{tmp_path}/", mode="move")
