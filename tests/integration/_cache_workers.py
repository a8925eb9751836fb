"""Child-process bodies for the cache integration tests (importable under spawn)."""

from __future__ import annotations

import hashlib
import random
import time
from typing import Any


def read_all(
    cache_dir: str, urls: list[str], storage_options: dict[str, Any], seed: int, barrier: Any
) -> dict[str, Any]:
    """Read every shard through the cache (in a per-process order); return digests and stats."""
    from shardstream.cache import ShardCache
    from shardstream.tar.grouping import group_samples
    from shardstream.tar.reader import iter_members

    cache = ShardCache(cache_dir, storage_options=storage_options, heartbeat=0.5, stale_after=10)
    order = list(urls)
    random.Random(seed).shuffle(order)
    barrier.wait(60)  # all processes hit the cold cache together
    digests: dict[str, str] = {}
    keys: dict[str, list[str]] = {}
    for url in order:
        stream, _ = cache(url)
        try:
            h = hashlib.sha256()
            names: list[str] = []
            for sample in group_samples(iter_members(stream, url), url):
                names.append(sample["__key__"])
                for field in sorted(k for k in sample if not k.startswith("__")):
                    h.update(sample[field])
            digests[url], keys[url] = h.hexdigest(), names
        finally:
            stream.close()
    return {"digests": digests, "keys": keys, "stats": cache.stats.as_dict()}


def fill_and_hang(
    cache_dir: str, url: str, storage_options: dict[str, Any], host: str | None, started: Any
) -> None:
    """Start a cold fill, read a little, signal, then hang until SIGKILLed."""
    from shardstream.cache import ShardCache

    cache = ShardCache(cache_dir, storage_options=storage_options, host=host, heartbeat=0.2, stale_after=1.5)
    stream, _ = cache(url)
    stream.read(1000)
    started.set()
    time.sleep(600)


def hold_open(cache_dir: str, url: str, storage_options: dict[str, Any], opened: Any, release: Any) -> None:
    """Open a shard through the cache and keep reading it slowly until told to stop."""
    from shardstream.cache import ShardCache

    cache = ShardCache(cache_dir, storage_options=storage_options, heartbeat=0.2, stale_after=1.5)
    stream, _ = cache(url)
    stream.read(100)
    opened.set()
    release.wait(120)
    while stream.read(1 << 16):
        pass
    stream.close()
