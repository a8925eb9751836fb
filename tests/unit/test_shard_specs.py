"""One grammar for shard specs (datasets/specs.py), one set of option names (datasets/options.py),
and the native default split (datasets/policy.py:default_split), on local shards.

Remote forms (store prefixes, indexed and unindexed ``http(s)://``) are in
``tests/integration/test_shard_specs_remote.py``; real gloo ranks in
``tests/integration/test_default_split.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import shardstream as ss
from shardstream.compat import WebDataset
from shardstream.errors import ConfigurationError, ShardNotFoundError

COUNT = 10  # shards written
PER_SHARD = 34  # samples per shard: 340 in all


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """``COUNT`` shards of ``PER_SHARD`` samples written by ShardWriter, with its _info.json."""
    directory = tmp_path / "d"
    directory.mkdir()
    with ss.ShardWriter(str(directory / "a-%06d.tar"), maxcount=PER_SHARD) as sink:
        for i in range(COUNT * PER_SHARD):
            sink.write({"__key__": f"k{i:05d}", "cls": i})
    return directory


def _names(urls: list[str]) -> list[str]:
    return [u.rpartition("/")[2] for u in urls]


ALL = [f"a-{i:06d}.tar" for i in range(COUNT)]


# -- the spec forms, through every front door ----------------------------------------------------


@pytest.mark.parametrize(
    "form", ["directory", "directory/", "glob", "index", "joined forms", "path object", "file URL"]
)
def test_the_command_line_s_spec_forms_work_through_the_api(written: Path, form: str) -> None:
    spec: Any = {
        "directory": str(written),
        "directory/": f"{written}/",
        "glob": str(written / "a-*.tar"),
        "index": str(written / "_info.json"),
        "joined forms": f"{written}/a-{{000000..000004}}.tar::{written}/a-00000[5-9].tar",
        "path object": written,
        "file URL": f"file://{written}/",
    }[form]
    dataset = ss.ShardStream(spec, shuffle_shards=False)
    assert _names(dataset.urls) == ALL
    assert [s["__key__"] for s in dataset] == [f"k{i:05d}" for i in range(COUNT * PER_SHARD)]
    assert _names(WebDataset(spec).urls) == ALL
    assert _names(ss.ShardDataset(spec).urls) == ALL
    assert len(ss.ShardDataset(spec)) == COUNT * PER_SHARD
    # (unpack reads a shard spec through ss.ShardStream too)


def test_a_mixture_takes_specs_as_sources(written: Path) -> None:
    mix = ss.Mix([str(written), str(written / "a-{000000..000001}.tar")], stop="longest")
    assert [_names(ds.urls) for ds in mix.datasets] == [ALL, ALL[:2]]  # type: ignore[attr-defined]
    assert len(list(mix)) == (COUNT + 2) * PER_SHARD
    with pytest.raises(ShardNotFoundError, match="1 of 11 shards"):
        ss.Mix([str(written), str(written / "a-{000000..000010}.tar")])


def test_a_directory_holding_other_files_gives_its_shards_sorted(written: Path) -> None:
    (written / "notes.txt").write_text("not a shard")
    (written / ".hidden.tar").write_bytes(b"")
    assert _names(ss.ShardStream(str(written)).urls) == ALL


def test_an_empty_directory_or_glob_names_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="holds no shards"):
        ss.ShardStream(str(tmp_path / "empty"))
    with pytest.raises(ConfigurationError, match="matches no files"):
        ss.ShardStream(str(tmp_path / "nothing-*.tar"))
    with pytest.raises(ShardNotFoundError, match="does not exist"):
        ss.ShardStream(f"{tmp_path}/absent/")


def test_a_list_mixes_forms_and_keeps_its_repeats(written: Path) -> None:
    """A shard named twice is read twice (WebDataset's way to upsample)."""
    first = str(written / ALL[0])
    assert _names(ss.ShardStream([first, first, f"{written}/"]).urls) == [ALL[0], ALL[0], *ALL]


# -- missing shards fail before the first sample -------------------------------------------------


def test_a_brace_typo_fails_at_construction_naming_the_missing_shards(written: Path) -> None:
    spec = str(written / "a-{000000..000012}.tar")  # 13 named, 10 written
    for make in (ss.ShardStream, WebDataset, ss.ShardDataset):
        with pytest.raises(ShardNotFoundError) as caught:
            make(spec)
        message = str(caught.value)
        assert f"3 of 13 shards named by {spec!r} are missing" in message, message
        assert "a-000010.tar, a-000011.tar, a-000012.tar" in message
        assert "shardstream ls" in message  # the fix
        assert caught.value.url == str(written / "a-000010.tar")


def test_missing_shards_are_listed_first_few_and_counted(written: Path) -> None:
    spec = str(written / "a-{000000..000099}.tar")  # 90 missing: the directory is listed, not stat-ed
    with pytest.raises(ShardNotFoundError, match=r"90 of 100 shards .* a-000014\.tar and 85 more"):
        ss.ShardStream(spec)
    listed = [str(written / n) for n in ALL] + [str(written / "b.tar")]
    with pytest.raises(
        ShardNotFoundError, match=r"1 of 11 shards named by a list of 11 URLs are missing: b\.tar"
    ):
        ss.ShardStream(listed)


def test_the_check_needs_no_index(written: Path) -> None:
    os.remove(written / "_info.json")
    with pytest.raises(ShardNotFoundError, match="1 of 11"):
        ss.ShardStream(str(written / "a-{000000..000010}.tar"))
    assert len(ss.ShardStream(str(written / "a-{000000..000009}.tar")).urls) == COUNT


# -- one set of option names ----------------------------------------------------------------------


def test_webdataset_spellings_mean_the_native_options(written: Path, tmp_path: Path) -> None:
    spec = str(written)
    theirs = ss.ShardStream(
        spec,
        shardshuffle=False,
        cache_dir=str(tmp_path / "cache"),
        cache_size="1G",
        split="equal",
        batch_size=4,
    )
    ours = ss.ShardStream(
        spec,
        shuffle_shards=False,
        cache=ss.CachePolicy(str(tmp_path / "cache"), "1G"),
        split=ss.SplitPolicy("equal", batch_size=4),
    )
    assert theirs.split == ours.split == ss.SplitPolicy("equal", batch_size=4)
    assert theirs.fingerprint() == ours.fingerprint()
    assert [s["__key__"] for s in theirs] == [s["__key__"] for s in ours]
    assert repr(theirs.source) == repr(ours.source)  # the same cache (local shards are read in place)
    assert "ShardCache(" in repr(theirs.source) and "cache_size=1073741824" in repr(theirs.source)
    splitters = ss.ShardStream(spec, nodesplitter=ss.split_by_node, workersplitter=None)
    assert splitters.split.mode == "shards" and splitters.split.worker_splitter is None
    assert ss.ShardStream(spec, resampled=True).split.mode == "resampled"
    assert (
        ss.ShardStream(spec, verbose=True, shuffle_shards=False).fingerprint()
        == ss.ShardStream(spec, log_shards=True, shuffle_shards=False).fingerprint()
    )


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"shuffle_shards": True, "shardshuffle": 100}, ["shuffle_shards=", "shardshuffle="]),
        ({"cache": None, "cache_dir": "/tmp/x"}, ["cache=", "cache_dir="]),
        ({"log_shards": True, "verbose": True}, ["log_shards=", "verbose="]),
        ({"split": ss.SplitPolicy("equal"), "batch_size": 4}, ["split=", "batch_size="]),
    ],
)
def test_both_spellings_of_one_option_are_refused_naming_both(
    written: Path, kwargs: dict[str, Any], names: list[str]
) -> None:
    with pytest.raises(ConfigurationError, match="spell the same option") as caught:
        ss.ShardStream(str(written), **kwargs)
    assert all(name in str(caught.value) for name in names)


