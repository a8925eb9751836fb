"""WebDataset 1.0.2's helpers that its modules re-export behave as there, at every path code reaches
them by: ``cache.obsolete`` and ``cache.reraise_exception``, ``pipeline.add_length_method``,
``writer.gopen`` (the ``gopen`` function) and ``gopen.PIPE``.

``wds.cache`` and ``wds.pipeline`` are shardstream's native packages for ``import shardstream as
wds`` code, and ``shardstream.compat.<name>`` what ``install_as_webdataset()`` maps
``webdataset.<name>`` to: both are checked against the installed webdataset.
"""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import shardstream
from shardstream.errors import ConfigurationError

# WebDataset's module path -> shardstream's modules at that path
PATHS = {
    "cache": [shardstream.cache, importlib.import_module("shardstream.compat.cache")],
    "pipeline": [shardstream.pipeline, importlib.import_module("shardstream.compat.pipeline")],
    "writer": [importlib.import_module("shardstream.compat.writer")],
    "gopen": [importlib.import_module("shardstream.compat.gopen")],
}


def webdataset_module(name: str) -> ModuleType:
    return importlib.import_module(f"webdataset.{name}")


def both(name: str) -> list[ModuleType]:
    return [webdataset_module(name), *PATHS[name]]


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as exn:
        return type(exn).__name__, str(exn)


@pytest.mark.parametrize("module", both("cache"), ids=lambda m: m.__name__)
def test_cache_obsolete_raises_unless_allow_obsolete_is_set(module: ModuleType, monkeypatch) -> None:
    @module.obsolete
    def old(x: int) -> int:
        return x + 1

    @module.obsolete(reason="use new()")
    def older() -> str:
        return "ran"

    kind, message = outcome(lambda: old(1))
    assert kind == "ObsoleteException"
    assert message == "Call to obsolete function old. Set env ALLOW_OBSOLETE=1 to permit."
    assert outcome(older)[1].endswith(" Reason: use new()")
    monkeypatch.setenv("ALLOW_OBSOLETE", "1")
    assert old(1) == 2 and older() == "ran"
    monkeypatch.setenv("ALLOW_OBSOLETE", "0")
    assert outcome(lambda: old(1))[0] == "ObsoleteException"
    monkeypatch.setenv("ALLOW_OBSOLETE", "yes")
    with pytest.raises(ValueError):
        old(1)


def test_allow_obsolete_that_is_not_a_number_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("ALLOW_OBSOLETE", "yes")
    with pytest.raises(ConfigurationError, match=r"ALLOW_OBSOLETE='yes' is not an integer; set it to 1"):
        shardstream.cache.obsolete(len)("abc")


@pytest.mark.parametrize("module", both("cache"), ids=lambda m: m.__name__)
def test_cache_reraise_exception_raises_the_exception(module: ModuleType) -> None:
    error = KeyError("k")
    with pytest.raises(KeyError) as raised:
        module.reraise_exception(error)
    assert raised.value is error


class Sized:
    def __init__(self) -> None:
        self.size = 3

    def __iter__(self) -> Any:
        return iter(range(self.size))


@pytest.mark.parametrize("module", both("pipeline"), ids=lambda m: m.__name__)
def test_pipeline_add_length_method_gives_len_and_an_iterable_dataset(module: ModuleType) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    obj = Sized()
    assert module.add_length_method(obj) is obj
    assert len(obj) == 3 and list(obj) == [0, 1, 2]
    assert type(obj).__name__ == "Sized_Length" and isinstance(obj, Sized)
    assert isinstance(obj, torch_data.IterableDataset)
    assert module.DataLoader is torch_data.DataLoader and module.IterableDataset is torch_data.IterableDataset


@pytest.mark.parametrize("module", both("writer"), ids=lambda m: m.__name__)
def test_writer_gopen_is_the_gopen_function(module: ModuleType, tmp_path: Path) -> None:
    """WebDataset's ``writer`` does ``from . import gopen`` after its package bound the name to
    the function ``gopen.gopen``, so ``writer.gopen`` is that function (not the module)."""
    path = tmp_path / "data.bin"
    path.write_bytes(b"payload")
    with module.gopen(str(path), "rb") as stream:
        assert stream.read() == b"payload"
    if module.__name__.startswith("shardstream"):
        assert module.gopen is shardstream.gopen


@pytest.mark.parametrize("module", both("gopen"), ids=lambda m: m.__name__)
def test_gopen_pipe_is_subprocess_pipe(module: ModuleType) -> None:
    assert module.PIPE is subprocess.PIPE and module.Popen is subprocess.Popen
