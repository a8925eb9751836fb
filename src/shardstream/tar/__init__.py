"""The WebDataset tar format: reading members, grouping samples, the format reader, writing shards."""

from __future__ import annotations

from .grouping import Cursor, group_samples, split_key
from .reader import iter_members
from .samples import TarFormat
from .sharded_writer import ShardWriter
from .writer import TarWriter

__all__ = [
    "Cursor",
    "ShardWriter",
    "TarFormat",
    "TarWriter",
    "group_samples",
    "iter_members",
    "split_key",
]
