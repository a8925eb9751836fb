"""The counts table at the head of ``_info.json``: every shard's sample count, read without the rest.

Layout of an index :func:`~shardstream.tar.index.write_index` writes (one JSON object; the first
two lines are the *head*)::

    {"format": "shardstream-index", "version": 1, "head": 5368962,
     "table": {"shards": 1000000, "brace": "train-{000000..999999}.tar", "dtype": "<u4",
               "samples": "<base64 of the counts>", "sidecars": true},
     "shards": [
      {"url": "train-000000.tar", "samples": 1000, "bytes": 52428800, "sidecar": true},
      ...
    ]}

``head`` is the byte length of the first two lines, so a reader that needs only the counts
reads bytes ``[0, head)`` (one or two ranged requests, whatever the index's size) and parses
one small object: the counts are one base64 string (``dtype`` little-endian, ``<u4`` unless a
count needs ``<i8``), and the names a brace pattern (``brace``) when they are one numbered
series, else one string of names each followed by a newline (``names``). ``sidecars`` says
which shards have an offsets sidecar (:mod:`.offsets`): ``true``, ``false`` or a base64 bit
map (``numpy.packbits``, shard order). The table lists the same shards, in the same order, as
``shards``, the source of truth: a reader uses the table only when the layout is byte for byte
as written (a file rewritten by another tool is parsed in full, as are indexes without a table).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import IndexFormatError, redact_url
from ..sources import open_url, read_url
from ._names import BraceNames, ListNames, ShardNames, brace_of

__all__ = ["CountTable", "encode_table", "index_text", "read_head"]

#: Bytes read first: the whole index of up to a few thousand shards, else its first line.
PROBE = 1 << 16
_FIRST = re.compile(rb'\{"format": "shardstream-index", "version": 1, "head": (\d+),\n')
_SHARDS = b' "shards": ['


class CountTable(Mapping[str, int]):
    """Sample counts of an index's shards: a read-only ``{name: samples}`` mapping, in index order.

    Attributes:
        url: the index file.
        names: the shard names (brace pattern or list).
        samples: each shard's samples (``int64``, index order).
        sidecars: which shards have an offsets sidecar (``None``: none has).
    """

    def __init__(
        self,
        url: str,
        names: ShardNames,
        samples: npt.NDArray[np.int64],
        sidecars: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        self.url, self.names, self.samples, self.sidecars = url, names, samples, sidecars

    @classmethod
    def from_counts(cls, url: str, counts: Mapping[str, int]) -> CountTable:
        """A table of a ``{name: samples}`` mapping (an index without a table)."""
        names = sorted(counts)
        if any("\n" in n for n in names):
            raise IndexFormatError(f"index {redact_url(url)} names a shard with a newline; rename it")
        return cls(
            url, ListNames("".join(f"{n}\n" for n in names)), np.array([counts[n] for n in names], np.int64)
        )

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names.tolist())

    def __getitem__(self, name: str) -> int:
        i = self.names.index(name)
        if i is None:
            raise KeyError(name)
        return int(self.samples[i])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.names.index(name) is not None

    def locate(self, urls: Sequence[str]) -> int | None:
        """``j`` such that ``urls[i]`` is shard ``j + i`` of the table, prefixed by the first URL's
        directory, for every ``i``; ``None`` when the URLs are not such a run (see :mod:`._names`)."""
        if not urls:
            return None
        if isinstance(self.names, ListNames) and "/" in self.names.text:
            return None  # names with directories: the caller's basename lookups decide
        first = urls[0]
        base = first[: first.rfind("/") + 1]
        j = self.names.index(first[len(base) :])
        if j is None or j + len(urls) > len(self.names):
            return None
        return j if self.names.match(urls, base, j) else None

    def counts_for(self, urls: Sequence[str]) -> npt.NDArray[np.int64] | None:
        """The counts of ``urls`` (a view of :attr:`samples`) when :meth:`locate` finds them, else
        ``None``."""
        j = self.locate(urls)
        return None if j is None else self.samples[j : j + len(urls)]

    def __repr__(self) -> str:
        return f"CountTable({redact_url(self.url)!r}, shards={len(self)}, samples={int(self.samples.sum())})"


def encode_table(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``table`` object of sorted ``entries`` (``None``: a name holds a newline, so no table)."""
    names = [str(e["url"]) for e in entries]
    if any("\n" in n for n in names):
        return None
    counts = np.array([int(e["samples"]) for e in entries], dtype=np.int64)
    dtype = "<u4" if not len(counts) or (counts.min() >= 0 and counts.max() < 1 << 32) else "<i8"
    table: dict[str, Any] = {"shards": len(names)}
    brace = brace_of(names)
    if brace is not None:
        table["brace"] = brace.brace()
    else:
        table["names"] = "".join(f"{n}\n" for n in names)
    table["dtype"] = dtype
    table["samples"] = base64.b64encode(counts.astype(dtype).tobytes()).decode("ascii")
    flags = np.array([bool(e.get("sidecar")) or "offsets" in e for e in entries], dtype=bool)
    table["sidecars"] = (
        bool(flags.all())
        if flags.all() or not flags.any()
        else base64.b64encode(np.packbits(flags).tobytes()).decode()
    )
    return table


