"""The ``shardstream`` command line (extra: ``shardstream[cli]``): bench, demo, ls, cat, stat,
verify, index, cache, write, pack, unpack (``shardstream --help`` lists them with one line each)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    # Imported here, not at module level, so ``python -m shardstream.cli`` does not import
    # ``__main__`` twice (runpy warns when the package has already imported it).
    from .__main__ import main as _main

    return _main(argv)
