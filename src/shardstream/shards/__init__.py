"""Which shards, for whom, in what order.

``balance`` (PlannedSamples) and ``counts`` read shards, so they are imported from their modules
(``shardstream.shards.balance``) rather than here, which keeps this package free of the tar reader.
"""

from .plan import EpochPlan, Piece, plan_epoch
from .spec import ResampledShards, SimpleShardList, expand_urls, shardspec
from .split import single_node_only, split_by_node, split_by_worker, take_every
from .world import World, derive_seed

__all__ = [
    "EpochPlan",
    "Piece",
    "ResampledShards",
    "SimpleShardList",
    "World",
    "derive_seed",
    "expand_urls",
    "plan_epoch",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
    "take_every",
]
