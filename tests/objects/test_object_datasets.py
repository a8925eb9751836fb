"""ObjectDataset and ObjectStream against a real S3 server (SeaweedFS): access, loaders,
shuffling, manifests, throttling and cuts, deleted objects, early stop."""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _components import require_module
from _faults import FaultProxy
from _prefix import Prefix
from _servers import SeaweedS3
from _slowdown import SlowDownProxy

import shardstream as ss
from shardstream.errors import AccessDeniedError, ShardNotFoundError
from shardstream.objects import Manifest

pytestmark = pytest.mark.s3

torch = require_module("torch", "the PyTorch DataLoader and tensor paths")


def _quiet() -> Any:
    import contextlib

    return contextlib.nullcontext()


def _check(p: Prefix, sample: dict[str, Any]) -> int:
    i = int(sample["__key__"])
    assert {k: v for k, v in sample.items() if not k.startswith("__")} == p.expected(i)
    assert sample["__url__"] == p.url
    return i


def test_map_style_and_iterable_access(samples40: Prefix) -> None:
    opts = samples40.s3.storage_options
    ds = ss.ObjectDataset(samples40.url, storage_options=opts)
    assert len(ds) == 40 and ds.keys[:2] == ["00000", "00001"]
    assert _check(samples40, ds[7]) == 7 and _check(samples40, ds[-1]) == 39
    assert [_check(samples40, s) for s in ds.__getitems__([5, 1, 30])] == [5, 1, 30]
    with pytest.raises(IndexError):
        ds[40]
    stream = ss.ObjectStream(samples40.url, storage_options=opts, shuffle=False)
    assert [_check(samples40, s) for s in stream] == list(range(40))
    tuples = list(stream.decode().to_tuple("cls", "txt").batched(8))
    assert len(tuples) == 5 and list(tuples[0][0]) == [i % 10 for i in range(8)]


def test_getitems_with_a_real_dataloader(samples40: Prefix) -> None:
    ds = ss.ObjectDataset(samples40.url, storage_options=samples40.s3.storage_options)
    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(3))
    loader = torch.utils.data.DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2)
    seen = []
    for batch in loader:
        assert len(batch["__key__"]) == 4
        for key, txt, cls in zip(batch["__key__"], batch["txt"], batch["cls"], strict=True):
            i = int(key)
            assert (txt, cls) == (samples40.expected(i)["txt"], samples40.expected(i)["cls"])
            seen.append(i)
    assert sorted(seen) == list(range(40))


def test_shuffled_epochs_cover_every_sample_once(samples40: Prefix) -> None:
    ds = ss.ObjectStream(samples40.url, storage_options=samples40.s3.storage_options, seed=5)
    pipeline = ds.to_tuple("__key__")
    loader = torch.utils.data.DataLoader(pipeline, batch_size=None, num_workers=2)
    epochs = []
    for epoch in range(2):
        pipeline.set_epoch(epoch)  # as with DistributedSampler (WebLoader advances it itself)
        epochs.append([k for (k,) in loader])
    for keys in epochs:
        assert sorted(keys) == [f"{i:05d}" for i in range(40)]
    assert epochs[0] != epochs[1]  # a new permutation every epoch
    assert epochs[0] != sorted(epochs[0])


def test_a_buffered_stream_restores_in_the_same_process_after_an_epoch(samples40: Prefix) -> None:
    """Refilling a shuffle buffer fetches samples directly: a finished stream must not leave the
    reader stopped."""
    opts = samples40.s3.storage_options

    def make() -> ss.ObjectStream:
        return ss.ObjectStream(samples40.url, storage_options=opts, seed=2).shuffle(8)

    ds = make()
    it = iter(ds)
    head = [next(it)["__key__"] for _ in range(13)]
    state = ds.state_dict()
    rest = [s["__key__"] for s in it]  # the stream ends: its fetch threads are joined
    ds.load_state_dict(state)
    assert [s["__key__"] for s in ds] == rest
    assert sorted(head + rest) == [f"{i:05d}" for i in range(40)]


