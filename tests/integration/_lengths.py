"""Checks shared by the len(loader) tests: what an epoch yields against what len() said."""

from __future__ import annotations

from typing import Any


def count(loader: Any) -> tuple[int, int]:
    """(batches, samples) one epoch of ``loader`` yields; a batch's first column holds its keys
    (an item without batching holds one key)."""
    batches = samples = 0
    for batch in loader:
        keys = batch[0] if isinstance(batch[0], list | tuple) else [batch[0]]
        batches += 1
        samples += len(keys)
    return batches, samples


def check_lengths(made: dict[str, Any], what: str) -> None:
    """Every loader of ``made`` (by name; the ``items`` ones unbatched) yields, in two epochs,
    as many batches as its len() said before iterating; closes them all."""
    try:
        for name, loader in made.items():
            length = len(loader)  # before iterating, as Lightning and progress bars ask
            batches, samples = count(loader)
            assert length == batches, f"{name}: len() {length}, yielded {batches} ({what})"
            if "items" in name:
                assert length == samples
            assert count(loader)[0] == length, f"{name}: the next epoch has the same length ({what})"
    finally:
        for loader in made.values():
            loader.close()
