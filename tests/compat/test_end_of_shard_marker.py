"""WebDataset 1.0.2's end-of-shard marker: its ``tar_file_expander`` yields ``{}`` after each
shard's members; shardstream's yields none unless asked (``eof_value={}``), as WebDataset 0.2.86
did not. Both group the members into the same samples, and the table of deliberate differences
(docs/migrating-from-webdataset.md) says so."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from _wds_both import wds_items

import shardstream as ss
from shardstream.compat import tariterators

DIFFERENCES = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-webdataset.md"


def two_shards(tmp_path: Path) -> list[str]:
    """Two shards whose boundary splits one key: ``same.txt`` ends the first, ``same.cls`` starts
    the second (only a shard boundary keeps them apart)."""
    urls = []
    for shard, fields in enumerate([{"txt": "a"}, {"cls": "1"}]):
        with ss.ShardWriter(str(tmp_path / f"part{shard}-%d.tar"), maxcount=10) as sink:
            sink.write({"__key__": f"k{shard}", "txt": "x"})
            sink.write({"__key__": "same", **fields})
        urls.append(str(tmp_path / f"part{shard}-0.tar"))
    return urls


def members(module: Any, urls: list[str], **kw: Any) -> list[Any]:
    items = module.tar_file_expander(module.url_opener([{"url": u} for u in urls]), **kw)
    return wds_items(items) if module.__name__.startswith("webdataset") else list(items)


def test_the_row_on_the_end_of_shard_marker_is_true(wds: ModuleType, tmp_path: Path) -> None:
    rows = [line for line in DIFFERENCES.read_text().splitlines() if line.startswith("| end of a shard")]
    assert len(rows) == 1 and "`{}`" in rows[0] and "eof_value={}" in rows[0] and "0.2.86" in rows[0]

    # WebDataset marks each shard's end; we do only when asked, with the same marker.
    urls = two_shards(tmp_path)
    theirs = members(wds.tariterators, urls)
    names = [m if m == {} else m["fname"] for m in theirs]
    assert names == ["k0.txt", "same.txt", {}, "k1.txt", "same.cls", {}]
    assert [m["fname"] for m in members(tariterators, urls)] == [n for n in names if n != {}]
    marked = members(tariterators, urls, eof_value={})
    assert [m if m == {} else m["fname"] for m in marked] == names

    # Both group the same samples, with or without the marker, the split key included.
    expected = [["k0", "txt"], ["same", "txt"], ["k1", "txt"], ["same", "cls"]]

    def samples(group: Any, items: list[Any]) -> list[list[str]]:
        return [[s["__key__"], *sorted(k for k in s if not k.startswith("__"))] for s in group(iter(items))]

    assert samples(wds.tariterators.group_by_keys, theirs) == expected
    assert samples(tariterators.group_by_keys, members(wds.tariterators, urls)) == expected  # skips {}
    assert samples(tariterators.group_by_keys, members(tariterators, urls)) == expected  # by __url__
    assert samples(wds.tariterators.group_by_keys, marked) == expected
