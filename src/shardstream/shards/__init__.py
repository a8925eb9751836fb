"""Which shards, for whom, in what order."""

from .spec import ResampledShards, SimpleShardList, expand_urls, shardspec
from .split import single_node_only, split_by_node, split_by_worker, take_every
from .world import World, derive_seed

__all__ = [
    "ResampledShards",
    "SimpleShardList",
    "World",
    "derive_seed",
    "expand_urls",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
    "take_every",
]
