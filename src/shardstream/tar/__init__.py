"""The WebDataset tar format: reading members, grouping samples, writing shards."""

from .grouping import group_samples, split_key
from .reader import iter_members
from .samples import TarSamples, tarfile_samples, tarfile_to_samples

__all__ = [
    "TarSamples",
    "group_samples",
    "iter_members",
    "split_key",
    "tarfile_samples",
    "tarfile_to_samples",
]
