"""WebDataset-compatible ``shardlists`` namespace (thin re-exports)."""

from ..pipeline.extra import non_empty, resampled
from ..shards.spec import ResampledShards, SimpleShardList, expand_urls, shardspec
from ..shards.split import single_node_only, split_by_node, split_by_worker

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
