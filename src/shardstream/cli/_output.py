"""The command line's text streams, with credentials removed from everything written to them.

Reports print the URLs they were given (``ls``, ``stat``, ``verify``, with ``--json`` too), error
lines quote exceptions of any origin, and ``-v`` log lines go to stderr: rather than redact at
each of those places, :func:`redacting_streams` wraps ``sys.stdout`` and ``sys.stderr`` while a
command runs, so every text write passes through :func:`~shardstream.errors.redact_url`. Binary
output (``cat``, ``unpack -``) is written to ``sys.stdout.buffer`` and passes untouched.

A write is redacted on its own, so a URL must not be split over two writes: ``json.dump`` writes
each string whole, and the commands write whole lines.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, cast

from ..errors import redact_url

__all__ = ["Redacting", "redacting_streams"]


class Redacting:
    """A text stream that writes to ``inner`` what :func:`redact_url` leaves of each write; every
    other attribute (``buffer``, ``fileno``, ``isatty``, ``encoding``, ...) is ``inner``'s."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(redact_url(text))
        return len(text)  # (what the caller asked to write: its bookkeeping stays right)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextlib.contextmanager
def redacting_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` redacted while the block runs (restored afterwards)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = cast(TextIO, Redacting(out)), cast(TextIO, Redacting(err))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
