"""Epoch readers: the stages that start a pipeline, from a shard spec or a prefix to samples.

* :mod:`.shardlists`: shard lists (``SimpleShardList``, ``ResampledShards``), ``ShardShuffle``
  and the node/worker splitters;
* :mod:`.read_shards`: ``ReadShards``, samples of each shard its upstream yields;
* :mod:`.planned`: ``PlannedSamples``, this slot's runs of the epoch plan (``split="equal"`` or
  ``"exact"``), counting shards lazily (:mod:`.counts`);
* :mod:`.objects`: ``ObjectSamples``, this slot's single-sample objects, fetched ahead;
* :mod:`.elastic` and :mod:`.runs`: a saved epoch re-cut for a new world, and the node that reads
  the re-cut runs; :mod:`.elastic_mix`, the same for a mixture's sources;
* :mod:`.empty`: ``CheckEmpty`` and ``non_empty``.

Layering: builds on the stage contract (:mod:`shardstream.pipeline`), planning, the sources,
the tar and object formats; used by the datasets, the loader and the facades.
"""

from .elastic import resplit
from .elastic_mix import resplit_mixture
from .empty import CheckEmpty, non_empty
from .objects import ObjectSamples, open_table
from .planned import PlannedSamples
from .read_shards import ReadShards, ShardFormat
from .shardlists import (
    ResampledShards,
    ShardShuffle,
    SimpleShardList,
    Splitter,
    idle_worker,
    shardspec,
    single_node_only,
    split_by_node,
    split_by_worker,
)

__all__ = [
    "CheckEmpty",
    "ObjectSamples",
    "PlannedSamples",
    "ReadShards",
    "ResampledShards",
    "ShardFormat",
    "ShardShuffle",
    "SimpleShardList",
    "Splitter",
    "idle_worker",
    "non_empty",
    "open_table",
    "resplit",
    "resplit_mixture",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
]
assert sorted(__all__) == __all__
