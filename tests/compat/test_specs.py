"""Shard specs with ``${NAME}``: expanded from ``WDS_NAME`` as WebDataset 1.0.2 does."""

from __future__ import annotations

from pathlib import Path

import pytest
import webdataset as wds
from _wds_both import wds_items

import shardstream as ss
from shardstream.errors import ConfigurationError
from shardstream.shards.spec import expand_urls, expand_variables


def test_variables_expand_like_webdataset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WDS_DATA", "/data/${SPLIT}")  # a value may name another variable
    monkeypatch.setenv("WDS_SPLIT", "train")
    for spec in (
        "${DATA}/shard-{000..003}.tar",
        "${DATA}/a-{0..1}.tar::${SPLIT}/b.tar",
        "$DATA/literal.tar",  # only ${NAME} is a variable
        "s3://bucket/${SPLIT}/x-{00..02}.tar",
    ):
        assert expand_urls(spec) == wds.shardlists.expand_urls(spec), spec
        assert ss.SimpleShardList(spec).urls == wds.SimpleShardList(spec).urls
    assert expand_variables("${SPLIT}-{a,b}") == "train-{a,b}"  # braces expand after variables


def test_unset_variable_names_it() -> None:
    with pytest.raises(AssertionError):  # WebDataset: an assert (gone under python -O)
        wds.shardlists.expand_urls("${NOPE}/a.tar")
    with pytest.raises(ConfigurationError, match=r"WDS_NOPE is not set"):
        expand_urls("${NOPE}/a.tar")
    with pytest.raises(ConfigurationError, match="WDS_NOPE"):
        ss.WebDataset("${NOPE}/a-{0..3}.tar")


def test_webdataset_reads_the_same_samples_from_a_spec_with_a_variable(
    make_shards, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, keys = make_shards([3, 4])
    directory = str(Path(spec).parent)
    monkeypatch.setenv("WDS_DATA", directory)
    with_variable = spec.replace(directory, "${DATA}")
    theirs = [s["__key__"] for s in wds_items(wds.WebDataset(with_variable, shardshuffle=False))]
    ours = [s["__key__"] for s in ss.WebDataset(with_variable, shardshuffle=False)]
    assert ours == theirs == keys
    native = ss.ShardStream(with_variable, shuffle_shards=False)
    assert [s["__key__"] for s in native] == keys
