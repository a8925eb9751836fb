"""Which stage is which in telemetry reports: labels, and the stages in the order a pass builds them.

Labels are ``<n>:<name>``, ``n`` counting the stages in the order a pass builds them (nested
pipelines flattened), so the same label names the same stage in every process and epoch. Each
stage declares its kind and name (:attr:`Stage.kind`, :meth:`Stage.describe`); a plain callable
in a pipeline counts as a map.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..telemetry.stats import StageStats
from ._epochs import EpochOwner
from .base import Stage

__all__ = ["leaf_stages", "skip_counters", "stage_kind", "stage_label", "stage_stats"]


def stage_label(stage: Any) -> str:
    """A short human name for a stage: ``read``, ``decode``, ``map <lambda>``, ``batched``."""
    if isinstance(stage, Stage):
        return stage.describe()
    return str(getattr(stage, "__name__", None) or type(stage).__name__)  # a plain callable


def stage_kind(stage: Any) -> str:
    """The kind of work a stage does: read, decode, map, fields, batch, shuffle, shards, stage."""
    return stage.kind if isinstance(stage, Stage) else "map"  # a plain callable: a user's generator


def stage_stats(stage: Any) -> StageStats | None:
    """A stage's skip counters when it has made them (a plain callable keeps none)."""
    return stage.__dict__.get("_stats") if isinstance(stage, Stage) else None


def leaf_stages(steps: list[Any]) -> Iterator[tuple[str, Any]]:
    """``(label, stage)`` in the order a pass builds them, nested pipelines flattened."""
    k = 0

    def walk(items: list[Any]) -> Iterator[tuple[str, Any]]:
        nonlocal k
        for step in items:
            if isinstance(step, EpochOwner):  # a nested pipeline
                yield from walk(step.pipeline)
            else:
                yield f"{k}:{stage_label(step)}", step
                k += 1

    return walk(steps)


def skip_counters(steps: list[Any]) -> list[tuple[str, StageStats]]:
    """``(label, StageStats)`` of every stage that keeps skip counters."""
    found = []
    for label, stage in leaf_stages(steps):
        stats = stage_stats(stage)
        if stats is not None:
            found.append((label, stats))
    return found
