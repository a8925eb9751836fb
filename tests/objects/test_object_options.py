"""The fetch loop's gathering pause is an option of the object datasets (and is validated)."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardstream as ss
from shardstream.errors import ConfigurationError
from shardstream.objects.fetch_loop import DEFAULT_GATHER


@pytest.fixture
def prefix(tmp_path: Path) -> str:
    for i in range(4):
        (tmp_path / f"s{i}.txt").write_text(f"sample {i}")
        (tmp_path / f"s{i}.cls").write_text(str(i))
    return str(tmp_path) + "/"


@pytest.mark.parametrize("make", [ss.ObjectStream, ss.ObjectDataset])
def test_gather_reaches_the_reader_and_defaults_to_the_measured_pause(prefix: str, make: type) -> None:
    assert make(prefix).reader.gather == DEFAULT_GATHER
    assert make(prefix, gather=0).reader.gather == 0.0
    assert make(prefix, gather=0.005).reader.gather == 0.005


@pytest.mark.parametrize("make", [ss.ObjectStream, ss.ObjectDataset])
def test_a_negative_gather_is_refused_with_the_fix(prefix: str, make: type) -> None:
    with pytest.raises(ConfigurationError, match=r"gather=-1.*0 turns gathering off"):
        make(prefix, gather=-1)


def test_a_stream_without_gathering_yields_every_sample(prefix: str) -> None:
    ds = ss.ObjectStream(prefix, shuffle=False, gather=0)
    assert sorted(s["txt"] for s in ds) == [f"sample {i}".encode() for i in range(4)]
