"""WebDataset-compatible ``shardlists`` namespace (thin re-exports)."""

from __future__ import annotations

import itertools
from typing import Any

from ..pipeline.sampling import resampled
from ..readers.empty import non_empty
from ..readers.shardlists import (
    ResampledShards,
    SimpleShardList,
    shardspec,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from ..shards.spec import expand_urls
from ..shards.spec import expand_variables as envsubst

ResampledShardList = ResampledShards


def expand_source(source: Any, max_urls: int = int(1e9)) -> list[str]:
    """A spec string, a list of URLs or any iterable of them as a list (WebDataset's helper)."""
    if isinstance(source, str):
        return expand_urls(source)
    if isinstance(source, list):
        return source
    if isinstance(source, (bytes, dict)) or not hasattr(source, "__iter__"):
        raise ValueError(f"cannot handle {type(source)}")
    return list(itertools.islice(source, max_urls))


__all__ = [
    "ResampledShardList",
    "ResampledShards",
    "SimpleShardList",
    "envsubst",
    "expand_source",
    "expand_urls",
    "non_empty",
    "resampled",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
]
