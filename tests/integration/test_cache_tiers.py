"""Cache tiers, fastest first: a node-local tier over a shared one, over an HTTP store.

Eight real processes on two "nodes" (each node with its own local tier directory, both sharing
one "shared filesystem" tier) read the same shards at once. The store sees one GET per shard
(the shared tier is filled once, across nodes), each local tier is filled once per shard from the
shared tier, a second epoch is served by the local tiers alone, and ``shardstream cache stats``
reports each tier's hits and misses.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

import shardstream as ss
from shardstream.cli import main
from shardstream.tar import TarWriter

SHARDS, SAMPLES = 6, 8


def _read(urls: list[str], tiers: list[str], epochs: int) -> None:
    policy = ss.CachePolicy(tiers, ["50M", None])
    for _ in range(epochs):
        keys = [
            s["__key__"] for s in ss.ShardStream(urls, shuffle_shards=False, cache=policy, read_ahead=False)
        ]
        assert len(keys) == SHARDS * SAMPLES


def test_eight_processes_two_nodes_one_store_get_per_shard(
    http_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls, paths = [], []
    for s in range(SHARDS):
        buf = io.BytesIO()
        with TarWriter(buf) as tar:
            for i in range(SAMPLES):
                tar.write({"__key__": f"{s}-{i}", "bin": os.urandom(20_000)})
        path = f"tiers/shard-{s}.tar"
        urls.append(http_server.write(path, buf.getvalue()))
        paths.append(path)
    shared = str(tmp_path / "shared")
    nodes = [str(tmp_path / "nodeA" / "cache"), str(tmp_path / "nodeB" / "cache")]
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, as separate jobs would be
    procs = [ctx.Process(target=_read, args=(urls, [nodes[k % 2], shared], 2)) for k in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert [http_server.gets(p) for p in paths] == [1] * SHARDS  # one store GET per shard

    assert main(["cache", "stats", nodes[0], nodes[1], shared, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    counters = {d: report[d]["counters"] for d in (*nodes, shared)}
    assert counters[shared]["misses"] == SHARDS  # filled once, for both nodes
    for node in nodes:
        assert counters[node]["misses"] == SHARDS  # each node's tier filled once per shard
        assert report[node]["entries"] == SHARDS
        # 4 processes x 2 epochs x 6 shards opens, less the fills: hits, lock waits included
        assert counters[node]["hits"] + counters[node]["misses"] == 4 * 2 * SHARDS, json.dumps(
            report, indent=1
        )
    # The shared tier only served the local tiers' misses (2 nodes x 6 shards), once each.
    assert counters[shared]["hits"] + counters[shared]["misses"] == 2 * SHARDS
    assert main(["cache", "stats", nodes[0], shared]) == 0
    text = capsys.readouterr().out
    assert f"tier 1: {nodes[0]}" in text and f"tier 2: {shared}" in text


def test_tier_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = ss.CachePolicy(["/a", "/b"], ["1G", -1])
    assert policy.tiers == ("/a", "/b") and policy.tier_sizes == (1 << 30, None) and policy.enabled
    assert ss.CachePolicy(["/a", "/b"], "2G").tier_sizes == (2 << 30, 2 << 30)
    with pytest.raises(ss.ConfigurationError, match="2 cache directories"):
        ss.CachePolicy(["/a", "/b"], [1, 2, 3])
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", f"/nvme/c{os.pathsep}/shared/c")
    assert ss.CachePolicy.from_env().tiers == ("/nvme/c", "/shared/c")
    assert not ss.CachePolicy().enabled and ss.CachePolicy("/x").tiers == ("/x",)
