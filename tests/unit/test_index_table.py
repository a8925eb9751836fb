"""The index's counts table and the per-shard offsets sidecars (``tar.index``, ``tar.offsets``).

Round trips through the writers, the fast aligned lookup against the per-URL one, older indexes
(inline offsets, no table) still read, and truncated or corrupt files named with the fix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import braceexpand
import numpy as np
import pytest

import shardstream as ss
from shardstream.errors import IndexFormatError
from shardstream.readers.counts import clear_cache, shard_count_array, shard_counts
from shardstream.shards.spec import expand_urls
from shardstream.tar._names import BraceNames, ListNames, brace_of
from shardstream.tar.index import (
    CountTable,
    IndexEntry,
    read_count_table,
    read_index,
    read_index_entries,
    write_index,
)
from shardstream.tar.offsets import decode_sidecar, encode_sidecar, sidecar_url


def _write(directory: Path, shards: int = 3, per_shard: int = 7, pattern: str = "part-%06d.tar") -> list[str]:
    with ss.ShardWriter(str(directory / pattern), maxcount=per_shard) as sink:
        for i in range(shards * per_shard):
            sink.write({"__key__": f"k{i:05d}", "txt": "t" * (i * 131 % 1900), "cls": i})
    return [str(directory / (pattern % k)) for k in range(shards)]


def _entries(names: list[str], counts: list[int]) -> list[IndexEntry]:
    return [IndexEntry(url=n, samples=c, bytes=-1) for n, c in zip(names, counts, strict=True)]


# -- format round trip -------------------------------------------------------------------------------


def test_writer_index_has_a_head_a_brace_table_and_sidecars(tmp_path: Path) -> None:
    urls = _write(tmp_path, shards=3, per_shard=7)
    raw = (tmp_path / "_info.json").read_bytes()
    first = raw.split(b"\n", 1)[0]
    head = int(json.loads(first.rstrip(b",") + b"}")["head"])
    assert raw[head - 2 : head + 12] == b',\n "shards": ['
    table = json.loads(raw[: head - 2] + b"}")["table"]
    assert table["brace"] == "part-{000000..000002}.tar" and table["sidecars"] is True
    data = json.loads(raw)  # still one JSON object, entries without inline offsets
    assert [e["url"] for e in data["shards"]] == [Path(u).name for u in urls]
    assert all(e["sidecar"] is True and "offsets" not in e for e in data["shards"])
    counts = read_count_table(str(tmp_path))
    assert isinstance(counts.names, BraceNames) and dict(counts) == {Path(u).name: 7 for u in urls}
    assert read_index(str(tmp_path)) == dict(counts)
    # The sidecars hold what the writer recorded: each range is its sample.
    for entry in read_index_entries(str(tmp_path), offsets=True):
        sidecar = tmp_path / "_offsets" / f"{entry['url']}.bin"
        assert sidecar.stat().st_size == 16 + 16 * 7
        offsets, sizes = decode_sidecar(str(sidecar), sidecar.read_bytes(), 7)
        assert offsets.tolist() == entry["offsets"] and sizes is not None and sizes.tolist() == entry["sizes"]
        assert sum(entry["sizes"]) + 1024 == entry["bytes"]


def test_names_that_are_not_one_series_are_listed(tmp_path: Path) -> None:
    counts = {"a.tar": 3, "b-1.tar": 1, "sp ace.tar": 4, "ünï.tar": 1, 'q"uote.tar': 5}
    write_index(str(tmp_path), _entries(list(counts), list(counts.values())), merge=False)
    table = read_count_table(str(tmp_path))
    assert isinstance(table.names, ListNames) and table["sp ace.tar"] == 4 and "zz.tar" not in table
    assert read_index(str(tmp_path)) == counts == dict(table)
    assert brace_of(["s-000.tar", "s-001.tar", "s-003.tar"]) is None  # a gap
    assert brace_of(["s-8.tar", "s-9.tar", "s-10.tar"]) is None  # widths differ
    assert brace_of(["s-08.tar", "s-09.tar", "s-10.tar"]).brace() == "s-{08..10}.tar"  # type: ignore[union-attr]


def test_the_aligned_lookup_agrees_with_the_per_url_one(tmp_path: Path) -> None:
    n = 3000
    counts = [(i * 7919) % 1000 for i in range(n)]
    for names in ([f"{i:05d}.tar" for i in range(n)], sorted(f"x{i}.tar" for i in range(n))):
        write_index(str(tmp_path), _entries(names, counts), merge=False)
        table = read_count_table(str(tmp_path))
        expected = dict(zip(names, counts, strict=True))
        urls = [f"{tmp_path}/{name}" for name in names]
        for part in (urls, urls[1234:2100], urls[-1:], urls[:1]):
            got = table.counts_for(part)
            assert got is not None and got.tolist() == [expected[u.rpartition("/")[2]] for u in part]
        # Not a run of the table: None, and shard_counts looks the URLs up one by one.
        clear_cache()
        for part in (urls[::-1], urls[:10] + urls[20:30], [*urls[:5], f"{tmp_path}/other/{names[5]}"]):
            assert table.counts_for(part) is None
        shuffled = urls[::7] + urls[1::7]
        assert shard_counts(shuffled) == [expected[u.rpartition("/")[2]] for u in shuffled]
        array = shard_count_array(urls)
        assert array.dtype == np.int64 and array.tolist() == counts
        assert shard_counts(urls) == counts and isinstance(shard_counts(urls), list)


def test_index_text_is_rewritten_by_another_tool_then_parsed_in_full(tmp_path: Path) -> None:
    _write(tmp_path, shards=2, per_shard=4)
    info = tmp_path / "_info.json"
    data = json.loads(info.read_text())
    data["shards"][1]["samples"] = 3  # the entries are the truth; the table is now stale
    info.write_text(json.dumps(data, indent=2))
    assert dict(read_count_table(str(tmp_path))) == {"part-000000.tar": 4, "part-000001.tar": 3}
    info.write_text(json.dumps(data))
    assert read_index(str(tmp_path)) == {"part-000000.tar": 4, "part-000001.tar": 3}


# -- older indexes -----------------------------------------------------------------------------------


def test_an_index_with_inline_offsets_is_still_read_and_migrates_on_rewrite(tmp_path: Path) -> None:
    urls = _write(tmp_path, shards=3, per_shard=5)
    entries = read_index_entries(str(tmp_path), offsets=True)
    # The layout of the previous release: no head, offsets and sizes inline.
    lines = ",\n  ".join(json.dumps(dict(e)) for e in entries)
    (tmp_path / "_info.json").write_text(
        f'{{"format": "shardstream-index", "version": 1, "shards": [\n  {lines}\n]}}\n'
    )
    os.rename(tmp_path / "_offsets", tmp_path / "_offsets.old")  # only the inline offsets remain
    assert read_index(str(tmp_path)) == {Path(u).name: 5 for u in urls}
    table = read_count_table(str(tmp_path))
    assert table.sidecars is None and table.counts_for(urls) is not None
    assert read_index_entries(str(tmp_path)) == entries
    assert shard_counts(urls) == [5, 5, 5]
    ds = ss.ShardDataset(urls)
    streamed = list(ss.ShardStream(urls, shuffle_shards=False, cache=None))
    assert ds.__getitems__([14, 0, 6]) == [streamed[14], streamed[0], streamed[6]]
    # Rewriting the index (here: adding a shard) moves every inline offset to a sidecar.
    more = _write(tmp_path, shards=1, per_shard=2, pattern="val-%06d.tar")
    assert sorted(os.listdir(tmp_path / "_offsets")) == sorted(f"{Path(u).name}.bin" for u in urls + more)
    assert "offsets" not in (tmp_path / "_info.json").read_text()
    assert read_index_entries(str(tmp_path), offsets=True)[:3] == entries


# -- truncated, corrupt, missing ---------------------------------------------------------------------


def _fix(tmp_path: Path) -> str:
    return f"shardstream index {tmp_path}"


def test_a_truncated_index_is_an_error_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    urls = _write(tmp_path, shards=3, per_shard=4)
    info = tmp_path / "_info.json"
    raw = info.read_bytes()
    head = raw.index(b'\n "shards"')
    info.write_bytes(raw[: head // 2])  # cut inside the counts table
    for read in (read_count_table, read_index, read_index_entries):
        with pytest.raises(IndexFormatError, match="truncated") as err:
            read(str(tmp_path))
        assert str(info) in str(err.value) and _fix(tmp_path) in str(err.value)
    clear_cache()
    with pytest.raises(IndexFormatError, match="truncated"):  # not a silent counting pass
        shard_counts(urls)
    with pytest.raises(IndexFormatError, match="truncated"):
        ss.ShardDataset(urls)
    info.write_bytes(raw[: head + 40])  # cut after the table: the counts are all there
    assert shard_counts(urls) == [4, 4, 4]
    with pytest.raises(IndexFormatError, match="not valid JSON") as err:
        read_index_entries(str(tmp_path))
    assert str(info) in str(err.value) and _fix(tmp_path) in str(err.value)


def test_a_corrupt_counts_table_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path, shards=2, per_shard=4)
    info = tmp_path / "_info.json"
    raw = info.read_bytes()
    start = raw.index(b'"samples": "') + len(b'"samples": "')
    info.write_bytes(raw[:start] + b"!" + raw[start + 1 :])  # same length: not base64 any more
    with pytest.raises(IndexFormatError, match="corrupt counts table") as err:
        read_count_table(str(tmp_path))
    assert str(info) in str(err.value) and _fix(tmp_path) in str(err.value)


def test_sidecars_missing_or_corrupt_are_errors_naming_them(tmp_path: Path) -> None:
    urls = _write(tmp_path, shards=3, per_shard=4)
    ds = ss.ShardDataset(urls, handler=ss.ignore_and_continue)
    first = Path(sidecar_url(str(tmp_path), "part-000001.tar"))
    first.unlink()
    with pytest.raises(IndexFormatError, match="does not exist") as err:
        ds[5]
    message = str(err.value)
    assert str(first) in message and "Copy it too" in message and _fix(tmp_path) in message
    second = Path(sidecar_url(str(tmp_path), "part-000002.tar"))
    second.write_bytes(second.read_bytes()[:-8])
    with pytest.raises(IndexFormatError, match="truncated") as err:
        ds[9]
    assert str(second) in str(err.value) and _fix(tmp_path) in str(err.value)
    zero = Path(sidecar_url(str(tmp_path), "part-000000.tar"))
    offsets, sizes = decode_sidecar(str(zero), zero.read_bytes(), 4)
    zero.write_bytes(encode_sidecar(offsets.tolist()[:3], None if sizes is None else sizes.tolist()[:3]))
    with pytest.raises(IndexFormatError, match="lists 3 samples but the index counts 4"):
        ds[0]
    zero.write_bytes(b"PK\x03\x04" + bytes(60))
    with pytest.raises(IndexFormatError, match="is not a shardstream offsets sidecar"):
        ds[0]


# -- lazy reads --------------------------------------------------------------------------------------


class _Fetches:
    """Records the requests ShardDataset's index makes for sidecars."""

    def __init__(self, ds: Any) -> None:
        self.urls: list[str] = []
        read = ds.reader.read

        def recording(requests: list[tuple[str, int, int]], **kw: Any) -> Any:
            if kw.get("keep") is False:
                self.urls.extend(u for u, _, _ in requests)
            return read(requests, **kw)

        ds.reader.read = recording