def test_listing_once_and_manifest_reuse(s3_server: SeaweedS3, samples40: Prefix, tmp_path: Path) -> None:
    with SlowDownProxy(s3_server.endpoint_url) as proxy:
        opts = s3_server.options_for(endpoint_url=proxy.url)
        first = ss.ObjectStream(samples40.url, storage_options=opts, manifest_dir=str(tmp_path))
        assert proxy.lists == 1
        loader = torch.utils.data.DataLoader(first.to_tuple("__key__"), batch_size=None, num_workers=2)
        for _ in range(2):  # two epochs in two workers: no LIST anywhere
            assert len(list(loader)) == 40
        again = ss.ObjectDataset(samples40.url, storage_options=opts, manifest_dir=str(tmp_path))
        assert proxy.lists == 1 and len(again) == 40  # the saved listing was reused
        keys = tmp_path / "keys.txt"
        keys.write_text("".join(f"{i:05d}.txt\n{i:05d}.cls\n" for i in range(0, 40, 2)))
        user = ss.ObjectStream(samples40.url, storage_options=opts, manifest=str(keys), shuffle=False)
        assert [s["__key__"] for s in user] == [f"{i:05d}" for i in range(0, 40, 2)]
        inventory = tmp_path / "inventory.csv"  # bucket, key, size (sizes bound the GETs)
        sizes = {(i, e): len(samples40.expected(i)[e]) for i in range(3) for e in ("txt", "cls")}
        inventory.write_text(
            "".join(f'"{samples40.bucket}","train/{i:05d}.{e}","{n}"\n' for (i, e), n in sizes.items())
        )
        inv = ss.ObjectDataset(samples40.url, storage_options=opts, manifest=str(inventory))
        assert inv.keys == ["00000", "00001", "00002"] and _check(samples40, inv[2]) == 2
        assert proxy.lists == 1  # user manifests: zero LIST requests


def test_slowdown_bursts_and_cuts_lose_nothing(s3_server: SeaweedS3, samples40: Prefix) -> None:
    with SlowDownProxy(s3_server.endpoint_url) as proxy:
        opts = s3_server.options_for(endpoint_url=proxy.url)
        ds = ss.ObjectStream(samples40.url, storage_options=opts, seed=1, window=16)
        proxy.plans.extend(["slowdown"] * 24 + [("cut", 5), None, ("cut", 40)] + ["slowdown"] * 10)
        proxy.every_nth_slowdown = 7
        got = [_check(samples40, s) for s in ds]
        assert sorted(got) == list(range(40))  # nothing lost, nothing twice
        assert proxy.slowdowns >= 34 and proxy.cuts == 2
        assert ds.throttles == proxy.slowdowns
        assert ds.reader.concurrency.decreases >= 1 and ds.reader.concurrency.in_flight == 0


def test_bad_credentials_are_clear_and_fast(s3_server: SeaweedS3, samples40: Prefix) -> None:
    opts = {**s3_server.storage_options, "secret_access_key": "wrong-secret"}
    with pytest.raises(AccessDeniedError, match="secret access key|credentials"):
        ss.ObjectDataset(samples40.url, storage_options=opts)  # the LIST is refused
    keys = [f"{i:05d}.txt" for i in range(3)]
    ds = ss.ObjectDataset(samples40.url, storage_options=opts, manifest=keys)
    with pytest.raises(AccessDeniedError) as info:
        ds[0]
    assert "00000.txt" in str(info.value) and "403" in str(info.value)
    assert "wrong-secret" not in str(info.value)


@pytest.mark.parametrize("handler", ["reraise_exception", "warn_and_continue", "ignore_and_stop"])
def test_object_deleted_mid_epoch(s3_server: SeaweedS3, samples40: Prefix, handler: str) -> None:
    policy = getattr(ss, handler)
    ds = ss.ObjectStream(
        samples40.url, storage_options=samples40.s3.storage_options, shuffle=False, window=2, handler=policy
    )
    m = ss.ObjectDataset(samples40.url, storage_options=samples40.s3.storage_options, handler=policy)
    it = iter(ds)
    first = [_check(samples40, next(it)) for _ in range(5)]
    s3_server.client().delete_object(Bucket=samples40.bucket, Key="train/00020.cls")
    if handler == "reraise_exception":
        with pytest.raises(ShardNotFoundError, match="00020.cls") as info:
            list(it)
        assert info.value.status == 404
        return
    warns = pytest.warns(UserWarning, match="00020.cls") if handler == "warn_and_continue" else _quiet()
    with warns:
        rest = [_check(samples40, s) for s in it]
    if handler == "warn_and_continue":
        assert first + rest == [i for i in range(40) if i != 20]
    else:
        assert first + rest == list(range(20))
    assert ds.source_stage.stats.skipped == 1
    if handler == "warn_and_continue":
        with pytest.warns(UserWarning, match="00020.cls"):
            batch = m.__getitems__([19, 20, 21])  # the missing sample is replaced by the next one
        assert [s["__key__"] for s in batch] == ["00019", "00021", "00021"] and m.skipped == 1
    else:  # a map-style batch cannot end early: "stop" raises in the worker
        with pytest.raises(ShardNotFoundError, match="00020.cls"):
            m.__getitems__([19, 20, 21])


