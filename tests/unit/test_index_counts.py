"""``read_index``: the counts-only scan of an index gives exactly what a full JSON parse gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardstream.errors import ConfigurationError
from shardstream.tar.index import IndexEntry, read_index, read_index_entries, write_index


def _full(directory: Path) -> dict[str, int]:
    return {e["url"]: e["samples"] for e in read_index_entries(str(directory))}


def test_the_scan_matches_the_parse_on_written_indexes(tmp_path: Path) -> None:
    names = ["a-000.tar", 'quote"d.tar', "back\\slash.tar", "ünï.tar", "sp ace.tar", "b-001.tar"]
    entries = [
        IndexEntry(url=name, samples=10 * i + 1, bytes=1000, offsets=[0, 512], sizes=[512, 512])  # type: ignore[typeddict-unknown-key]
        for i, name in enumerate(names)
    ]
    write_index(str(tmp_path), entries, merge=False)
    assert read_index(str(tmp_path)) == _full(tmp_path) == {n: 10 * i + 1 for i, n in enumerate(names)}
    write_index(str(tmp_path), entries[:1] + entries[-1:], merge=False)  # no escapes: the scan
    assert read_index(str(tmp_path)) == {"a-000.tar": 1, "b-001.tar": 51}


def test_other_layouts_are_parsed_in_full(tmp_path: Path) -> None:
    data = {
        "shards": [{"samples": 5, "url": "x.tar", "bytes": 9}],
        "version": 1,
        "format": "shardstream-index",
    }
    (tmp_path / "_info.json").write_text(json.dumps(data, indent=2))
    assert read_index(str(tmp_path)) == {"x.tar": 5}
    (tmp_path / "_info.json").write_text(json.dumps({**data, "version": 9}))
    with pytest.raises(ConfigurationError, match="version 9"):
        read_index(str(tmp_path))
