"""The shard names of an index's counts table, and matching a URL list against them fast.

Two forms, both in the index's (sorted) order:

* :class:`BraceNames`: ``prefix{000000..999999}suffix``, for names that are one zero-padded
  numbered series (what ``ShardWriter``, ``pack`` and the Ray writer produce): a few bytes in the
  index, nothing in memory.
* :class:`ListNames`: every name, one per line, held as one string (its characters and a newline
  per name, where a list of strings costs a Python object per name).

Matching: the planner needs each URL's count, aligned with the URL list. Looking each URL's
basename up in a dict costs a million Python-level steps and a million-key dict (the "scan of
the entries, dict lookups" row of ``benchmarks/results/bench_plan.md``). :meth:`match` instead
checks, a chunk of URLs at a time, that the URLs are ``base + name`` for consecutive names: the
chunk is joined and compared with the names' text in C (``str.join``, ``str.replace``, ``==``;
the brace form's text is made with NumPy), so the counts are a slice of the table's array.
Anything else (URLs from several directories, a subset out of order) makes :meth:`match` answer
``None`` and the caller looks names up one by one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["BraceNames", "ListNames", "ShardNames", "brace_of"]

#: URLs joined and compared at once: bounds the transient strings to a few MB.
_CHUNK = 1 << 15
_BRACE = re.compile(r"^([^{}\n]*)\{(\d+)\.\.(\d+)\}([^{}\n]*)$")
_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$", re.DOTALL)
#: The four ASCII digits of 0 .. 9999.
_DIGITS = np.frombuffer("".join(f"{i:04d}" for i in range(10000)).encode(), dtype=np.uint8).reshape(10000, 4)


def _strip(chunk: Sequence[str], base: str) -> str | None:
    """``"name\\n" * len(chunk)`` when every URL of ``chunk`` is ``base + name`` (a name holding
    no newline), else ``None``."""
    text = "\n".join(chunk) + "\n"
    if base:
        if not text.startswith(base) or text.count("\n" + base) != len(chunk) - 1:
            return None
        text = text[len(base) :].replace("\n" + base, "\n")
    return text if text.count("\n") == len(chunk) else None


class BraceNames:
    """Names ``prefix + str(first + i).zfill(width) + suffix`` for ``i`` in ``range(n)``."""

    def __init__(self, prefix: str, first: int, width: int, suffix: str, n: int) -> None:
        self.prefix, self.first, self.width, self.suffix, self.n = prefix, first, width, suffix, n
        self._rows: tuple[bytes, npt.NDArray[np.uint8]] | None = None

    @classmethod
    def parse(cls, brace: str, n: int) -> BraceNames:
        """From ``"prefix{first..last}suffix"`` (equal-width bounds); ValueError otherwise."""
        m = _BRACE.match(brace)
        if m is None or len(m.group(2)) != len(m.group(3)):
            raise ValueError(f"{brace!r} is not prefix{{first..last}}suffix with equal-width bounds")
        first, last = int(m.group(2)), int(m.group(3))
        if last - first + 1 != n:
            raise ValueError(f"{brace!r} names {last - first + 1} shards, the table counts {n}")
        return cls(m.group(1), first, len(m.group(2)), m.group(4), n)

    def brace(self) -> str:
        last = self.first + self.n - 1
        return f"{self.prefix}{{{self.first:0{self.width}d}..{last:0{self.width}d}}}{self.suffix}"

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> str:
        return f"{self.prefix}{self.first + i:0{self.width}d}{self.suffix}"

    def tolist(self) -> list[str]:
        return [self[i] for i in range(self.n)]

    def index(self, name: str) -> int | None:
        """The position of ``name``, or ``None``."""
        digits = name[len(self.prefix) : len(name) - len(self.suffix)]
        if (
            len(digits) != self.width
            or not (digits.isascii() and digits.isdigit())
            or not name.startswith(self.prefix)
            or not name.endswith(self.suffix)
        ):
            return None
        i = int(digits) - self.first
        return i if 0 <= i < self.n else None

    def text(self, j: int, k: int, base: str = "") -> bytes:
        """Names ``j .. j + k - 1``, each after ``base`` and followed by a newline, UTF-8 (built
        with NumPy)."""
        head, tail = (base + self.prefix).encode(), self.suffix.encode() + b"\n"
        width = self.width
        if self._rows is None or self._rows[0] != head or len(self._rows[1]) < k:
            rows = np.empty((max(k, _CHUNK), len(head) + width + len(tail)), dtype=np.uint8)
            rows[:, : len(head)] = np.frombuffer(head, dtype=np.uint8)
            rows[:, len(head) + width :] = np.frombuffer(tail, dtype=np.uint8)
            # Kept: the next chunk changes only the digits. (Two threads matching with one table
            # at once may overwrite each other's digits: a mismatch, and a per-URL lookup.)
            self._rows = (head, rows)
        out = self._rows[1][:k]
        numbers = np.arange(self.first + j, self.first + j + k, dtype=np.int64)
        # Four digits at a time from a table (one division per four digits, not per digit).
        end = len(head) + width
        for p in range(-(-width // 4)):
            digits = _DIGITS[numbers // 10 ** (4 * p) % 10000]
            lo = max(end - 4 * (p + 1), len(head))
            out[:, lo : end - 4 * p] = digits[:, 4 - (end - 4 * p - lo) :]
        return out.tobytes()

    def match(self, urls: Sequence[str], base: str, j: int) -> bool:
        """Whether ``urls[i] == base + self[j + i]`` for every ``i``."""
        if j < 0 or j + len(urls) > self.n:
            return False
        for start in range(0, len(urls), _CHUNK):
            chunk = urls[start : start + _CHUNK]
            # Equal texts with a newline after each of the k names: k URLs without newlines,
            # each its name.
            if ("\n".join(chunk) + "\n").encode() != self.text(j + start, len(chunk), base):
                return False
        return True


class ListNames:
    """Names held as one string, each followed by a newline."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = text.count("\n")
        self._positions: dict[str, int] | None = None
        self._finds = 0

    def __len__(self) -> int:
        return self.n

    def tolist(self) -> list[str]:
        return self.text.split("\n")[:-1]

    def index(self, name: str) -> int | None:
        """The position of ``name``, or ``None``: a search of the text for the first few names,
        then (many lookups: a caller that matches names one by one) a dict."""
        if self._positions is None:
            self._finds += 1
            if self._finds <= 8:
                at = self.find(name)
                return None if at is None else at[0]
            self._positions = {n: i for i, n in enumerate(self.tolist())}
        return self._positions.get(name)

    def find(self, name: str) -> tuple[int, int] | None:
        """``(position, offset in the text)`` of ``name``, or ``None``."""
        if "\n" in name:
            return None
        if self.text.startswith(name + "\n"):
            return 0, 0
        at = self.text.find("\n" + name + "\n")
        if at < 0:
            return None
        return self.text.count("\n", 0, at + 1), at + 1

    def match(self, urls: Sequence[str], base: str, j: int) -> bool:
        """Whether ``urls[i] == base + self[j + i]`` for every ``i``."""
        found = self.find(urls[0][len(base) :]) if urls else None
        if found is None or found[0] != j:
            return False
        at = found[1]
        for start in range(0, len(urls), _CHUNK):
            text = _strip(urls[start : start + _CHUNK], base)
            if text is None or not self.text.startswith(text, at):
                return False
            at += len(text)
        return True


ShardNames = BraceNames | ListNames


def brace_of(names: Sequence[str]) -> BraceNames | None:
    """The brace form of sorted ``names`` when they are one zero-padded numbered series, else ``None``."""
    if not names:
        return None
    first, last = _NUMBERED.match(names[0]), _NUMBERED.match(names[-1])
    if first is None or last is None or (first.group(1), first.group(3)) != (last.group(1), last.group(3)):
        return None
    prefix, suffix, width = first.group(1), first.group(3), len(first.group(2))
    if len(last.group(2)) != width or set("{}\n") & set(prefix + suffix):
        return None
    start = int(first.group(2))
    if int(last.group(2)) - start + 1 != len(names):
        return None
    candidate = BraceNames(prefix, start, width, suffix, len(names))
    if "\n".join(names) + "\n" != candidate.text(0, len(names)).decode():
        return None
    return candidate
