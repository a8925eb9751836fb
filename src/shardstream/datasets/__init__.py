"""The front doors: the datasets users construct.

* :class:`Dataset` (:mod:`.dataset`): shards from a spec, with a split and a cache policy;
* :class:`ObjectStream` (:mod:`.object_stream`): an iterable dataset over single-sample objects;
* :class:`ObjectDataset` (:mod:`.object_dataset`): the map-style dataset over the same objects;
* :class:`Mix` (:mod:`.mix`): several datasets interleaved in set proportions, resumably;
* :class:`ShardDataset` (:mod:`.shard_dataset`): the map-style dataset over tar shards, by byte range;
* :class:`SplitPolicy`, :class:`CachePolicy` (:mod:`.policy`): validated, frozen options.

Layering: builds on everything below (readers, stages, cache, sources, formats); used by the
loader's users and the facades.
"""

from .dataset import Dataset, make_source
from .mix import Mix
from .object_dataset import ObjectDataset
from .object_stream import ObjectStream
from .policy import CachePolicy, SplitPolicy
from .shard_dataset import ShardDataset

__all__ = [
    "CachePolicy",
    "Dataset",
    "Mix",
    "ObjectDataset",
    "ObjectStream",
    "ShardDataset",
    "SplitPolicy",
    "make_source",
]
