"""Writing shards at cluster scale on Ray Data (the ``ray`` extra: ``pip install 'shardstream[ray]'``).

:func:`write_shards` turns a ``ray.data.Dataset`` of sample rows into byte-bounded,
deterministically named shards plus ``_info.json``; :func:`pack` builds that dataset from a
directory of files, a Parquet table (columns of bytes, or of URLs to fetch) or an ``s3://``
prefix. Ray is imported when one of them is called, never by ``import shardstream``; on a
cluster, ``ray.init()`` (run by Ray Data on first use) connects to ``RAY_ADDRESS``.
"""

from __future__ import annotations

from ._info import ShardSetInfo
from ._pack import pack
from ._write import write_shards

__all__ = ["ShardSetInfo", "pack", "write_shards"]
