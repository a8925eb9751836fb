"""Progress bars for long commands: tqdm on a terminal's stderr, nothing otherwise.

A bar is drawn only when stderr is a terminal (so logs, pipes and CI output stay clean) and tqdm
is installed (``pip install 'shardstream[cli]'``); without it the commands run the same, silently.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

__all__ = ["Progress"]


class Progress:
    """A counter that may draw itself; use as a context manager.

    Args:
        total: units expected (``None``: unknown).
        desc: a short label, e.g. ``"verify"``.
        unit: what one unit is (``"shard"``, ``"sample"``).
        enabled: ``None`` (default) draws only on a terminal; ``False`` never draws.
    """

    def __init__(self, total: int | None, desc: str, unit: str, *, enabled: bool | None = None) -> None:
        self.count = 0
        self._bar: Any = None
        if enabled is None:
            enabled = sys.stderr.isatty()
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False)

    def update(self, n: int = 1, **postfix: Any) -> None:
        """Count ``n`` more units; ``postfix`` fields are shown after the bar."""
        self.count += n
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(n)

    def write(self, line: str) -> None:
        """Print a line to stderr without tearing the bar."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            sys.stderr.write(line + "\n")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
