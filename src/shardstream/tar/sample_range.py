"""One sample from its byte range: the bytes ``[offset, offset + size)`` of a shard, parsed as tar.

Random access reads a sample's range (the ``offsets`` and ``sizes`` of the shard's sidecar) and
parses it with the streaming reader and the same key grouping, so the sample is the dict the
streaming path yields (``__key__``, ``__url__``, one field of bytes per extension). A range
holds no end-of-archive marker, so a zero block is appended before parsing: the reader stops
there, after the range's last member.

A range that is not exactly one sample (no tar header at its start, a member cut at its end,
members of two keys) means the index does not describe the shard: :class:`RangeMismatch` says
what was found, for the caller to name the index and the fix.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from ..errors import ShardFormatError
from .grouping import group_runs
from .reader import DEFAULT_MAX_MEMBER_SIZE, member_runs

__all__ = ["RangeMismatch", "parse_sample", "split_range"]

#: One zero block: the reader stops there. Not two: a range cut short by a block would let
#: the last member take the first zero block as its data and still parse.
_END = bytes(512)

Bytes = bytes | bytearray | memoryview


class RangeMismatch(ValueError):
    """Bytes that are not one whole sample, and what was found there instead.

    Attributes:
        reason: what is wrong, in words.
        keys: the sample keys found in the range (possibly none).
        offset: where in the shard the problem was found.
    """

    def __init__(self, reason: str, *, keys: list[str], offset: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.keys = keys
        self.offset = offset


def parse_sample(
    data: Bytes,
    url: str,
    offset: int,
    *,
    local_path: str | None = None,
    max_member_size: int | None = DEFAULT_MAX_MEMBER_SIZE,
) -> dict[str, Any]:
    """The one sample whose bytes are ``data``, found at byte ``offset`` of shard ``url``.

    Args:
        data: the sample's bytes (its members, headers and padding included).
        url: the shard's URL (``__url__``; error messages).
        offset: where ``data`` starts in the shard (reported offsets count from the shard's start).
        local_path: stored in ``__local_path__`` when given (a local or cached shard).
        max_member_size: as for the streaming reader.

    Raises:
        RangeMismatch: ``data`` is not exactly one sample (see the module doc).
    """
    stream = io.BytesIO(b"".join((data, _END)))
    runs = member_runs(
        stream,
        url,
        blocksize=max(len(data) + len(_END), 1 << 12),  # one buffer, sized to the range
        offset=offset,
        max_member_size=max_member_size,
    )
    samples: list[dict[str, Any]] = []
    try:
        for sample in group_runs(runs, url, local_path=local_path):
            samples.append(sample)
            if len(samples) > 1:
                break
    except ShardFormatError as exc:
        keys = [s["__key__"] for s in samples]
        raise RangeMismatch(f"{exc.reason} (member {exc.member!r})", keys=keys, offset=exc.offset) from exc
    keys = [s["__key__"] for s in samples]
    if len(samples) != 1:
        what = (
            "no sample" if not samples else f"members of {len(samples)}+ keys ({', '.join(map(repr, keys))})"
        )
        raise RangeMismatch(f"{what} in {len(data)} bytes", keys=keys, offset=offset)
    return samples[0]


def split_range(data: Bytes, start: int, pieces: list[tuple[int, int]]) -> Iterator[memoryview]:
    """Views of ``data`` (the bytes of a shard from offset ``start``) for each ``(offset, size)``
    of ``pieces``, which must lie within it."""
    view = memoryview(data)
    for offset, size in pieces:
        yield view[offset - start : offset - start + size]
