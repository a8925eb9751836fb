"""The warning handlers warn like WebDataset 1.0.2's, and ``log_keys`` logs what it logs."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _wds_both import make_samples, run, wds_items


def _fail_on_odd(sample: dict[str, Any]) -> dict[str, Any]:
    if int(sample["cls"]) % 2:
        raise ValueError(f"odd sample {sample['__key__']}")
    return sample


@pytest.mark.parametrize("name", ["warn_and_continue", "warn_and_stop"])
def test_warning_handlers_use_webdataset_category(wds: ModuleType, ss: ModuleType, name: str) -> None:
    outcomes = []
    for lib in (wds, ss):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = getattr(lib.handlers, name)(ValueError("boom 42"))
        assert len(caught) == 1, (lib.__name__, caught)
        assert "boom 42" in str(caught[0].message)
        outcomes.append((result, caught[0].category))
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][1] is UserWarning


@pytest.mark.parametrize("name", ["warn_and_continue", "warn_and_stop"])
def test_warning_handlers_in_a_pipeline_agree(wds: ModuleType, ss: ModuleType, name: str) -> None:
    got = {}
    for lib in (wds, ss):
        with pytest.warns(UserWarning, match="odd sample k"):
            items = run(lib, make_samples(4), lib.map(_fail_on_odd, handler=getattr(lib, name)))
        got[lib.__name__] = [s["__key__"] for s in items]
    assert got["webdataset"] == got["shardstream"]
    assert got["shardstream"] == (["k0", "k2"] if name == "warn_and_continue" else ["k0"])


def test_log_keys_stage_writes_webdataset_lines(wds: ModuleType, ss: ModuleType, tmp_path: Path) -> None:
    logs = {}
    for lib in (wds, ss):
        logfile = tmp_path / f"{lib.__name__}.log"
        logfile.write_text("earlier line\n")  # appended to, not replaced
        items = run(lib, make_samples(3), lib.filters.log_keys(str(logfile)))
        assert [s["__key__"] for s in items] == ["k0", "k1", "k2"]
        logs[lib.__name__] = logfile.read_text()
        # No file: the samples pass unchanged and nothing is written.
        assert run(lib, make_samples(2), lib.filters.log_keys()) == make_samples(2)
    assert logs["shardstream"] == logs["webdataset"]
    assert logs["shardstream"] == "earlier line\n0\tNone\tNone\tk0\n1\tNone\tNone\tk1\n2\tNone\tNone\tk2\n"


def test_log_keys_method_on_shards(wds: ModuleType, ss: ModuleType, make_shards: Any, tmp_path: Path) -> None:
    spec, _ = make_shards(counts=[3, 3])
    logs = {}
    for lib in (wds, ss):
        logfile = tmp_path / f"{lib.__name__}.log"
        keys = [
            s["__key__"] for s in wds_items(lib.WebDataset(spec, shardshuffle=False).log_keys(str(logfile)))
        ]
        logs[lib.__name__] = (keys, logfile.read_text())
    assert logs["shardstream"] == logs["webdataset"]
    assert len(logs["shardstream"][1].splitlines()) == 6


def test_log_keys_from_two_loader_workers_appends_whole_lines(
    ss: ModuleType, make_shards: Any, tmp_path: Path
) -> None:
    from torch.utils.data import DataLoader

    spec, keys = make_shards(counts=[40, 40])
    logfile = tmp_path / "keys.log"
    ds = ss.WebDataset(spec, shardshuffle=False).log_keys(str(logfile)).to_tuple("__key__")
    got = [k for (k,) in DataLoader(ds, batch_size=None, num_workers=2)]
    assert sorted(got) == sorted(keys)
    lines = [line.split("\t") for line in logfile.read_text().splitlines()]
    assert sorted(fields[3] for fields in lines) == sorted(keys)  # one whole line per sample
    assert sorted(int(fields[0]) for fields in lines) == sorted(list(range(40)) * 2)  # per worker
