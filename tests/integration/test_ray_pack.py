"""shardstream.ray: writing byte-bounded, deterministically named shards and _info.json on Ray Data.

The plan (pure) and the install hint run in the default suite. The round trips run on one local
Ray instance per module (``ray.init(num_cpus=2)``; about 10 s to start and 10-30 s per write on
2 shared cores), so they are marked slow; the fixture checks by PID that every process Ray
started is gone after ``ray.shutdown()``.
"""

from __future__ import annotations

import gc
import io
import random
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _components import require_module

import shardstream as ss
from shardstream.errors import ConfigurationError
from shardstream.sources import open_url
from shardstream.tar.grouping import Cursor, group_samples
from shardstream.tar.index import read_index_entries
from shardstream.tar.reader import iter_members
from shardstream.tar.writer import END_OF_ARCHIVE

Samples = dict[str, dict[str, bytes]]

TARGET = 100 * 1024

# Ray warns about its own deprecated settings when its DataContext is first used.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")


# ------------------------------------------------------------------ the plan (no Ray needed)


def test_plan_cuts_sorted_samples_greedily_by_bytes() -> None:
    from shardstream.ray._plan import plan_shards, shard_of

    keys = [f"k{i:03d}" for i in range(10)]
    plan = plan_shards(keys, [1000] * 10, 1024 + 3000)
    assert [(s.first_key, s.samples, s.bytes) for s in plan] == [
        ("k000", 3, 4024),
        ("k003", 3, 4024),
        ("k006", 3, 4024),
        ("k009", 1, 2024),
    ]
    firsts = [s.first_key for s in plan]
    assert [shard_of(k, firsts) for k in keys] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]


def test_plan_gives_an_oversized_sample_its_own_shard(caplog: pytest.LogCaptureFixture) -> None:
    from shardstream.ray._plan import plan_shards

    plan = plan_shards(["a", "b", "c"], [500, 9000, 500], 4000)
    assert [s.samples for s in plan] == [1, 1, 1]
    assert "'b' alone takes 10024 bytes" in caplog.text


def test_plan_rejects_duplicate_keys_and_tiny_targets() -> None:
    from shardstream.ray._plan import plan_shards

    with pytest.raises(ConfigurationError, match="'b' occurs more than once"):
        plan_shards(["a", "b", "b"], [1, 1, 1], 10_000)
    with pytest.raises(ConfigurationError, match="shard_size=1024 is too small"):
        plan_shards(["a"], [1], 1024)


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardstream.ray import write_shards

    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    with pytest.raises(ImportError, match=r"pip install 'shardstream\[ray\]'"):
        write_shards(None, "out")


def test_import_shardstream_does_not_import_ray() -> None:
    code = "import shardstream, shardstream.ray, sys; assert 'ray' not in sys.modules, 'ray imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_list_folder_groups_files_by_key(tmp_path: Path) -> None:
    from shardstream.ray._listing import list_folder

    root = tmp_path / "d"
    (root / "x").mkdir(parents=True)
    for name in ("a.jpg", "a.cls", "x/b.seg.png", ".hidden", "README"):
        (root / name).write_bytes(b"1")
    assert list_folder(root) == {
        "a": {"cls": str(root / "a.cls"), "jpg": str(root / "a.jpg")},
        "x/b": {"seg.png": str(root / "x/b.seg.png")},
    }
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="no sample files under"):
        list_folder(tmp_path / "empty")


def test_arguments_are_checked_before_ray_runs(tmp_path: Path) -> None:
    require_module("ray.data", "writing shards on Ray (pip install 'shardstream[ray]')", package="ray[data]")
    from shardstream.ray import pack, write_shards

    out = str(tmp_path / "out")
    with pytest.raises(ConfigurationError, match="does not exist"):
        pack(str(tmp_path / "missing"), out)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("x")
    with pytest.raises(ConfigurationError, match="fetch_columns= applies to Parquet"):
        pack(str(tmp_path / "src"), out, fetch_columns={"jpg": "url"})
    with pytest.raises(ConfigurationError, match="prefix='a/b' must be a plain"):
        write_shards(None, out, prefix="a/b")
    with pytest.raises(ConfigurationError, match="'endpoint_url' apply to none of the URLs"):
        write_shards(None, out, storage_options={"endpoint_url": "http://127.0.0.1:1"})
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ helpers


