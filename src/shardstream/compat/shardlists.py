"""WebDataset-compatible ``shardlists`` namespace (thin re-exports)."""

from ..pipeline.extra import non_empty
from ..pipeline.sampling import resampled
from ..pipeline.shardlists import (
    ResampledShards,
    SimpleShardList,
    shardspec,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from ..shards.spec import expand_urls

ResampledShardList = ResampledShards

__all__ = [
    "ResampledShardList",
    "ResampledShards",
    "SimpleShardList",
    "expand_urls",
    "non_empty",
    "resampled",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
]
