"""WebLoader's WebDataset methods: what each returns and yields, as in WebDataset 1.0.2.

``with_length``, ``with_epoch`` and ``repeat`` change the loader and return it; stage methods
(``unbatched()``, ``shuffle(n)``, ``batched(n)``) return a new WebLoader and leave the original
as it was. Where WebDataset restarts the loader at every ``iter()`` of ``with_epoch``, shardstream
continues (see the README), so counts are compared, not orders.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from _wds_both import wds_items


def dataset(lib: ModuleType, spec: str) -> Any:
    return lib.WebDataset(spec, shardshuffle=False).to_tuple("__key__", "cls").batched(4)


@pytest.fixture
def spec(make_shards) -> str:
    return make_shards([10, 10, 5])[0]  # 25 samples: 7 batches of 4 in one process


def test_with_length_with_epoch_repeat_return_the_loader(both: tuple[str, ModuleType], spec: str) -> None:
    _, lib = both
    loader = lib.WebLoader(dataset(lib, spec), batch_size=None, num_workers=0)
    assert len(wds_items(loader)) == 7
    assert loader.with_length(5, silent=True) is loader and len(loader) == 5
    assert isinstance(loader, lib.WebLoader)
    assert loader.with_epoch(11) is loader
    assert [len(wds_items(loader)) for _ in range(2)] == [11, 11]  # crosses the loader's end
    again = lib.WebLoader(dataset(lib, spec), batch_size=None, num_workers=0)
    assert again.repeat(2) is again and len(wds_items(again)) == 14
    capped = lib.WebLoader(dataset(lib, spec), batch_size=None, num_workers=0).repeat(3, 10)
    assert len(wds_items(capped)) == 10


def test_stage_methods_return_a_new_webloader(both: tuple[str, ModuleType], spec: str) -> None:
    _, lib = both
    loader = lib.WebLoader(dataset(lib, spec), batch_size=None, num_workers=0)
    rebatched = loader.unbatched().shuffle(1000).batched(8)
    assert isinstance(rebatched, lib.WebLoader) and rebatched is not loader
    assert [len(keys) for keys, _ in wds_items(rebatched)] == [8, 8, 8, 1]
    assert len(wds_items(loader)) == 7  # the original is unchanged
    epoch = rebatched.with_epoch(5)
    assert epoch is rebatched
    assert [len(wds_items(epoch)) for _ in range(2)] == [5, 5]
    assert sorted(k for keys, _ in wds_items(loader.unbatched()) for k in [keys]) == sorted(
        k for keys, _ in wds_items(loader) for k in keys
    )


def test_recipe_with_workers(ss: ModuleType, spec: str) -> None:
    # The Lightning guides' recipe, with real worker processes.
    loader = ss.WebLoader(dataset(ss, spec), batch_size=None, num_workers=2)
    loader = loader.unbatched().shuffle(1000).batched(6).with_epoch(3).with_length(3, silent=True)
    try:
        assert len(loader) == 3
        epochs = [list(loader) for _ in range(3)]
        assert [len(e) for e in epochs] == [3, 3, 3]
        stream = [k for e in epochs for keys, _ in e for k in keys]
        assert len(set(stream[:25])) == 25  # epochs continued one pass of the loader: no repeats
    finally:
        loader.close()
    plain = ss.WebLoader(dataset(ss, spec), batch_size=None, num_workers=2).with_epoch(5)
    with plain:
        assert len(plain) == 5 and len(list(plain)) == 5


def test_length_after_stages_is_unknown_until_declared(ss: ModuleType, spec: str) -> None:
    loader = ss.WebLoader(dataset(ss, spec), batch_size=None).unbatched()
    with pytest.raises(TypeError, match="with_length"):
        len(loader)
    assert len(loader.with_length(25, silent=True)) == 25