def make_samples(count: int, seed: int) -> Samples:
    """Random-size payloads (100 B .. 6 KB: at most 6% of TARGET), a class, and a json on some."""
    rng = random.Random(seed)
    samples: Samples = {}
    for i in range(count):
        sample = {"bin": rng.randbytes(rng.randint(100, 6000)), "cls": str(i % 7).encode()}
        if i % 5 == 0:
            sample["json"] = b'{"i": %d}' % i
        samples[f"s{i:05d}"] = sample
    return samples


def write_folder(root: Path, samples: Samples) -> None:
    for key, fields in samples.items():
        for ext, data in fields.items():
            (root / f"{key}.{ext}").write_bytes(data)


def read_back(spec: str, storage_options: dict[str, Any] | None = None) -> Samples:
    got: Samples = {}
    for sample in ss.WebDataset(spec, shardshuffle=False, storage_options=storage_options):
        got[sample["__key__"]] = {k: v for k, v in sample.items() if not k.startswith("__")}
    return got


def check_shards(info: Any, samples: Samples, storage_options: dict[str, Any] | None = None) -> None:
    """Sizes within 10% of TARGET (but the last), the index equal to what the tar reader finds."""
    assert info.samples == len(samples)
    assert len(info.shards) >= 2
    sizes = [entry["bytes"] for entry in info.shards]
    assert all(0.9 * TARGET <= size <= TARGET for size in sizes[:-1]), sizes
    assert 0 < sizes[-1] <= TARGET
    assert read_index_entries(info.dst, storage_options=storage_options, offsets=True) == list(info.shards)
    for url, entry in zip(info.urls, info.shards, strict=True):
        with open_url(url, storage_options=storage_options) as stream:
            data = stream.read()
        assert len(data) == entry["bytes"] and data.endswith(bytes(END_OF_ARCHIVE))
        cursor = Cursor()
        offsets, keys = [], []
        for sample in group_samples(iter_members(io.BytesIO(data), url), url, cursor=cursor):
            offsets.append(cursor.start)
            keys.append(sample["__key__"])
        assert entry["samples"] == len(keys) and entry["offsets"] == offsets
        assert keys == sorted(keys)
        assert entry["extensions"]["bin"] == len(keys)


# ------------------------------------------------------------------ a local Ray instance