def test_batch_size_without_a_split_says_what_it_is_for(written: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        ss.ShardStream(str(written), batch_size=64)
    message = str(caught.value)
    assert "batch_size=64 configures a planned split" in message
    assert "split='equal', batch_size=64" in message and ".batched(64)" in message
    with pytest.raises(ConfigurationError, match="take no splitter|takes no splitter"):
        ss.ShardStream(str(written), split="equal", nodesplitter=ss.split_by_node)


def test_an_unknown_length_recommends_a_planned_split_not_with_length(written: Path) -> None:
    with pytest.raises(TypeError) as caught:
        len(ss.ShardStream(str(written)))
    message = str(caught.value)
    assert "split='equal'" in message and "with_epoch(n)" in message
    assert "with_length" not in message
    assert len(ss.ShardStream(str(written), split="equal")) == COUNT * PER_SHARD


def test_names_say_map_style_or_iterable(written: Path) -> None:
    assert repr(ss.ShardStream(str(written))).startswith("ShardStream(iterable, shards=10")
    assert repr(WebDataset(str(written))).startswith("WebDataset(iterable, ")
    assert repr(ss.ShardDataset(str(written))).startswith("ShardDataset(map-style, shards=10")
    assert repr(ss.Mix([ss.ShardStream(str(written))])).startswith("Mix(iterable, sources=1")
    for cls in (ss.ShardStream, WebDataset, ss.Mix, ss.ObjectStream):
        assert "iterable" in (cls.__doc__ or "").splitlines()[0], cls
    for cls in (ss.ShardDataset, ss.ObjectDataset):
        assert "map-style" in (cls.__doc__ or "").splitlines()[0], cls


# -- the native default split ---------------------------------------------------------------------


def test_several_ranks_get_equal_counts_from_local_shards(written: Path) -> None:
    three = [str(written / n) for n in ALL[:3]]  # whole shards would give the ranks 68 and 34
    for index in (True, False):
        if not index:
            os.remove(written / "_info.json")  # local shards are counted instead
        per_rank = []
        for rank in (0, 1):
            dataset = ss.ShardStream(three, world=ss.World(rank, 2))
            assert dataset.split.mode == "equal"
            per_rank.append(len(list(dataset.batched(4))))
            assert len(dataset.batched(4)) == per_rank[-1]
        assert per_rank == [13, 13]  # 51 samples per rank
    webdataset = WebDataset(three, world=ss.World(0, 2))  # WebDataset's defaults, for drop-in code
    assert webdataset.split.mode == "shards" and repr(webdataset.split.node_splitter) == "single_node_only"
    dealt = WebDataset(three, split="shards", world=ss.World(0, 2))  # (its splitters: given, or the split's)
    assert repr(dealt.split.node_splitter) == "split_by_node"


def test_a_world_found_only_at_iteration_is_refused_at_the_start_of_the_epoch(
    written: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = str(written / "a-{000000..000009}.tar")
    dataset = ss.ShardStream(spec)  # built for one rank: whole shards, as before
    assert dataset.split.mode == "shards" and dataset.planned is None
    assert len(list(dataset)) == COUNT * PER_SHARD
    monkeypatch.setenv("WORLD_SIZE", "2")  # then the launcher's world appears
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigurationError) as caught:
        next(iter(dataset))
    message = str(caught.value)
    assert "built for one rank" in message and "runs on 2 ranks" in message
    assert "split='equal'" in message and "init_process_group" in message
    explicit = ss.ShardStream(spec, split="shards")  # the old meaning, asked for: not refused
    assert len(list(explicit)) == 5 * PER_SHARD  # rank 1 of 2: every other shard
