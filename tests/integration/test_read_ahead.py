"""Read-ahead of remote shards (issue 12): the next shard is opened while this one is read, and
nothing about order, state, errors or early stops changes.

Against the session's SeaweedFS, through the fault proxy, which counts the GETs it forwards.
"""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import pytest

import shardstream as ss
from shardstream.errors import ShardNotFoundError
from shardstream.sources import SchemeRouter

PER_SHARD = 40


def shard_bytes(shard: int) -> bytes:
    bio = io.BytesIO()
    with ss.TarWriter(bio) as w:
        for i in range(PER_SHARD):
            w.write({"__key__": f"s{shard}_{i:03d}", "bin": bytes([i]) * 3000})
    return bio.getvalue()


@pytest.fixture
def shards(s3_server, s3_bucket) -> list[str]:
    return [s3_server.put_object(s3_bucket, f"ahead-{i}.tar", shard_bytes(i)) for i in range(3)]


def wait_until(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "shardstream-open-ahead"]


def pipeline(urls: list[str], options: dict[str, Any], **read: Any) -> ss.DataPipeline:
    """Shard list and reader only: both save their state (no replay)."""
    return ss.DataPipeline(ss.SimpleShardList(urls), ss.ReadShards(source=SchemeRouter(options), **read))


def keys(samples: Any) -> list[str]:
    return [s["__key__"] for s in samples]


def path_of(url: str) -> str:
    return url[len("s3://") :]  # path-style addressing: /bucket/key


ALL_KEYS = [f"s{s}_{i:03d}" for s in range(3) for i in range(PER_SHARD)]


@pytest.mark.s3
def test_the_next_shard_is_requested_while_this_one_is_read(s3_server, shards, fault_proxy) -> None:
    proxy = fault_proxy(s3_server.endpoint_url)
    it = iter(pipeline(shards, s3_server.options_for(endpoint_url=proxy.url)))
    assert next(it)["__key__"] == "s0_000"
    # Shard 1 is requested now, with 39 samples of shard 0 still to go; shard 2 only later.
    assert wait_until(lambda: proxy.gets(path_of(shards[1])) == 1)
    assert proxy.gets(path_of(shards[2])) == 0
    assert ["s0_000", *keys(it)] == ALL_KEYS
    assert [proxy.gets(path_of(u)) for u in shards] == [1, 1, 1]
    assert wait_until(lambda: not ahead_threads())


@pytest.mark.s3
def test_read_ahead_off_opens_each_shard_at_its_turn(s3_server, shards, fault_proxy) -> None:
    proxy = fault_proxy(s3_server.endpoint_url)
    options = s3_server.options_for(endpoint_url=proxy.url)
    it = iter(pipeline(shards, options, read_ahead=False))
    for _ in range(PER_SHARD):
        next(it)
    time.sleep(0.3)
    assert proxy.gets(path_of(shards[1])) == 0
    assert next(it)["__key__"] == "s1_000" and proxy.gets(path_of(shards[1])) == 1


@pytest.mark.s3
def test_the_shard_cache_is_not_read_ahead(s3_server, shards, fault_proxy, tmp_path) -> None:
    """Through the cache a shard opened ahead would hold its fill while another process waits
    for it: the cache reads each shard at its turn."""
    proxy = fault_proxy(s3_server.endpoint_url)
    options = s3_server.options_for(endpoint_url=proxy.url)
    ds = ss.WebDataset(shards, shardshuffle=False, cache_dir=str(tmp_path / "cache"), storage_options=options)
    it = iter(ds)
    next(it)
    time.sleep(0.3)
    assert proxy.gets(path_of(shards[1])) == 0
    assert len(list(it)) == 3 * PER_SHARD - 1


@pytest.mark.s3
@pytest.mark.parametrize("k", [0, 1, 20, 39, 40, 41, 80, 119])  # around both shard boundaries
def test_a_state_saved_with_a_shard_taken_ahead_resumes_exactly(s3_server, shards, k: int) -> None:
    options = s3_server.storage_options
    first = pipeline(shards, options)
    it = iter(first)
    head = [next(it)["__key__"] for _ in range(k)]
    state = json.loads(json.dumps(first.state_dict()))
    it.close()  # type: ignore[attr-defined]
    if 0 < k < 2 * PER_SHARD:  # a shard after this one exists: it was taken ahead
        assert state["nodes"][1].get("ahead") is True, state
    restored = pipeline(shards, options)
    restored.load_state_dict(state)
    assert head + keys(restored) == ALL_KEYS


