"""Recipes of WebDataset code in real trainers: PipelineStage.run, ignored arguments, error URLs."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstream as wds
from shardstream.compat import webdataset as webdataset_module
from shardstream.compat.tariterators import tar_file_expander, url_opener


class EpochShuffle(wds.PipelineStage):
    """A stage as trainers write it for WebDataset: ``run(src)``, shuffled per epoch by a seed."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.epoch = -1

    def run(self, src: Iterator[Any]) -> Iterator[Any]:
        self.epoch += 1
        items = list(src)
        random.Random(self.seed + self.epoch).shuffle(items)
        yield from items


def test_a_webdataset_pipeline_stage_runs_and_its_state_says_replay(caplog: pytest.LogCaptureFixture) -> None:
    data = list(range(20))
    with caplog.at_level(logging.WARNING, logger="shardstream.pipeline.base"):
        pipeline = wds.DataPipeline([data], EpochShuffle(), wds.map(lambda x: x * 10))
        it = iter(pipeline)
        seen = [next(it) for _ in range(7)]
        state = json.loads(json.dumps(pipeline.state_dict()))
    assert sorted(seen + list(it)) == [x * 10 for x in data]
    assert state["replay"] == 7 and "nodes" not in state  # says it cannot save the stage
    warnings = [r.getMessage() for r in caplog.records if "EpochShuffle" in r.getMessage()]
    assert len(warnings) == 1 and "cannot be saved" in warnings[0]
    resumed = wds.DataPipeline([data], EpochShuffle(), wds.map(lambda x: x * 10))
    resumed.load_state_dict(state)
    assert seen + list(resumed) == list(wds.DataPipeline([data], EpochShuffle(), wds.map(lambda x: x * 10)))


def test_a_stage_with_neither_build_nor_run_says_what_to_implement() -> None:
    with pytest.raises(NotImplementedError, match=r"run\(self, src\)"):
        list(wds.DataPipeline([[1, 2]], wds.PipelineStage()))


def test_url_to_name_without_cache_dir_warns_once_and_reads(
    make_shards: Any, caplog: pytest.LogCaptureFixture
) -> None:
    spec, keys = make_shards(counts=[3, 3])
    webdataset_module.WARNED.discard("url_to_name=")  # warned once per process: start afresh
    with caplog.at_level(logging.WARNING, logger="shardstream.compat.webdataset"):
        first = list(wds.WebDataset(spec, url_to_name=lambda url: url.rpartition("/")[2], shardshuffle=False))
        wds.WebDataset(spec, url_to_name=str, shardshuffle=False)
    assert [s["__key__"] for s in first] == keys  # the recipe runs
    messages = [r.getMessage() for r in caplog.records if "url_to_name=" in r.getMessage()]
    assert len(messages) == 1 and "no effect" in messages[0]  # named, once per process


def test_errors_of_a_hand_built_chain_name_the_shard_url(tmp_path: Path) -> None:
    path = tmp_path / "cut.tar"
    with wds.TarWriter(str(path)) as sink:
        sink.write({"__key__": "k0", "txt": "x" * 3000})
    path.write_bytes(path.read_bytes()[:1500])
    with pytest.raises(wds.ShardFormatError) as caught:
        list(tar_file_expander(url_opener([{"url": str(path)}])))
    assert str(path) in str(caught.value) and "<stream>" not in str(caught.value)
