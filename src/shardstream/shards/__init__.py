"""Planning, pure: which shards, for whom, in what order (no I/O, no formats, no stages)."""

from .plan import (
    GRANULARITIES,
    MODES,
    EpochPlan,
    batches_per_rank,
    epoch_order,
    plan_epoch,
    worker_quotas,
)
from .runs import Run
from .spec import expand_urls
from .split import split_slice, take_every
from .world import World, derive_seed

__all__ = [
    "GRANULARITIES",
    "MODES",
    "EpochPlan",
    "Run",
    "World",
    "batches_per_rank",
    "derive_seed",
    "epoch_order",
    "expand_urls",
    "plan_epoch",
    "split_slice",
    "take_every",
    "worker_quotas",
]
