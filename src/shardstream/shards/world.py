"""Where this process sits: rank, world size, local rank and DataLoader worker, as a value.

:meth:`World.current` detects it (torch.distributed when initialised, else torchrun's variables,
else SLURM's, else a single process); everything else in :mod:`shardstream.shards` is arithmetic
on a ``World`` passed in, so it can be tested without processes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from ..config import LauncherEnv, launcher_env, read_settings

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
    def from_launcher(cls, env: LauncherEnv) -> World:
        """The world described by launcher variables (pure: no torch, no environment access).

        A missing ``LOCAL_WORLD_SIZE`` (or ``SLURM_NTASKS_PER_NODE``) means one node holds every
        rank; a missing local rank is then the global rank.
        """
        if env.rank is None or env.world_size is None:
            return cls()
        local_size = env.local_world_size or env.world_size
        local_rank = env.local_rank if env.local_rank is not None else env.rank % local_size
        return cls(env.rank, env.world_size, local_rank, local_size)

    @classmethod
    def current(cls, group: Any = None, *, override: World | None = None) -> World:
        """Detect the world of the calling process.

        Order: ``override`` (explicit, wins), else ``torch.distributed`` when initialised (local
        rank and node size still come from the launcher variables), else torchrun's
        ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``, else SLURM's
        ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``/``SLURM_NTASKS_PER_NODE``, else a
        single process. The DataLoader worker fields always come from
        :func:`torch.utils.data.get_worker_info` (an override's worker fields are ignored).

        Args:
            group: process group for ``torch.distributed`` (default: the world group).
            override: a ``World`` to use for rank, world size and local rank.
        """
        if override is not None:
            base = override
        else:
            base = cls.from_launcher(launcher_env())
            dist_rank = _dist_rank(group)
            if dist_rank is not None:
                rank, size = dist_rank
                if (rank, size) != (base.rank, base.world_size):
                    local_size = base.local_world_size if base.world_size == size else size
                    base = cls(rank, size, rank % local_size, local_size)
        worker, num_workers = _worker()
        return replace(base, worker=worker, num_workers=num_workers)


def _dist_rank(group: Any) -> tuple[int, int] | None:
    """(rank, world size) from an initialised ``torch.distributed``, else ``None``."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is installed wherever the loader is used
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group=group), dist.get_world_size(group=group)
    return None


def _worker() -> tuple[int, int]:
    """(worker id, number of workers) inside a DataLoader worker, else (0, 1)."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover
        return 0, 1
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


def derive_seed(seed: int | None, *parts: object) -> int:
    """A 64-bit seed from a base seed and context parts (stable across processes and runs).

    ``None`` takes ``SHARDSTREAM_SEED`` (or ``WDS_SEED``) from the environment, else 0.
    """
    if seed is None:
        seed = read_settings().seed or 0
    digest = hashlib.blake2b(repr((seed, *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