@pytest.mark.s3
def test_a_missing_next_shard_fails_at_its_turn_not_before(s3_server, s3_bucket, shards) -> None:
    missing = f"s3://{s3_bucket}/ahead-missing.tar"
    it = iter(pipeline([shards[0], missing, shards[2]], s3_server.storage_options))
    got = []
    with pytest.raises(ShardNotFoundError, match="ahead-missing.tar"):
        for sample in it:
            got.append(sample["__key__"])
    assert got == ALL_KEYS[:PER_SHARD]  # every sample of the shard before it came first


@pytest.mark.s3
def test_an_early_stop_cancels_an_open_still_in_progress(s3_server, shards, fault_proxy) -> None:
    """The shard opened ahead hangs (its response is stalled): breaking out of the loop does not
    wait for it, and its thread closes its connection once the open ends."""
    from _faults import Stall

    proxy = fault_proxy(s3_server.endpoint_url)
    proxy.plan(None, Stall(after=0, seconds=6.0))  # connection 2: the open of shard 1, ahead
    it = iter(pipeline(shards, s3_server.options_for(endpoint_url=proxy.url)))
    assert next(it)["__key__"] == "s0_000"
    assert wait_until(lambda: proxy.connections >= 2)
    started = time.monotonic()
    it.close()  # type: ignore[attr-defined]
    assert time.monotonic() - started < 4.5  # not the 6 s stall (generous for a loaded machine)
    assert wait_until(lambda: not ahead_threads(), timeout=30)
    assert wait_until(lambda: proxy.open_connections == 0)


@pytest.mark.s3
@pytest.mark.parametrize("mode", ["equal", "exact"])
def test_the_epoch_planner_opens_the_next_piece_ahead_and_reads_the_same(
    s3_server, shards, fault_proxy, mode: str
) -> None:
    proxy = fault_proxy(s3_server.endpoint_url)
    options = s3_server.options_for(endpoint_url=proxy.url)
    counts = {url: PER_SHARD for url in shards}

    def planned(read_ahead: bool) -> ss.DataPipeline:
        stage = ss.PlannedSamples(
            shards, mode=mode, batch_size=7, shuffle=False, index=counts,
            storage_options=options, read_ahead=read_ahead,
        )  # fmt: skip
        return ss.DataPipeline(stage)

    without = keys(planned(False))
    proxy.clear()
    it = iter(planned(True))
    first = next(it)["__key__"]
    assert wait_until(lambda: proxy.gets(path_of(shards[1])) == 1)  # the next piece's shard
    assert proxy.gets(path_of(shards[2])) == 0
    assert [first, *keys(it)] == without
    # exact: the padding piece reads the start of shard 0 once more
    assert [proxy.gets(path_of(u)) for u in shards] == ([1, 1, 1] if mode == "equal" else [2, 1, 1])
    assert len(without) == (119 if mode == "equal" else 126)  # 17 batches of 7; 18 with padding
    assert wait_until(lambda: not ahead_threads())


@pytest.mark.parametrize("store", ["gcs", "azure", "hf"])
def test_the_router_opens_ahead_on_every_object_store(
    store: str, request: pytest.FixtureRequest, tmp_path
) -> None:
    # The router asks the scheme's source (its declared ``opens_ahead``), not a list of schemes:
    # gs://, az:// and hf:// shards are opened ahead like s3:// ones; local files are not.
    data = shard_bytes(7)
    if store == "gcs":
        server = request.getfixturevalue("gcs_server")
        url, options = server.put_object(server.create_bucket("ahead"), "a.tar", data), server.storage_options
    elif store == "azure":
        server = request.getfixturevalue("azurite_server")
        url, options = (
            server.put_blob(server.create_container("ahead"), "a.tar", data),
            server.storage_options,
        )
    else:
        server = request.getfixturevalue("hub_server")
        server.add_file("ahead/repo", "a.tar", data)
        url, options = "hf://datasets/ahead/repo/a.tar", {"endpoint": server.endpoint, "token": False}
    router = SchemeRouter(options)
    pending = router.open_ahead(url)
    assert pending is not None
    with pending.result() as stream:
        assert stream.read() == data
    local = tmp_path / "a.tar"
    local.write_bytes(data)
    assert router.open_ahead(str(local)) is None
    assert wait_until(lambda: not ahead_threads())