def _ray_processes(roots: list[Any]) -> list[Any]:
    """``roots`` and their descendants (raylet starts the workers)."""
    import psutil

    found = {p.pid: p for p in roots}
    for root in roots:
        try:
            found.update({c.pid: c for c in root.children(recursive=True)})
        except psutil.NoSuchProcess:
            pass
    return list(found.values())


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``ray.init(num_cpus=2)`` once per module; after ``ray.shutdown()`` no process it started lives."""
    import psutil

    require_module("ray.data", "writing shards on Ray (pip install 'shardstream[ray]')", package="ray[data]")
    import ray

    me = psutil.Process()
    before = {p.pid for p in me.children()}
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    # Ray's own processes (GCS, raylet, ...) are the children that ray.init() started; other
    # children of this process (the session's S3 server) are not Ray's and are left alone.
    roots = [p for p in me.children() if p.pid not in before]
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        yield ray
    finally:
        started = _ray_processes(roots)
        ray.shutdown()
        # wait_procs reaps our direct children and copes with processes that are already gone.
        _gone, alive = psutil.wait_procs(started, timeout=30)
        for proc in alive:  # stop them by PID so the session stays clean, then fail
            proc.kill()
        psutil.wait_procs(alive, timeout=5)
        assert not alive, f"Ray processes left after ray.shutdown(): {[p.pid for p in alive]}"


@pytest.mark.slow
def test_pack_folder_round_trip(ray_local: Any, tmp_path: Path) -> None:
    import webdataset

    from shardstream.ray import pack

    samples = make_samples(300, seed=1)
    src = tmp_path / "src"
    src.mkdir()
    write_folder(src, samples)
    (src / "README").write_bytes(b"no extension: skipped")
    info = pack(str(src), str(tmp_path / "out"), shard_size=TARGET)

    assert info.urls[0] == f"{tmp_path}/out/shard-000000.tar"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        ["_info.json", "_offsets", *(e["url"] for e in info.shards)]
    )
    assert read_back(info.spec) == samples
    with warnings.catch_warnings():  # WebDataset 1.0.2 leaves its shard files to the GC
        warnings.simplefilter("ignore", ResourceWarning)
        theirs = {
            s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__")}
            for s in webdataset.WebDataset(info.spec, shardshuffle=False)
        }
        gc.collect()
    assert theirs == samples
    check_shards(info, samples)


@pytest.mark.slow
def test_parquet_pack_is_deterministic(ray_local: Any, tmp_path: Path) -> None:
    """Parquet bytes + a fetched URL column; the shards read back by Ray's WebDataset reader,
    reshuffled and repartitioned, are written again with identical names and bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardstream.ray import pack, write_shards

    samples = make_samples(240, seed=2)
    keys = sorted(samples)
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    for key in keys:
        (blobs / f"{key}.bin").write_bytes(samples[key]["bin"])
    table = pa.table(
        {
            "key": keys,
            "path": [str(blobs / f"{key}.bin") for key in keys],
            "cls": [samples[key]["cls"] for key in keys],
            "json": [samples[key].get("json") for key in keys],
        }
    )
    pq.write_table(table, tmp_path / "table.parquet", row_group_size=50)

    first = pack(
        str(tmp_path / "table.parquet"),
        str(tmp_path / "a"),
        shard_size="100KiB",
        prefix="train",
        key_column="key",
        fetch_columns={"bin": "path"},
    )
    assert first.urls[0].endswith("/a/train-000000.tar")
    assert read_back(first.spec) == samples
    check_shards(first, samples)

    # Rows as Ray Data's WebDataset reader makes them, reshuffled and cut into other blocks.
    ds = ray_local.data.read_webdataset(first.urls, decoder=None).random_shuffle(seed=7).repartition(5)
    second = write_shards(ds, str(tmp_path / "b"), shard_size=TARGET, prefix="train")
    names = [e["url"] for e in first.shards]
    assert [e["url"] for e in second.shards] == names
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert second.shards == first.shards


@pytest.mark.slow
@pytest.mark.s3
def test_pack_s3_prefix_to_s3(ray_local: Any, s3_server: Any, s3_bucket: str) -> None:
    from shardstream.ray import pack

    samples = make_samples(200, seed=3)
    for key, fields in samples.items():
        for ext, data in fields.items():
            s3_server.put_object(s3_bucket, f"src/{key}.{ext}", data)
    options = s3_server.storage_options
    info = pack(f"s3://{s3_bucket}/src/", f"s3://{s3_bucket}/out", shard_size=TARGET, storage_options=options)

    assert info.urls[0] == f"s3://{s3_bucket}/out/shard-000000.tar"
    assert info.index_url == f"s3://{s3_bucket}/out/_info.json"
    assert read_back(info.spec, options) == samples
    check_shards(info, samples, options)


@pytest.mark.slow
def test_duplicate_keys_fail_before_anything_is_written(ray_local: Any, tmp_path: Path) -> None:
    from shardstream.ray import write_shards

    ds = ray_local.data.from_items([{"__key__": "a", "txt": "1"}, {"__key__": "a", "txt": "2"}])
    with pytest.raises(ConfigurationError, match="'a' occurs more than once"):
        write_shards(ds, str(tmp_path / "out"), shard_size=TARGET)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_pack_with_the_ray_engine(
    ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`shardstream pack SRC DST --engine ray` runs the same writer (on the running Ray instance)."""
    from shardstream.cli.__main__ import main

    samples = make_samples(120, seed=3)
    src = tmp_path / "src"
    src.mkdir()
    write_folder(src, samples)
    code = main(["pack", str(src), str(tmp_path / "out"), "--engine", "ray", "--shard-size", str(TARGET)])
    assert code == 0
    assert "packed 120 samples" in capsys.readouterr().out
    assert (
        read_back(
            f"{tmp_path}/out/shard-{{000000..{len(list((tmp_path / 'out').glob('*.tar'))) - 1:06d}}}.tar"
        )
        == samples
    )
    assert (tmp_path / "out" / "_info.json").exists()
