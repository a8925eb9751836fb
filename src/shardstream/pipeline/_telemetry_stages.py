"""Which stage is which for telemetry: labels, kinds, and the stages in the order a pass builds them.

Labels are ``<n>:<name>``, ``n`` counting the stages in the order a pass builds them (nested
pipelines flattened), so the same label names the same stage in every process and epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import Stage

__all__ = ["leaf_stages", "skip_counters", "stage_kind", "stage_label"]

#: Which built-in stage classes are which kind of work (class name -> kind, label).
_KINDS: dict[str, tuple[str, str]] = {
    "ReadShards": ("read", "read"),
    "PlannedSamples": ("read", "read"),
    "Decode": ("decode", "decode"),
    "_XDecode": ("decode", "xdecode"),
    "Map": ("map", "map"),
    "MapDict": ("map", "map_dict"),
    "MapTuple": ("map", "map_tuple"),
    "Select": ("map", "select"),
    "ToTuple": ("fields", "to_tuple"),
    "Rename": ("fields", "rename"),
    "Batched": ("batch", "batched"),
    "Expand": ("batch", "unbatched"),
    "_Unbatched": ("batch", "unbatched"),
    "Shuffle": ("shuffle", "shuffle"),
    "detshuffle": ("shuffle", "shuffle"),
    "SimpleShardList": ("shards", "shard list"),
    "ResampledShards": ("shards", "shard draws"),
    "ShardShuffle": ("shards", "shard shuffle"),
    "CheckEmpty": ("shards", "check empty"),
    "Splitter": ("shards", "split"),
}


def _function_name(f: Any) -> str:
    return str(getattr(f, "__name__", None) or type(f).__name__)


def stage_label(stage: Any) -> str:
    """A short human name for a stage: ``read``, ``decode``, ``map <lambda>``, ``batched``."""
    name = type(stage).__name__
    if name in _KINDS:
        label = _KINDS[name][1]
        if name == "Map":
            label = f"map {_function_name(stage.f)}"
        return label
    if name == "FunctionStage":
        return _function_name(stage.f)
    if not isinstance(stage, Stage) and callable(stage):
        return _function_name(stage)
    return name.lstrip("_")


def stage_kind(stage: Any) -> str:
    """The kind of work a stage does: read, decode, map, fields, batch, shuffle, shards, stage."""
    name = type(stage).__name__
    if name in _KINDS:
        return _KINDS[name][0]
    if name == "FunctionStage" or (not isinstance(stage, Stage) and callable(stage)):
        return "map"  # a user's generator function
    return "stage"


def leaf_stages(steps: list[Any]) -> Iterator[tuple[str, Any]]:
    """``(label, stage)`` in the order a pass builds them, nested pipelines flattened."""
    k = 0

    def walk(items: list[Any]) -> Iterator[tuple[str, Any]]:
        nonlocal k
        for step in items:
            if hasattr(step, "_build_nodes"):
                yield from walk(step.pipeline)
            else:
                yield f"{k}:{stage_label(step)}", step
                k += 1

    return walk(steps)


def skip_counters(steps: list[Any]) -> list[tuple[str, Any]]:
    """``(label, StageStats)`` of every stage that keeps skip counters."""
    found = []
    for label, stage in leaf_stages(steps):
        stats = stage.__dict__.get("_stats") if hasattr(stage, "__dict__") else None
        if stats is not None:
            found.append((label, stats))
    return found
