"""Helpers for tests that run one pipeline in WebDataset 1.0.2 and in shardstream."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterable
from types import ModuleType
from typing import Any


def make_samples(n: int = 4) -> list[dict[str, Any]]:
    """``n`` fresh dict samples (WebDataset's ``map_dict`` changes samples in place)."""
    return [{"__key__": f"k{i}", "txt": f"text {i}".encode(), "cls": str(i).encode()} for i in range(n)]


def run(lib: ModuleType, source: list[Any], *stages: Any) -> list[Any]:
    """Everything ``lib.DataPipeline(source, *stages)`` yields.

    Both pipelines flatten a list argument into stages, so the source list goes in a list.
    """
    return list(lib.DataPipeline([source], *stages))


def outcome(lib: ModuleType, source: list[Any], *stages: Any) -> tuple[str, Any]:
    """``("ok", items)`` or ``("raised", exception)``, to compare the two libraries."""
    try:
        return "ok", run(lib, source, *stages)
    except Exception as exn:
        return "raised", exn


def assert_agree(ours: tuple[str, Any], theirs: tuple[str, Any]) -> None:
    """The same items, or an exception of WebDataset's type (ours may be a subclass)."""
    assert ours[0] == theirs[0], (ours, theirs)
    if theirs[0] == "raised":
        assert isinstance(ours[1], type(theirs[1])), (ours[1], theirs[1])
    else:
        assert ours[1] == theirs[1]


def wds_items(iterable: Iterable[Any]) -> list[Any]:
    """Everything a WebDataset pipeline over shards yields.

    WebDataset 1.0.2 leaves shard files to the garbage collector (a ResourceWarning, an error
    under this suite's warning filter): they are collected here, with that warning ignored.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        items = list(iterable)
        gc.collect()
    return items


def loader_items(dataset: Any, num_workers: int) -> list[Any]:
    """Everything a torch DataLoader over ``dataset`` yields, its workers shut down at once.

    (A DataLoader left to the garbage collector after a worker raised waits seconds for its
    workers; WebDataset's WebLoader gives no handle to shut them down.)
    """
    from torch.utils.data import DataLoader

    it = iter(DataLoader(dataset, batch_size=None, num_workers=num_workers))
    try:
        return wds_items(it)
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
