"""Key and extension rules when grouping tar members into samples (each test on the compiled
grouping loop and on the Python one)."""

from __future__ import annotations

import pytest

from shardstream.errors import ShardFormatError
from shardstream.tar.grouping import group_samples, split_key

pytestmark = pytest.mark.usefixtures("tar_parse")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.jpg", ("a", "jpg")),
        ("a.seg.png", ("a", "seg.png")),
        ("dir.v2/x.y/a.JPG", ("dir.v2/x.y/a", "JPG")),
        ("noext", None),
        ("dir/noext", None),
        (".hidden", None),
        ("dir/.hidden.txt", None),
        ("dir.with.dots/", None),
    ],
)
def test_split_key(name: str, expected: tuple[str, str] | None) -> None:
    assert split_key(name) == expected


def members(*names: str) -> list[tuple[str, bytes, int]]:
    return [(n, n.encode(), i * 512) for i, n in enumerate(names)]


def test_grouping_rules() -> None:
    samples = list(
        group_samples(
            members(
                "a.jpg",
                "a.CLS",
                "a.seg.png",
                "__meta__",
                "__index__/x.txt",
                "noext",
                "b.d/.x",
                "dir.v/b.txt",
                "c.txt",
            ),
            "u.tar",
            local_path="/p/u.tar",
        )
    )
    assert [s["__key__"] for s in samples] == ["a", "dir.v/b", "c"]
    assert set(samples[0]) == {"__key__", "__url__", "__local_path__", "jpg", "cls", "seg.png"}
    assert samples[0]["cls"] == b"a.CLS"
    assert samples[1]["__url__"] == "u.tar" and samples[1]["__local_path__"] == "/p/u.tar"


def test_lcase_off_keeps_case() -> None:
    (sample,) = group_samples(members("a.JPG"), "u", lcase=False)
    assert "JPG" in sample


def test_duplicate_extension_is_an_error_naming_member_and_offset() -> None:
    with pytest.raises(ShardFormatError) as info:
        list(group_samples(members("a.jpg", "a.JPG"), "u.tar"))
    assert info.value.member == "a.JPG" and info.value.offset == 512
    assert "duplicate extension" in str(info.value)


def test_non_consecutive_same_key_gives_two_samples() -> None:
    keys = [s["__key__"] for s in group_samples(members("a.x", "b.x", "a.y"), "u")]
    assert keys == ["a", "b", "a"]


def test_select_and_rename_hooks() -> None:
    samples = list(
        group_samples(
            members("a.jpg", "a.txt"),
            "u",
            select_files=lambda n: not n.endswith(".txt"),
            rename_files=lambda n: n.replace(".jpg", ".png"),
        )
    )
    assert set(samples[0]) == {"__key__", "__url__", "png"}
