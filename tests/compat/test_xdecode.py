"""``xdecode`` accepts what WebDataset 1.0.2's accepts and decodes the same way."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import webdataset as wds
from _wds_both import assert_agree, outcome, run, wds_items

import shardstream as ss
from shardstream.compat.filters import xdecode
from shardstream.errors import UnsafeOperationError


def samples() -> list[dict[str, Any]]:
    return [
        {
            "__key__": f"k{i}",
            "txt": f"text {i}".encode(),
            "json": json.dumps({"i": i}).encode(),
            "bin": b"\x00",
        }
        for i in range(3)
    ]


def read_json(stream: Any) -> Any:  # decoders read a stream, as in WebDataset
    return json.load(stream)


CASES: list[Callable[[Callable[..., Any]], Any]] = [
    lambda x: x(json=read_json),
    lambda x: x(("*.json", read_json)),
    lambda x: x(("*.json", read_json), ("*.json", lambda s: "last pair wins")),
    lambda x: x(json=False),  # False keeps the value
    lambda x: x(json=read_json, txt=lambda s: s.read().upper()),  # overrides the default *.txt
    lambda x: x(json=read_json, defaults=[]),  # no default: txt and bin have no decoder
    lambda x: x(json=read_json, defaults=[], must_decode=False),
    lambda x: x(),  # json has no decoder
    lambda x: x(must_decode=False),
    lambda x: x(("*.JSON", read_json)),  # patterns match the lower-cased name
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_xdecode_agrees(case: int) -> None:
    assert_agree(
        outcome(ss, samples(), CASES[case](xdecode)),
        outcome(wds, samples(), CASES[case](wds.filters.xdecode)),
    )


def test_fluent_xdecode_over_shards(make_shards) -> None:
    spec, _ = make_shards([3, 3])

    def pipeline(lib: ModuleType) -> Any:
        return lib.WebDataset(spec, shardshuffle=False).xdecode(cls=lambda s: int(s.read()))

    ours = [(s["__key__"], s["txt"], s["cls"]) for s in pipeline(ss)]
    assert ours == [(s["__key__"], s["txt"], s["cls"]) for s in wds_items(pipeline(wds))]
    assert all(isinstance(c, int) for _, _, c in ours)


def test_pickle_default_needs_the_opt_in() -> None:
    data = [{"__key__": "a", "pyd": pickle.dumps({"x": 1})}]
    assert run(wds, data, wds.filters.xdecode())[0]["pyd"] == {"x": 1}
    with pytest.raises(UnsafeOperationError, match="allow_pickle=True"):
        run(ss, data, xdecode())
    assert run(ss, data, xdecode(allow_pickle=True))[0]["pyd"] == {"x": 1}
