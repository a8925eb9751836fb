"""The public surface: a sorted __all__, and every WebDataset 1.0.2 name in scope, same signatures."""

from __future__ import annotations

import inspect

import pytest
from _components import require_module

import shardstream

# WebDataset 1.0.2 top-level names deliberately not provided (out of scope; see
# docs/migrating-from-webdataset.md).
NOT_PROVIDED = {"LMDBCached", "MultiShardSample"}


def test_all_is_sorted_and_complete() -> None:
    # Four groups, each sorted: the native API, the stages, the errors, WebDataset's names.
    names = shardstream.__all__
    assert len(set(names)) == len(names)
    groups: list[list[str]] = [[names[0]]]
    for before, name in zip(names, names[1:], strict=False):
        if name < before:
            groups.append([])
        groups[-1].append(name)
    native, stages, errors, webdataset = groups  # exactly four sorted runs
    assert {"ShardStream", "Mix", "ObjectStream", "SplitPolicy", "WebLoader"} <= set(native)
    assert {"Stage", "Node", "DataPipeline"} <= set(stages)
    assert all(n.endswith("Error") or n == "CacheLockTimeout" for n in errors)
    assert {"WebDataset", "shuffle", "to_tuple"} <= set(webdataset)
    for name in shardstream.__all__:
        assert hasattr(shardstream, name), name
    public = {n for n in dir(shardstream) if not n.startswith("_")}
    # Everything public at the top level is either exported or a subpackage.
    assert public - set(shardstream.__all__) <= {
        "config",
        "decoders",
        "deprecation",
        "errors",
        "forks",
        "faults",
        "loader",
        "shards",
        "sources",
        "tar",
        "cli",
        "fetch",
        "objects",
        "ray",
        "testing",
        "malloc",
        "optional",
        "paths",
        "net",
        "telemetry",
        "readers",
        "datasets",
    }


wds = require_module("webdataset", "the comparison with WebDataset 1.0.2")
WDS_NAMES = sorted(n for n in dir(wds) if not n.startswith("_") and n not in NOT_PROVIDED)


def test_the_renamed_dataset_still_answers_with_a_deprecation_warning() -> None:
    # ss.Dataset became ss.ShardStream (issue 44: names say iterable or map-style); the old name
    # is the same class for a release, and says what to write instead.
    with pytest.warns(
        DeprecationWarning, match=r"shardstream\.Dataset is deprecated; use shardstream\.ShardStream"
    ):
        old = shardstream.Dataset  # type: ignore[attr-defined]
    assert old is shardstream.ShardStream
    assert "Dataset" not in shardstream.__all__
    assert "Dataset" not in dir(shardstream)


@pytest.mark.parametrize("name", WDS_NAMES)
def test_webdataset_name_exists(name: str) -> None:
    assert hasattr(shardstream, name), f"shardstream lacks WebDataset's top-level name {name!r}"


def _params(obj: object) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(obj).parameters.values())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


@pytest.mark.parametrize(
    "name", [n for n in WDS_NAMES if callable(getattr(wds, n)) and not inspect.ismodule(getattr(wds, n))]
)
def test_webdataset_signature_is_accepted(name: str) -> None:
    obj = getattr(wds, name)
    if isinstance(obj, type) and issubclass(obj, BaseException):
        pytest.skip("exceptions are caught, not constructed, by user code")
    theirs, ours = _params(obj), _params(getattr(shardstream, name))
    if theirs is None or ours is None:
        pytest.skip("no introspectable signature")
    if type(obj).__name__ == "RestCurried":
        # A curried WebDataset stage: its first parameter is the upstream iterator, which the
        # pipeline passes; users call it with the remaining arguments.
        theirs = theirs[1:]
    ours_names = {p.name for p in ours}
    ours_var_kw = any(p.kind is p.VAR_KEYWORD for p in ours)
    ours_var_pos = any(p.kind is p.VAR_POSITIONAL for p in ours)
    positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, p in enumerate(p for p in theirs if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)):
        # Each of their positional parameters is accepted at the same position with the same name.
        assert ours_var_pos or (i < len(positional) and positional[i].name == p.name), (
            name,
            p.name,
            positional,
        )
    for p in theirs:
        if p.kind is p.KEYWORD_ONLY:
            assert p.name in ours_names or ours_var_kw, (name, p.name)


@pytest.mark.parametrize(
    "namespace",
    [
        "handlers",
        "shardlists",
        "autodecode",
        "writer",
        "filters",
        "compat",
        "tenbin",
        "gopen",
        "tariterators",
        "mix",
        "extradatasets",
    ],
)
def test_namespaces_reachable(namespace: str) -> None:
    ours = getattr(shardstream, namespace)
    theirs = getattr(wds, namespace)
    if inspect.isfunction(theirs):  # wds.gopen is the function in both
        assert callable(ours)
        return
    public = [n for n in dir(theirs) if not n.startswith("_") and not inspect.ismodule(getattr(theirs, n))]
    important = {
        "handlers": [
            "reraise_exception",
            "warn_and_continue",
            "ignore_and_continue",
            "warn_and_stop",
            "ignore_and_stop",
        ],
        "shardlists": [
            "SimpleShardList",
            "ResampledShards",
            "split_by_node",
            "split_by_worker",
            "single_node_only",
            "expand_urls",
        ],
        "filters": [
            "shuffle",
            "batched",
            "unbatched",
            "map",
            "to_tuple",
            "decode",
            "rename",
            "select",
            "default_collation_fn",
            "pipelinefilter",
            "getfirst",
        ],
        "compat": ["WebDataset", "WebLoader", "FluidInterface", "FluidWrapper", "check_empty"],
        "writer": ["TarWriter", "ShardWriter", "numpy_dumps", "torch_dumps", "imageencoder"],
        "autodecode": [
            "Decoder",
            "imagehandler",
            "handle_extension",
            "Continue",
            "DecodingError",
            "basichandlers",
            "imagespecs",
            "IMAGE_EXTENSIONS",
        ],
        "tariterators": [
            "tarfile_samples",
            "tarfile_to_samples",
            "base_plus_ext",
            "group_by_keys",
            "tar_file_expander",
            "url_opener",
            "valid_sample",
        ],
        "mix": ["RandomMix", "RoundRobin"],
        "extradatasets": ["MockDataset", "with_epoch", "with_length"],
        "tenbin": [
            n for n in public if n in ("encode_buffer", "decode_buffer", "save", "load", "write", "read")
        ],
    }.get(namespace, [])
    for n in important:
        assert n in public, f"test list is stale: webdataset.{namespace} has no {n}"
        assert hasattr(ours, n), f"shardstream.{namespace} lacks {n}"


def test_utils_pytorch_worker_info_in_main_process() -> None:
    assert shardstream.utils.pytorch_worker_info() == (0, 1, 0, 1)


def test_compat_modules_importable_by_name() -> None:
    from shardstream.shardlists import split_by_node  # noqa: F401

    from shardstream.handlers import warn_and_continue  # noqa: F401
