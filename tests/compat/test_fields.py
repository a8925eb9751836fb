"""Field stages on a missing field, under each error handler, agree with WebDataset 1.0.2.

WebDataset raises ``ValueError`` for a missing field in ``to_tuple``/``rename``/``extract_keys``/
``rename_keys`` and ``KeyError`` in ``map_dict``; shardstream raises ``MissingFieldError``, which is
both, so the ``except`` clauses of either kind of code keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import webdataset as wds
from _wds_both import assert_agree, make_samples, outcome, run

import shardstream as ss
from shardstream.errors import MissingFieldError

# stage name -> (stage factory taking the library and a handler, the exception WebDataset raises)
MISSING: dict[str, tuple[Callable[[ModuleType, Any], Any], type[Exception]]] = {
    "to_tuple": (lambda lib, h: lib.to_tuple("txt", "foo", handler=h), ValueError),
    "to_tuple alternatives": (lambda lib, h: lib.to_tuple("foo;bar", handler=h), ValueError),
    "rename": (lambda lib, h: lib.rename(x="foo", handler=h), ValueError),
    "rename keep=False": (lambda lib, h: lib.rename(x="foo", keep=False, handler=h), ValueError),
    "map_dict": (lambda lib, h: lib.map_dict(foo=len, handler=h), KeyError),
}

HANDLERS = ["reraise_exception", "ignore_and_continue", "ignore_and_stop"]


@pytest.mark.parametrize("stage", sorted(MISSING))
def test_missing_field_raises_what_webdataset_raises_and_a_key_error(stage: str) -> None:
    make, wds_type = MISSING[stage]
    kind, theirs = outcome(wds, make_samples(), make(wds, wds.reraise_exception))
    assert kind == "raised" and type(theirs) is wds_type
    kind, ours = outcome(ss, make_samples(), make(ss, ss.reraise_exception))
    assert kind == "raised" and isinstance(ours, MissingFieldError)
    assert isinstance(ours, ValueError) and isinstance(ours, KeyError)
    assert "foo" in str(ours) and not str(ours).startswith("'")  # names the field, no KeyError quotes


@pytest.mark.parametrize("handler", HANDLERS[1:])
@pytest.mark.parametrize("stage", sorted(MISSING))
def test_missing_field_under_handlers_agrees(stage: str, handler: str) -> None:
    make, _ = MISSING[stage]

    # Every other sample lacks "foo": continuing keeps the others, stopping ends at the first.
    def source() -> list[dict[str, Any]]:
        samples = make_samples(6)
        for s in samples[1::2]:
            s["foo"] = b"x"
        return samples

    theirs = outcome(wds, source(), make(wds, getattr(wds, handler)))
    ours = outcome(ss, source(), make(ss, getattr(ss, handler)))
    assert_agree(ours, theirs)
    assert ours[0] == "ok" and len(ours[1]) == (3 if handler == "ignore_and_continue" else 0)


def test_warn_handlers_skip_or_stop_like_webdataset() -> None:
    # WebDataset's warn_* sleep 0.5 s per call: one missing field each is enough here.
    samples = make_samples(3)
    samples[0]["foo"] = samples[2]["foo"] = b"x"
    for name, expected in (("warn_and_continue", 2), ("warn_and_stop", 1)):
        with pytest.warns(Warning):
            theirs = run(wds, [dict(s) for s in samples], wds.to_tuple("foo", handler=getattr(wds, name)))
        with pytest.warns(Warning, match="foo"):
            ours = run(ss, [dict(s) for s in samples], ss.to_tuple("foo", handler=getattr(ss, name)))
        assert ours == theirs and len(ours) == expected


@pytest.mark.parametrize(
    "stage",
    [
        lambda lib: lib.to_tuple("txt", "foo", missing_is_error=False),
        lambda lib: lib.to_tuple("txt cls"),
        lambda lib: lib.to_tuple("txt;cls", "cls"),
        lambda lib: lib.rename(text="txt", label="foo;cls"),
        lambda lib: lib.rename(text="txt", keep=False),
        lambda lib: lib.map_dict(txt=bytes.upper, cls=int),
        lambda lib: lib.extract_keys("*.txt", "cls"),
        lambda lib: lib.extract_keys("txt;foo"),
        lambda lib: lib.extract_keys("t*", "foo", ignore_missing=True),
        lambda lib: lib.extract_keys("*", duplicate_is_error=False),
        lambda lib: lib.rename_keys(text="*txt", label="cls"),
        lambda lib: lib.rename_keys(text="*.txt", label="cls"),  # "txt" does not match "*.txt"
        lambda lib: lib.rename_keys(("a", "*"), ("b", "cls"), duplicate_is_error=False),
        lambda lib: lib.rename_keys(text="txt", keep_unselected=True),
        lambda lib: lib.rename_keys(text="txt", other="foo", must_match=False),
    ],
    ids=lambda f: "",
)
def test_field_stage_results_agree(stage: Callable[[ModuleType], Any]) -> None:
    assert_agree(outcome(ss, make_samples(), stage(ss)), outcome(wds, make_samples(), stage(wds)))


@pytest.mark.parametrize(
    ("stage", "message"),
    [
        (lambda lib: lib.extract_keys("foo"), "foo"),
        (lambda lib: lib.extract_keys("*"), "match"),  # several fields match: ValueError
        (lambda lib: lib.rename_keys(text="txt", other="foo"), "foo"),
        (lambda lib: lib.rename_keys(a="*"), "a"),  # two fields become "a"
        (lambda lib: lib.to_tuple("txt", "cls", "foo", missing_is_error=False, none_is_error=True), "None"),
    ],
)
def test_field_stage_errors_are_value_errors_in_both(
    stage: Callable[[ModuleType], Any], message: str
) -> None:
    kind, theirs = outcome(wds, make_samples(), stage(wds))
    assert kind == "raised" and isinstance(theirs, ValueError)
    kind, ours = outcome(ss, make_samples(), stage(ss))
    assert kind == "raised" and isinstance(ours, ValueError) and message in str(ours)


@pytest.mark.parametrize(
    "fs",
    [(bytes.upper,), (bytes.upper, int), (None, int), (bytes.upper, int, str)],
    ids=["fewer functions", "one each", "None is identity", "more functions"],
)
def test_map_tuple_applies_as_webdataset_does(fs: tuple[Any, ...]) -> None:
    # map_tuple(f) on (txt, cls) maps txt only; extra functions are not called.
    def pipeline(lib: ModuleType) -> tuple[str, Any]:
        return outcome(lib, make_samples(), lib.to_tuple("txt", "cls"), lib.map_tuple(*fs))

    assert_agree(pipeline(ss), pipeline(wds))


def test_map_keeps_the_key_like_webdataset() -> None:
    def f(sample: dict[str, Any]) -> dict[str, Any]:
        return {"__key__": "replaced", "n": len(sample["txt"])}

    assert run(ss, make_samples(), ss.map(f)) == run(wds, make_samples(), wds.map(f))


def test_getfirst_and_transform_with_agree() -> None:
    sample = make_samples(1)[0]
    for keys in ("foo;cls", ["txt"], "cls"):
        assert ss.getfirst(sample, keys) == wds.getfirst(sample, keys)
    assert ss.getfirst(sample, "foo", default=3, missing_is_error=False) == 3
    with pytest.raises(ValueError):
        wds.getfirst(sample, "foo")
    with pytest.raises(MissingFieldError):
        ss.getfirst(sample, "foo")
    assert ss.transform_with([1, 2, 3], [None, str]) == wds.transform_with([1, 2, 3], [None, str])