def test_offsets_are_read_once_per_shard_touched(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    urls = _write(tmp_path, shards=4, per_shard=6)
    with caplog.at_level(logging.WARNING, logger="shardstream"):
        ds = ss.ShardDataset(urls)
    assert not caplog.text  # no indexing pass
    fetches = _Fetches(ds)
    streamed = list(ss.ShardStream(urls, shuffle_shards=False, cache=None))
    assert ds[13] == streamed[13]
    assert fetches.urls == [sidecar_url(str(tmp_path), "part-000002.tar")]
    assert ds.__getitems__([12, 17, 0, 23, 1]) == [streamed[i] for i in (12, 17, 0, 23, 1)]
    assert fetches.urls[1:] == [sidecar_url(str(tmp_path), n) for n in ("part-000000.tar", "part-000003.tar")]
    assert ds.lengths == [6, 6, 6, 6] and len(ds) == 24
    # A pickled copy (a DataLoader worker) reads its own.
    import pickle

    copy = pickle.loads(pickle.dumps(ds))
    assert copy[7] == streamed[7]


def test_loaded_offsets_are_bounded_and_reread_when_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardstream.datasets import _shard_index

    monkeypatch.setattr(_shard_index, "_KEEP_SAMPLES", 12)  # two shards of 6
    urls = _write(tmp_path, shards=4, per_shard=6)
    ds = ss.ShardDataset(urls, lru_bytes=0)
    fetches = _Fetches(ds)
    streamed = list(ss.ShardStream(urls, shuffle_shards=False, cache=None))
    picks = [0, 7, 13, 19, 1, 20]
    assert ds.__getitems__(picks) == [streamed[i] for i in picks]  # 24 samples, a budget of 12
    assert len(fetches.urls) == 4
    assert ds.__getitems__([2]) == [streamed[2]] and len(fetches.urls) == 5  # shard 0 was dropped
    assert ds.__getitems__([23]) == [streamed[23]] and len(fetches.urls) == 5  # shard 3 was kept


# -- the planner's counts ----------------------------------------------------------------------------


def test_the_fingerprint_of_a_planned_dataset_is_what_it_was_with_list_counts(tmp_path: Path) -> None:
    urls = _write(tmp_path, shards=3, per_shard=4)
    ds = ss.ShardStream(urls, split=ss.SplitPolicy("equal", batch_size=2), cache=None)
    assert ds.planned is not None and isinstance(ds.planned.counts, np.ndarray)
    digest = hashlib.blake2b(repr((urls, [4, 4, 4])).encode(), digest_size=8).hexdigest()
    assert ds.fingerprint()["shards"] == digest


def test_counts_table_repr_and_mapping() -> None:
    table = CountTable("s3://b/x/_info.json", BraceNames("t-", 0, 2, ".tar", 3), np.array([1, 2, 3]))
    assert repr(table) == "CountTable('s3://b/x/_info.json', shards=3, samples=6)"
    assert list(table) == ["t-00.tar", "t-01.tar", "t-02.tar"] and table.get("t-02.tar") == 3
    assert table.get("t-03.tar") is None and table == {"t-00.tar": 1, "t-01.tar": 2, "t-02.tar": 3}


# -- brace expansion ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["a{0..3}", "a{00..3}", "a{0..010}", "a{9..11}", "a{08..11}", "a{3..1}", "a{010..8}", "x/{000..002}.t",
     "a{1..5..2}", "a{a..c}", "a{1,2}b", "a,b{1..2}", "a{0..0}{1..2}", "a\\,b", "s3://b/{0..2}.tar"],
)  # fmt: skip
def test_brace_expansion_matches_braceexpand(spec: str) -> None:
    assert expand_urls(spec) == list(braceexpand.braceexpand(spec))


def test_a_list_of_urls_is_not_copied_or_re_expanded() -> None:
    urls = [f"s3://bucket/train/{i:07d}.tar" for i in range(1000)]
    again = expand_urls(urls)
    assert again == urls and all(a is b for a, b in zip(again, urls, strict=True))
    assert expand_urls(["a.tar", "", " b-{0..1}.tar"]) == ["a.tar", "b-0.tar", "b-1.tar"]