@pytest.mark.parametrize(
    ("window", "gather", "pauses"), [(32, True, True), (32, False, False), (4, True, False)]
)
def test_the_loop_gathers_answers_only_under_load(
    samples40: Prefix, monkeypatch: pytest.MonkeyPatch, window: int, gather: bool, pauses: bool
) -> None:
    from shardstream.objects import fetch_loop

    slept: list[float] = []
    real_sleep = time.sleep
    main = threading.main_thread()

    def sleep(seconds: float) -> None:
        if threading.current_thread() is main:
            slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    ds = ss.ObjectStream(
        samples40.url, storage_options=samples40.s3.storage_options, shuffle=False, window=window
    )
    ds.reader.gather = fetch_loop.DEFAULT_GATHER if gather else 0.0  # (the gather= of ObjectReader)
    assert [_check(samples40, s) for s in ds] == list(range(40))
    # with many requests in flight, the loop pauses a share of the latency before it waits
    assert bool(slept) == pauses, slept
    assert all(0 < s <= fetch_loop.DEFAULT_GATHER for s in slept)


def _fetch_threads() -> list[threading.Thread]:
    return [
        t for t in threading.enumerate() if t.name.startswith(("shardstream-fetch", "shardstream-get-many"))
    ]


@pytest.mark.parametrize("engine", ["loop", "threads"])
def test_early_stop_leaves_no_thread_or_busy_connection(
    s3_server: SeaweedS3, samples40: Prefix, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardstream.sources import SourceBase
    from shardstream.sources.s3 import S3Source

    if engine == "threads":  # the default get_many (get_into on threads), as where epoll is missing
        monkeypatch.setattr(S3Source, "get_many", SourceBase.get_many)
    before = set(_fetch_threads())  # (threads of other tests' datasets not yet collected)
    proxy = FaultProxy(s3_server.endpoint_url).start()
    try:
        opts = s3_server.options_for(endpoint_url=proxy.url)
        ds = ss.ObjectStream(samples40.url, storage_options=opts, window=8)
        it = iter(ds)
        for _ in range(3):
            next(it)
        # the loop sends every request from this thread; the other engine has a thread per request
        assert bool(set(_fetch_threads()) - before) == (engine == "threads")
        assert ds.reader.concurrency.in_flight > 0 and proxy.open_connections > 0
        it.close()  # type: ignore[attr-defined]
        assert not set(_fetch_threads()) - before
        assert ds.reader.concurrency.in_flight == 0
        source: Any = ss.sources.get_source(samples40.url, opts)
        fetching = source.whole.idle.count()  # the fetch engine's client
        idle = fetching + source.pool.idle.count()  # + the manifest read's
        # Every open connection is idle in a pool, plus botocore's for the one LIST (the proxy
        # sees the closes of connections busy at the stop a moment later); no more fetch
        # connections than requests in flight.
        assert fetching <= 8
        deadline = time.monotonic() + 5
        while proxy.open_connections > idle + 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proxy.open_connections <= idle + 1
        source.close()
        deadline = time.monotonic() + 5
        while proxy.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.open_connections == 0
    finally:
        proxy.stop()


def test_manifest_round_trip(tmp_path: Path) -> None:
    m = Manifest("s3://b/p", ["b.cls", "a.txt"], [3, 4], ['"e2"', '"e1"'])
    assert m.keys == ["a.txt", "b.cls"] and m.sizes == [4, 3] and m.root == "s3://b/p/"
    path = m.save(str(tmp_path / "m.jsonl"))
    back = ss.objects.read_manifest_file(path, "s3://b/p/")
    assert (back.keys, back.sizes, back.etags) == (m.keys, m.sizes, m.etags)
    assert collections.Counter(k.split(".")[0] for k in back.keys) == {"a": 1, "b": 1}
