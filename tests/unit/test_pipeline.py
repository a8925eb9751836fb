"""DataPipeline and the fluent WebDataset surface over real shards written by our writer."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import shardstream as wds
from shardstream.errors import ConfigurationError, ShardFormatError, ShardNotFoundError


def keys_of(ds: object) -> list[str]:
    return [s["__key__"] if isinstance(s, dict) else s[0] for s in ds]  # type: ignore[attr-defined]


def test_webdataset_reads_every_sample_in_order(make_shards) -> None:
    spec, keys = make_shards([3, 5, 2])
    ds = wds.WebDataset(spec)
    samples = list(ds)
    assert [s["__key__"] for s in samples] == keys
    first = samples[0]
    assert first["txt"] == b"text 0 0" and first["cls"] == b"0"
    assert first["__url__"].endswith("data-000000-0.tar") and first["__local_path__"] == first["__url__"]


def test_explicit_pipeline_equals_fluent(make_shards) -> None:
    spec, keys = make_shards([4, 4])
    explicit = wds.DataPipeline(
        wds.SimpleShardList(spec),
        wds.split_by_worker,
        wds.tarfile_to_samples(),
        wds.to_tuple("__key__", "cls"),
        wds.batched(3),
    )
    fluent = wds.WebDataset(spec).to_tuple("__key__", "cls").batched(3)
    a, b = list(explicit), list(fluent)
    assert [list(x[0]) for x in a] == [list(x[0]) for x in b]
    assert [len(x[0]) for x in a] == [3, 3, 2]


def test_nested_pipeline_as_stage(make_shards) -> None:
    spec, keys = make_shards([4])
    inner = wds.DataPipeline(wds.tarfile_to_samples(), wds.to_tuple("__key__"))
    outer = wds.DataPipeline(wds.SimpleShardList(spec), inner, wds.map(lambda t: t[0].upper()))
    assert list(outer) == [k.upper() for k in keys]


def test_map_dict_map_tuple_rename_select_slice(make_shards) -> None:
    spec, keys = make_shards([10])
    ds = (
        wds.WebDataset(spec)
        .rename(label="cls", text="txt;text")
        .map_dict(label=int)
        .select(lambda s: s["label"] % 2 == 0)
        .to_tuple("text", "label")
        .map_tuple(bytes.decode, None)
        .slice(3)
    )
    assert list(ds) == [("text 0 0", 0), ("text 0 2", 2), ("text 0 4", 4)]


def test_batched_unbatched_roundtrip(make_shards) -> None:
    spec, keys = make_shards([7])
    out = list(wds.WebDataset(spec).to_tuple("__key__", "cls").batched(3).unbatched())
    assert [k for k, _ in out] == keys


def test_shuffle_is_seeded_and_changes_per_epoch(make_shards) -> None:
    spec, keys = make_shards([20, 20, 20])
    ds = wds.WebDataset(spec, shardshuffle=True, seed=7).shuffle(10)
    epoch0, epoch1 = keys_of(ds), keys_of(ds)
    again = wds.WebDataset(spec, shardshuffle=True, seed=7).shuffle(10)
    assert keys_of(again) == epoch0  # same seed and epoch: same order
    assert epoch0 != epoch1  # next epoch: new order
    assert sorted(epoch0) == sorted(epoch1) == sorted(keys)
    other = wds.WebDataset(spec, shardshuffle=True, seed=8).shuffle(10)
    assert keys_of(other) != epoch0
    ds.set_epoch(0)
    assert keys_of(ds) == epoch0  # set_epoch replays an epoch


def test_shard_order_changes_per_epoch(make_shards) -> None:
    spec, _ = make_shards([1] * 12)
    ds = wds.WebDataset(spec, shardshuffle=100)
    orders = [tuple(s["__url__"] for s in ds) for _ in range(3)]
    assert len(set(orders)) == 3


def test_shuffle_bufsize_one_is_identity(make_shards) -> None:
    spec, keys = make_shards([9])
    assert keys_of(wds.WebDataset(spec).shuffle(1)) == keys
    assert keys_of(wds.WebDataset(spec).shuffle(0)) == keys


def test_with_epoch_continues_across_epochs(make_shards) -> None:
    spec, keys = make_shards([5, 5])
    ds = wds.WebDataset(spec).with_epoch(4)
    seen = [keys_of(ds) for _ in range(4)]
    assert all(len(e) == 4 for e in seen)
    flat = [k for e in seen for k in e]
    assert flat[:10] == keys  # the first 10 samples are one full pass, not a restart


def test_with_length_and_repeat(make_shards) -> None:
    spec, keys = make_shards([3])
    ds = wds.WebDataset(spec).with_length(99)
    assert len(ds) == 99
    assert keys_of(ds) == keys
    assert keys_of(wds.WebDataset(spec).repeat(2)) == keys + keys
    with pytest.raises(TypeError, match="length is unknown") as info:
        len(wds.WebDataset(spec))
    assert "split='equal'" in str(info.value) and ".with_epoch(n)" in str(info.value)
    with pytest.raises(TypeError, match="length is unknown") as info:
        len(wds.DataPipeline(lambda: iter(range(3))))
    assert "split='equal'" in str(info.value) and "caps nothing" in str(info.value)


def test_empty_spec_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match="names no shards"):
        wds.WebDataset("")
    with pytest.raises(ValueError, match="names no shards"):
        wds.SimpleShardList([])


def test_empty_epoch_raises_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.tar"
    empty.write_bytes(bytes(1024))
    with pytest.raises(ConfigurationError, match="no samples in this epoch"):
        list(wds.WebDataset(str(empty)))
    assert list(wds.WebDataset(str(empty), empty_check=False)) == []


def test_missing_shard_error_names_path(tmp_path: Path) -> None:
    with pytest.raises(ShardNotFoundError, match="missing-000.tar"):
        list(wds.WebDataset(str(tmp_path / "missing-000.tar")))


def corrupt_spec(make_shards, tmp_path: Path) -> tuple[str, list[str]]:
    spec, keys = make_shards([4, 4, 4])
    middle = tmp_path / "data" / "data-000001-0.tar"
    raw = middle.read_bytes()
    middle.write_bytes(raw[: 512 * 5 + 100])  # cut inside the third member of shard 1
    return spec, keys


def test_corrupt_shard_raises_by_default(make_shards, tmp_path: Path) -> None:
    spec, _ = corrupt_spec(make_shards, tmp_path)
    with pytest.raises(ShardFormatError) as info:
        list(wds.WebDataset(spec))
    assert "data-000001-0.tar" in str(info.value) and info.value.offset > 0


@pytest.mark.parametrize("handler", [wds.ignore_and_continue, wds.warn_and_continue])
def test_skip_handlers_continue_with_next_shard_and_count(make_shards, tmp_path: Path, handler) -> None:
    spec, keys = corrupt_spec(make_shards, tmp_path)
    ds = wds.WebDataset(spec, handler=handler)
    if handler is wds.warn_and_continue:
        with pytest.warns(UserWarning, match="data-000001-0.tar"):
            got = keys_of(ds)
    else:
        got = keys_of(ds)
    # Shard 0 complete, shard 1's first sample (complete before the cut), shard 2 complete.
    assert got == keys[:4] + keys[4:5] + keys[8:]
    assert ds.skipped == 1


@pytest.mark.parametrize("handler", [wds.ignore_and_stop, wds.warn_and_stop])
def test_stop_handlers_end_the_stream(make_shards, tmp_path: Path, handler) -> None:
    spec, keys = corrupt_spec(make_shards, tmp_path)
    ds = wds.WebDataset(spec, handler=handler)
    if handler is wds.warn_and_stop:
        with pytest.warns(UserWarning):
            got = keys_of(ds)
    else:
        got = keys_of(ds)
    assert got == keys[:5]


def test_map_handler_skips_failing_samples_and_counts(make_shards) -> None:
    spec, keys = make_shards([6])

    def explode(sample: dict) -> dict:
        if int(sample["cls"]) % 3 == 0:
            raise RuntimeError("boom")
        return sample

    ds = wds.WebDataset(spec).map(explode, handler=wds.ignore_and_continue)
    assert len(keys_of(ds)) == 4
    assert ds.skipped == 2


def test_close_closes_open_streams(make_shards) -> None:
    spec, _ = make_shards([50])
    ds = wds.WebDataset(spec)
    it = iter(ds)
    next(it)
    ds.close()
    with pytest.raises(StopIteration):
        next(it)


def test_pipelinefilter_user_stage(make_shards) -> None:
    spec, keys = make_shards([3])

    def upper_keys(src, suffix: str):
        for s in src:
            yield s["__key__"] + suffix

    stage = wds.pipelinefilter(upper_keys)
    assert list(wds.WebDataset(spec).compose(stage("!"))) == [k + "!" for k in keys]


def test_memory_source_and_gzip_shards(tmp_path: Path) -> None:
    from shardstream.sources.memory import memory_store

    bio = io.BytesIO()
    with wds.TarWriter(bio, compress=True) as w:
        for i in range(3):
            w.write({"__key__": f"k{i}", "txt": f"v{i}"})
    memory_store["memory://bucket/a.tar.gz"] = bio.getvalue()
    assert keys_of(wds.WebDataset("memory://bucket/a.tar.gz")) == ["k0", "k1", "k2"]


def test_user_exception_closes_upstream_streams(make_shards, monkeypatch) -> None:
    """The traceback of an exception must not keep the shard stream open until GC."""
    from shardstream.sources import file as file_source

    spec, _ = make_shards([50, 50])
    opened = []
    real_open = file_source.FileSource.open

    def spy(self, url, *, offset=0):
        stream = real_open(self, url, offset=offset)
        opened.append(stream)
        return stream

    monkeypatch.setattr(file_source.FileSource, "open", spy)

    def explode(sample: dict) -> dict:
        raise RuntimeError("user code failed")

    with pytest.raises(RuntimeError, match="user code failed") as info:
        list(wds.WebDataset(spec).map(explode))
    assert info.value is not None  # the traceback is still referenced here
    assert opened and all(stream.closed for stream in opened)


def test_to_tuple_with_array_fields_and_none_check(make_shards) -> None:
    import numpy as np

    spec, keys = make_shards([3], fields=lambda shard, i: {"npy": np.arange(4) + i, "cls": i})
    out = list(wds.WebDataset(spec).decode().to_tuple("npy", "cls"))
    assert [int(c) for _, c in out] == [0, 1, 2] and out[2][0].tolist() == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="found None"):
        list(wds.WebDataset(spec).map(lambda s: {**s, "cls": None}).to_tuple("npy", "cls"))


def test_file_urls_and_local_paths(make_shards) -> None:
    spec, keys = make_shards([2, 3])
    urls = wds.expand_urls(spec)
    samples = list(wds.WebDataset([f"file://{u}" for u in urls]))
    assert [s["__key__"] for s in samples] == keys
    assert samples[0]["__url__"] == f"file://{urls[0]}" and samples[0]["__local_path__"] == urls[0]


def test_resampled_shards_are_seeded_and_change_per_epoch(make_shards) -> None:
    spec, _ = make_shards([1] * 8)
    shards = wds.ResampledShards(spec, nshards=20, seed=3)
    first = [d["url"] for d in shards]
    assert first == [d["url"] for d in wds.ResampledShards(spec, nshards=20, seed=3)]
    pipeline = wds.DataPipeline(shards)  # the pipeline owns the epoch
    assert [d["url"] for d in pipeline] == first  # epoch 0
    assert [d["url"] for d in pipeline] != first  # epoch 1
    ds = wds.WebDataset(spec, resampled=True, seed=3).with_epoch(5)
    assert len(list(ds)) == 5


def test_a_stateful_node_that_forgets_state_dict_fails_loudly() -> None:
    from shardstream.pipeline import IterNode, Node, RunContext, Stage

    class Forgetful(Node):  # keeps a count, but never says so
        def __init__(self, upstream: Node | None) -> None:
            super().__init__(upstream)
            self.count = 0
            self._it = self._run()

        def _run(self):  # type: ignore[no-untyped-def]
            assert self.upstream is not None
            for item in self.upstream:
                self.count += 1
                yield item

    class ForgetfulStage(Stage):
        def build(self, upstream, ctx, state=None):  # type: ignore[no-untyped-def]
            return Forgetful(upstream)

    class Honest(Forgetful):
        stateful = False  # declares it: the pipeline counts a replay instead

    node = ForgetfulStage().build(IterNode([1, 2]), RunContext())
    next(node)
    with pytest.raises(NotImplementedError, match="Forgetful is stateful but does not implement state_dict"):
        node.state_dict()
    assert Honest(IterNode([1])).state_dict() == {}
    pipeline = wds.DataPipeline(wds.SimpleShardList(["a", "b", "c"]), ForgetfulStage())
    it = iter(pipeline)
    next(it)
    with pytest.raises(NotImplementedError, match="Forgetful"):
        pipeline.state_dict()
