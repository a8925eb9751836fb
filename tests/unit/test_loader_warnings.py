"""WebLoader prints torch's warnings about its arguments once, not once per check."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import shardstream as ss

ShardFactory = Callable[..., tuple[str, list[str]]]


def test_more_workers_than_cores_warns_once(make_shards: ShardFactory) -> None:
    spec, keys = make_shards(counts=[3, 3, 3])
    workers = len(os.sched_getaffinity(0)) + 1  # torch's rule: more workers than usable cores
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count every call, not once per code location
        with ss.WebLoader(ss.ShardStream(spec).batched(2), batch_size=None, num_workers=workers) as loader:
            seen = [key for batch in loader for key in batch["__key__"]]
    assert sorted(seen) == sorted(keys)
    messages = [str(w.message) for w in caught if "worker processes in total" in str(w.message)]
    assert len(messages) == 1, messages
    assert f"will create {workers} worker processes" in messages[0]