def _decode(url: str, table: Mapping[str, Any]) -> CountTable:
    n = int(table["shards"])
    names: ShardNames
    if "brace" in table:
        names = BraceNames.parse(str(table["brace"]), n)
    else:
        names = ListNames(str(table["names"]))
        if len(names) != n:
            raise ValueError(f"{len(names)} names for {n} shards")
    dtype = str(table["dtype"])
    if dtype not in ("<u4", "<i8"):
        raise ValueError(f"unknown dtype {dtype!r}")
    samples = np.frombuffer(base64.b64decode(table["samples"], validate=True), dtype=dtype).astype(np.int64)
    if len(samples) != n:
        raise ValueError(f"{len(samples)} counts for {n} shards")
    flags = table.get("sidecars", False)
    sidecars: npt.NDArray[np.bool_] | None = None
    if flags is True:
        sidecars = np.ones(n, dtype=bool)
    elif isinstance(flags, str):
        bits = np.frombuffer(base64.b64decode(flags, validate=True), np.uint8)
        sidecars = np.unpackbits(bits)[:n].astype(bool)
        if len(sidecars) != n:
            raise ValueError(f"{len(sidecars)} sidecar flags for {n} shards")
    return CountTable(url, names, samples, sidecars)


def index_text(table: Mapping[str, Any] | None, lines: Sequence[str], version: int, format_: str) -> bytes:
    """The whole index file: head (when there is a table) and one shard entry per line."""
    key = _SHARDS.decode()
    shards = (key + "\n  " + ",\n  ".join(lines) + "\n]}\n") if lines else key + "]}\n"
    if table is None:
        return f'{{"format": "{format_}", "version": {version},\n{shards}'.encode()
    second = f' "table": {json.dumps(table)},\n'.encode()
    head = 0
    while True:  # the head's own digits count: at most two rounds
        first = f'{{"format": "{format_}", "version": {version}, "head": {head},\n'.encode()
        if len(first) + len(second) == head:
            return first + second + shards.encode()
        head = len(first) + len(second)


def _read(url: str, offset: int, length: int | None, storage_options: Mapping[str, Any] | None) -> bytes:
    try:
        return read_url(url, offset=offset, length=length, storage_options=storage_options)
    except TypeError:  # a source registered by a user before ranged reads: all, then cut
        with open_url(url, offset=offset, storage_options=storage_options) as whole:
            return bytes(whole.read()[:length])


def read_head(url: str, storage_options: Mapping[str, Any] | None) -> tuple[CountTable | None, bytes, bool]:
    """The counts table of index ``url`` (``None``: it has none, or not as written), the bytes
    read, and whether they are the whole file.

    Raises:
        ShardNotFoundError: no index there.
        IndexFormatError: the file ends inside its head, or the table is corrupt.
    """
    data = _read(url, 0, PROBE, storage_options)
    whole = len(data) < PROBE
    first = _FIRST.match(data)
    if first is None:
        return None, data, whole
    need = int(first.group(1)) + len(_SHARDS)
    if len(data) < need and not whole:
        data += _read(url, len(data), need - len(data), storage_options)
        whole = len(data) < need
    if len(data) < need or data[need - len(_SHARDS) - 2 : need] != b",\n" + _SHARDS:
        if not whole or _complete_json(data):
            return None, data, whole  # rewritten by another tool: the caller parses it in full
        raise IndexFormatError(
            f"index {redact_url(url)} is truncated or corrupt: {len(data)} bytes, and its first line "
            f"says the counts table alone takes {need - len(_SHARDS)} bytes. Copy it again, or rewrite it "
            f"with `shardstream index {redact_url(url.rpartition('/')[0] or '.')}`"
        )
    try:
        table = _decode(url, json.loads(data[: need - len(_SHARDS) - 2] + b"}")["table"])
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise IndexFormatError(
            f"index {redact_url(url)} has a corrupt counts table ({exc}); rewrite it with `shardstream "
            f"index {redact_url(url.rpartition('/')[0] or '.')}`"
        ) from exc
    return table, data, whole


def _complete_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True
