"""The compiled grouping loop (``_cmembers.group_members``) against grouping.py's Python loop:
the same samples, the same cursor at every sample, the same error at the same member and offset,
over archives of random names (metadata members, names without a usable dot, upper-case, non-ASCII
and underscore extensions, repeated extensions, keys that come back later) read through windows of
several sizes, whole and truncated. ``test_grouping.py`` runs its tests on both loops too."""

from __future__ import annotations

import io
import random
import tarfile
from collections.abc import Callable
from typing import Any

import pytest

from shardstream.errors import ShardFormatError
from shardstream.tar import grouping
from shardstream.tar.grouping import Cursor, group_runs
from shardstream.tar.reader import member_runs

#: Only where the compiled path is built (a build without it fails under ``CI=true``).
pytestmark = pytest.mark.usefixtures("compiled_tar_parse")

_STEMS = ["a", "b", "dir/c", "d.x/e", "__meta__", "__m__/x", "d\u00e9j\u00e0", "K", "z" * 90]
_EXTS = ["jpg", "JPG", "Json", "txt", "_x", "__key__", "__url__", "cls", "\u00c4bc", "seg.PNG", ""]


def _tar(names: list[str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in names:
            data = name.encode() * 3
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _names(rng: random.Random) -> list[str]:
    names = []
    for _ in range(rng.randrange(1, 14)):
        stem = rng.choice(_STEMS) + str(rng.randrange(3))
        ext = rng.choice(_EXTS)
        names.append(stem + ("." + ext if ext else "") if rng.random() > 0.05 else "dir/." + ext)
    return names


def _group(data: bytes, compiled: bool, blocksize: int, **kw: Any) -> tuple[list[Any], Any]:
    saved = grouping._group_members
    if not compiled:
        grouping._group_members = None
    cursor = Cursor()
    got: list[Any] = []
    try:
        runs = member_runs(io.BytesIO(data), "mem://s.tar", blocksize=blocksize)
        for sample in group_runs(runs, "mem://s.tar", cursor=cursor, **kw):
            got.append((sample, cursor.start, cursor.next, cursor.key))
    except ShardFormatError as err:
        return got, (str(err), err.member, err.offset)
    finally:
        grouping._group_members = saved
    return got, None


_OPTIONS: list[dict[str, Any]] = [
    {},
    {"lcase": False},
    {"suffixes": {"jpg", "txt"}},
    {"local_path": "/d/s.tar"},
]


def test_same_samples_cursors_and_errors_as_the_python_loop() -> None:
    rng = random.Random(46)
    errors = samples = 0
    for trial in range(400):
        data = _tar(_names(rng))
        if trial % 4 == 3:  # a reader error inside the shard: the sample in hand is kept or dropped
            data = data[: rng.randrange(512, len(data))]
        blocksize = rng.choice((1024, 4096, 1 << 16))
        for options in _OPTIONS:
            fast = _group(data, True, blocksize, **options)
            assert fast == _group(data, False, blocksize, **options)
            samples += len(fast[0])
            errors += fast[1] is not None
    assert samples > 1000 and errors > 200  # the trials reached both the samples and the errors


def test_the_compiled_loop_takes_the_common_members_and_leaves_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real: Callable[..., Any] = grouping._group_members  # type: ignore[assignment]
    calls: list[tuple[int, int]] = []

    def counting(run: list[Any], i: int, *args: Any) -> Any:
        out = real(run, i, *args)
        calls.append((i, out[1]))
        return out

    monkeypatch.setattr(grouping, "_group_members", counting)
    plain = [f"s{k:03d}.{ext}" for k in range(25) for ext in ("json", "bin")]  # 50 KiB: one read
    got = list(group_runs(member_runs(io.BytesIO(_tar(plain)), "mem://a.tar"), "mem://a.tar"))
    assert len(got) == 25 and calls == [(0, 50)]  # one call for the whole run
    calls.clear()
    names = plain[:10] + ["__meta__.json"] + plain[10:20] + ["s009.json"]
    with pytest.raises(ShardFormatError, match="duplicate extension 'json'") as caught:
        list(group_runs(member_runs(io.BytesIO(_tar(names)), "mem://b.tar"), "mem://b.tar"))
    # It stops at the metadata member and at the repeated extension; the Python loop takes
    # those two (skips the first, raises for the second, naming it and its offset).
    assert calls == [(0, 10), (11, 21)]
    assert caught.value.member == "s009.json" and caught.value.offset == 21 * 1024


def test_group_samples_takes_the_compiled_loop_too() -> None:
    """``group_samples`` (members one at a time, from any iterable) gives what the runs give."""
    data = _tar([f"k{k}.{ext}" for k in range(20) for ext in ("JPG", "cls")])
    members = [m for run in member_runs(io.BytesIO(data), "mem://s.tar") for m in run]
    cursor = Cursor()
    one = [
        (s, cursor.start, cursor.next) for s in grouping.group_samples(members, "mem://s.tar", cursor=cursor)
    ]
    assert one == [(s[0], s[1], s[2]) for s in _group(data, True, 1 << 20)[0]]
    assert one[0][0] == {
        "__key__": "k0",
        "__url__": "mem://s.tar",
        "jpg": b"k0.JPG" * 3,
        "cls": b"k0.cls" * 3,
    }


def test_the_compiled_loop_holds_each_member_while_python_code_runs() -> None:
    """A ``suffixes`` object is asked in Python; one that empties the run must not leave the
    loop with a freed member (it stops at the end of the shorter run)."""
    run = [("a.jpg", b"1", 0), ("a.txt", b"2", 512), ("b.jpg", b"3", 1024)]

    class Emptying:
        def __contains__(self, ext: object) -> bool:
            run.clear()
            return True

    group: Callable[..., Any] = grouping._group_members  # type: ignore[assignment]
    done, i, sample, key, start = group(run, 0, None, None, -1, "u", None, True, Emptying())
    assert (done, i, key, start) == ([], 1, "a", 0)
    assert sample == {"__key__": "a", "__url__": "u", "jpg": b"1"}
    with pytest.raises(ValueError, match="negative index"):
        group([], -1, None, None, -1, "u", None, True, None)
