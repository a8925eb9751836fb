"""Fixtures for running one behaviour against both WebDataset 1.0.2 and shardstream.

Fixtures:
    wds: the ``webdataset`` module (the tests of this directory skip without webdataset 1.0.2).
    ss: ``shardstream``, the module WebDataset users import as ``wds``.
    both: parametrises a test over ``(name, module)`` for the two libraries, for behaviours that
        must agree exactly.

Helpers that run a pipeline in either library are in ``_wds_both.py``. The shard factory
``make_shards`` and the clean environment come from ``tests/conftest.py``. WebDataset warns where
shardstream does not (``shardshuffle=None``, ``with_length``): the tests pass ``shardshuffle=False``
and ``silent=True`` so that warnings stay errors.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from _components import require_component, require_module

import shardstream

webdataset = require_module("webdataset", "the comparison with WebDataset 1.0.2")
# the behaviours compared are those of 1.0.2 (pinned in shardstream[dev])
require_component(
    f"webdataset 1.0.2 (found {webdataset.__version__})",
    "the comparison with WebDataset 1.0.2",
    present=webdataset.__version__ == "1.0.2",
)


@pytest.fixture
def wds() -> ModuleType:
    return webdataset


@pytest.fixture
def ss() -> ModuleType:
    return shardstream


@pytest.fixture(params=["webdataset", "shardstream"])
def both(request: pytest.FixtureRequest) -> tuple[str, ModuleType]:
    return request.param, webdataset if request.param == "webdataset" else shardstream
