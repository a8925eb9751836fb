"""Collation: torch's conversion of a default-collated batch, with plain columns passed whole,
gives what ``default_convert`` gives; tuples of different lengths are refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _components import require_module

from shardstream.pipeline.batch import converted, default_collation_fn


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types, all the way down (tensors compared by value)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a).__module__ == "torch":
        return bool(a.dtype == b.dtype and a.shape == b.shape and (a == b).all())
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return bool(a == b)


BATCHES = {
    "bytes and text": [(b"\x00" * (i + 1), f"label {i}") for i in range(5)],
    "numbers and arrays": [(i, float(i) / 2, np.full((2, 3), i, np.uint8)) for i in range(4)],
    "arrays as lists": [(np.zeros(i + 1, np.int32), None) for i in range(3)],
    "dicts": [{"__key__": f"k{i}", "cls": i, "jpg": b"x", "vec": np.arange(3.0) + i} for i in range(4)],
    "mixed column": [(b"a",), (np.arange(2),), ("c",)],
    "strings array": [(np.array(["ab", "cd"]),) for _ in range(2)],
    "bools and none": [(True, None), (False, None)],
    "scalars alone": [1, 2, 3],
    "bytes alone": [b"a", b"b"],
}


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_converting_a_collated_batch_gives_what_default_convert_gives(name: str) -> None:
    torch_data = require_module("torch.utils.data", "torch's default_convert", package="torch")
    batch = default_collation_fn(BATCHES[name], combine_tensors=name != "arrays as lists")
    assert _same(converted(batch, torch_data.default_convert), torch_data.default_convert(batch))


def test_a_plain_column_is_not_converted_value_by_value() -> None:
    calls: list[Any] = []

    def convert(value: Any) -> Any:
        calls.append(value)
        return value

    batch = default_collation_fn([(b"a", "x"), (b"b", "y")])
    assert converted(batch, convert) == [[b"a", b"b"], ["x", "y"]]
    assert not calls


def test_tuples_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="tuples of different lengths"):
        default_collation_fn([(1, 2), (3,)])
