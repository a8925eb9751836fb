"""Where this process sits: rank, world size, local rank and DataLoader worker, as a value.

:meth:`World.current` detects it (torch.distributed when initialised, else torchrun's variables,
else SLURM's, else a single process); everything else in :mod:`shardstream.shards` is arithmetic
on a ``World`` passed in, so it can be tested without processes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from ..config import launcher_env, read_settings

__all__ = ["World", "derive_seed"]


@dataclass(frozen=True)
class World:
    """Position of the current process in distributed training.

    Attributes:
        rank / world_size: global rank and number of ranks (processes with a model replica).
        local_rank / local_world_size: rank within the node and ranks per node.
        worker / num_workers: DataLoader worker id and count (0 / 1 in the main process).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank={self.rank} must be in [0, world_size={self.world_size})")
        if not 0 <= self.worker < self.num_workers:
            raise ValueError(f"worker={self.worker} must be in [0, num_workers={self.num_workers})")

    @property
    def node(self) -> int:
        return self.rank // max(self.local_world_size, 1)

    @property
    def num_nodes(self) -> int:
        return max(1, -(-self.world_size // max(self.local_world_size, 1)))

    @property
    def global_worker(self) -> int:
        """Index of this (rank, worker) among all ``world_size * num_workers`` readers."""
        return self.rank * self.num_workers + self.worker

    @property
    def total_workers(self) -> int:
        return self.world_size * self.num_workers

    def with_worker(self, worker: int, num_workers: int) -> World:
        return replace(self, worker=worker, num_workers=num_workers)

    @classmethod
    def current(cls, group: Any = None) -> World:
        """Detect the world of the calling process (see the module docstring)."""
        rank, size, local_rank, local_size = 0, 1, 0, 1
        dist_done = False
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                rank, size = dist.get_rank(group=group), dist.get_world_size(group=group)
                dist_done = True
        except ImportError:
            pass
        env = launcher_env()
        if not dist_done and env.rank is not None and env.world_size is not None:
            rank, size = env.rank, env.world_size
        if env.local_rank is not None:
            local_rank = env.local_rank
        local_size = env.local_world_size or (size if env.local_rank is None else max(1, local_size))
        if env.local_world_size is None and env.local_rank is not None:
            local_size = size  # unknown: assume one node
        worker, num_workers = 0, 1
        try:
            from torch.utils.data import get_worker_info

            info = get_worker_info()
            if info is not None:
                worker, num_workers = info.id, info.num_workers
        except ImportError:
            pass
        return cls(rank, size, local_rank, max(1, local_size), worker, num_workers)


def derive_seed(seed: int | None, *parts: object) -> int:
    """A 64-bit seed from a base seed and context parts (stable across processes and runs).

    ``None`` takes ``SHARDSTREAM_SEED`` (or ``WDS_SEED``) from the environment, else 0.
    """
    if seed is None:
        seed = read_settings().seed or 0
    digest = hashlib.blake2b(repr((seed, *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
