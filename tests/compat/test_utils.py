"""``wds.utils`` and ``wds.handlers`` helpers behave like WebDataset 1.0.2's."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import webdataset as wds

import shardstream as ss

BATCHES = [([1, 2, 3], ["a", "b", "c"]), ([4, 5], ["d", "e"]), ([6], ["f"])]  # 6 samples


@pytest.mark.parametrize(
    "kw",
    [
        {"nepochs": 2},
        {"nepochs": 1},
        {"nepochs": 0},  # WebDataset checks after the pass: one pass
        {"nbatches": 4},
        {"nbatches": 2, "nepochs": 5},
        {"nsamples": 7},  # counted by the length of the first column: stops after 7 or more
        {"nsamples": 6, "nepochs": 3},
        {"nepochs": 3, "nbatches": 100},
    ],
)
def test_repeatedly_stops_where_webdataset_stops(kw: dict[str, Any]) -> None:
    assert list(ss.utils.repeatedly(BATCHES, **kw)) == list(wds.utils.repeatedly(BATCHES, **kw))


def test_repeatedly_counts_with_batchsize_and_stops_on_an_empty_pass() -> None:
    # WebDataset ignores batchsize= (it always uses len(batch[0])); shardstream honours it.
    got = list(ss.utils.repeatedly(BATCHES, nsamples=7, batchsize=lambda b: 2 * len(b[0])))
    assert got == BATCHES[:1] + BATCHES[1:2]
    assert list(ss.utils.repeatedly([], nepochs=None)) == []  # WebDataset would spin forever
    assert list(ss.utils.repeatedly0(BATCHES, nepochs=2, nbatches=1)) == list(
        wds.utils.repeatedly0(BATCHES, nepochs=2, nbatches=1)
    )


def test_handlers_return_what_webdataset_returns() -> None:
    error = ValueError("bad")
    for name in ("ignore_and_continue", "ignore_and_stop"):
        assert getattr(ss.handlers, name)(error) is getattr(wds.handlers, name)(error)
    for name, expected in (("warn_and_continue", True), ("warn_and_stop", False)):
        with pytest.warns(Warning, match="bad"):
            assert getattr(ss.handlers, name)(error) is expected
    for lib in (ss, wds):
        with pytest.raises(ValueError, match="bad"):
            lib.handlers.reraise_exception(error)


def test_handlers_stop_or_skip_in_a_stage_like_webdataset() -> None:
    def f(x: int) -> int:
        if x == 2:
            raise ValueError(x)
        return x

    for name in ("ignore_and_continue", "ignore_and_stop"):
        ours = list(ss.DataPipeline([list(range(5))], ss.map(f, handler=getattr(ss, name))))
        theirs = list(wds.DataPipeline([list(range(5))], wds.map(f, handler=getattr(wds, name))))
        assert ours == theirs


def test_utils_helpers_agree(tmp_path: Any) -> None:
    for i in range(3):
        (tmp_path / f"f{i}.tar").write_bytes(b"")
    pattern = str(tmp_path / "f{0..2}.tar")
    assert sorted(ss.utils.glob_with_braces(pattern)) == sorted(wds.utils.glob_with_braces(pattern))
    for name in ("a-3.tar", "a-9.tar", "b-3.tar"):
        assert ss.utils.fnmatch_with_braces(name, "a-{1..4}.tar") == wds.utils.fnmatch_with_braces(
            name, "a-{1..4}.tar"
        )
    assert ss.utils.safe_eval("abc", "'{}'.upper()") == wds.utils.safe_eval("abc", "'{}'.upper()")
    with pytest.raises(ValueError):
        ss.utils.safe_eval("a; b")
    for args in ((1, 2, 3), (7,), (), (-1, 2**40)):
        assert ss.utils.make_seed(*args) == wds.utils.make_seed(*args)
    assert ss.utils.make_seed("x", 1) == ss.utils.make_seed("x", 1) < 2**31  # stable for strings
    assert ss.utils.pytorch_worker_seed() == wds.utils.pytorch_worker_seed()
    assert ss.utils.pytorch_worker_info() == wds.utils.pytorch_worker_info()
    assert ss.utils.guess_batchsize(BATCHES[0]) == wds.utils.guess_batchsize(BATCHES[0])
    pairs = [(10, 1.0), (5, 4.0)]
    assert np.allclose(ss.utils.compute_sample_weights(pairs), wds.utils.compute_sample_weights(pairs))
    for obj in ("abc", b"x", [1], (i for i in range(2)), 3, {"a": 1}):
        assert ss.utils.is_iterable(obj) == wds.utils.is_iterable(obj)
    assert ss.utils.identity(5) == 5 and ss.utils.enforce_security is False
    assert ss.utils.lookup_sym("WebDataset", [".compat"]) is ss.WebDataset


def test_deprecated_and_obsolete_decorators() -> None:
    for lib in (ss, wds):

        @lib.utils.deprecated("use g")
        def f() -> int:
            return 1

        with pytest.warns(DeprecationWarning, match="use g"):
            assert f() == 1

        @lib.utils.obsolete
        def g() -> int:
            return 2

        with pytest.raises(lib.utils.ObsoleteException):
            g()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ss.utils.deprecated(lambda: 3).__name__ == "<lambda>"
