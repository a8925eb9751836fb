"""Tar members -> samples: consecutive members sharing a key form one sample dict.

Key rules follow WebDataset: the key is the directory plus the basename up to its first dot, the
extension is everything after that dot (lower-cased by default). Members whose basename has no
dot, or starts with a dot, belong to no sample and are skipped. Top-level ``__name__`` members and
anything under a ``__name__/`` directory are metadata and skipped. A repeated extension within one
sample is a format error, since one of the two values would otherwise be silently lost.

The common member (a plain name, an extension the sample does not have yet) is grouped in C when
the optional ``_cmembers`` extension is built (``group_members`` in ``_cmembers.c``): one call per
run of members the reader hands over (:func:`~.reader.member_runs`), stopping at any other member,
which the Python loop of :func:`group_runs` takes; without the extension that loop takes every
member. With tiny samples the Python loop was the largest part of the reading thread's time, and
in thread mode that thread's time per sample is part of the serial time that caps the loader
(``benchmarks/results/bench_scaling.md``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import ShardFormatError

#: The compiled loop for the common members (``_cmembers.c``), or ``None`` in an install built
#: without a C compiler, which groups with the Python loop alone.
_group_members: Callable[..., tuple[list[tuple[dict[str, Any], int, int, str]], int, Any, Any, int]] | None
try:
    from ._cmembers import group_members

    _group_members = group_members
except ImportError:
    _group_members = None

__all__ = ["Cursor", "group_runs", "group_samples", "split_key"]

_META = re.compile(r"__[^/]*__($|/)")


class Cursor:
    """Where grouping is in a shard, updated before each sample is yielded.

    Attributes:
        start: byte offset where the sample just yielded begins (its first member).
        next: byte offset where the following sample begins, or -1 when the shard has ended.
        key: the key of the sample just yielded (``None`` before the first), so a saved position
            can name the sample it follows and a restore can check the shard still holds it.
    """

    __slots__ = ("start", "next", "key")

    def __init__(self) -> None:
        self.start = 0
        self.next = 0
        self.key: str | None = None


def split_key(name: str) -> tuple[str, str] | None:
    """``"dir/a.b.jpg"`` -> ``("dir/a", "b.jpg")``; ``None`` when the basename has no usable dot."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot <= slash + 1:  # no dot in the basename, or a leading dot
        return None
    return name[:dot], name[dot + 1 :]


def group_samples(
    members: Iterable[tuple[str, bytes, int]],
    url: str,
    *,
    local_path: str | None = None,
    lcase: bool = True,
    suffixes: set[str] | None = None,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    cursor: Cursor | None = None,
) -> Iterator[dict[str, Any]]:
    """Group ``(name, data, offset)`` members of one shard into sample dicts.

    Each sample has ``__key__``, ``__url__`` (and ``__local_path__`` when the shard is a local
    file) plus one entry per extension.

    Args:
        members: output of :func:`shardstream.tar.reader.iter_members` for one shard.
        url: the shard URL, stored in ``__url__``.
        local_path: stored in ``__local_path__`` when given.
        lcase: lower-case extensions (default True, as WebDataset).
        suffixes: keep only these extensions (others are dropped, the sample is kept).
        select_files: keep only member names for which this returns True.
        rename_files: map member names before splitting them into key and extension.
        cursor: when given, its ``start``/``next`` offsets are set before each sample is yielded.
    """
    return group_runs(
        ([member] for member in members),
        url,
        local_path=local_path,
        lcase=lcase,
        suffixes=suffixes,
        select_files=select_files,
        rename_files=rename_files,
        cursor=cursor,
    )


def group_runs(
    runs: Iterable[list[tuple[str, bytes, int]]],
    url: str,
    *,
    local_path: str | None = None,
    lcase: bool = True,
    suffixes: set[str] | None = None,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    cursor: Cursor | None = None,
) -> Iterator[dict[str, Any]]:
    """:func:`group_samples` over lists of members (:func:`~.reader.member_runs`' output).

    The compiled loop (``_cmembers.group_members``, when built) takes the common members of a
    list in one call: a plain name, a new extension, no ``select_files`` or ``rename_files``. It
    stops at any other member, which the Python loop below takes, so that every skip and error
    has one implementation; without the extension the Python loop takes every member.
    """
    if cursor is None:
        cursor = Cursor()
    fast = _group_members if select_files is None and rename_files is None else None
    start: int = -1
    sample: dict[str, Any] | None = None
    key: str | None = None
    try:
        for run in runs:
            i, count = 0, len(run)
            while i < count:
                if fast is not None:
                    done, i, sample, key, start = fast(
                        run, i, sample, key, start, url, local_path, lcase, suffixes
                    )
                    for complete, cursor.start, cursor.next, cursor.key in done:
                        yield complete
                    if i >= count:
                        break
                name, data, offset = run[i]
                i += 1
                if name[:2] == "__" and _META.match(name):
                    continue
                if rename_files is not None:
                    name = rename_files(name)
                if select_files is not None and not select_files(name):
                    continue
                # Inline split_key: this loop runs once per member on the hot path.
                slash = name.rfind("/")
                dot = name.find(".", slash + 1)
                if dot <= slash + 1:
                    continue
                prefix = name[:dot]
                ext = name[dot + 1 :]
                if lcase:
                    ext = ext.lower()
                if prefix != key or sample is None:
                    if sample is not None:
                        cursor.start, cursor.next, cursor.key = start, offset, key
                        yield sample
                    start = offset
                    key = prefix
                    sample = {"__key__": prefix, "__url__": url}
                    if local_path is not None:
                        sample["__local_path__"] = local_path
                if ext in sample:
                    raise ShardFormatError(
                        f"duplicate extension {ext!r} for key {prefix!r} (two members map to one field)",
                        url=url,
                        member=name,
                        offset=offset,
                    )
                if suffixes is None or ext in suffixes:
                    sample[ext] = data
    except ShardFormatError as err:
        # The shard broke while reading a member. If that member already belongs to the next
        # key, the sample in hand is complete: deliver it before the error reaches the handler.
        # A sample whose own member broke is incomplete and is dropped with the error, and so is
        # the sample in hand when no member is named (a header was unreadable, or the stream
        # ended without its end-of-archive marker): it may be missing fields that were cut off.
        if sample is not None and err.member is not None:
            parts = split_key(err.member)
            if parts is not None and parts[0] != key:
                cursor.start, cursor.next, cursor.key = start, -1, key
                yield sample
        raise
    if sample is not None:
        cursor.start, cursor.next, cursor.key = start, -1, key
        yield sample
