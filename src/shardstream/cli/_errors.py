"""The usage error of the command line (kept apart so ``shardstream --help`` imports no command)."""

from __future__ import annotations

from ..errors import ConfigurationError

__all__ = ["UsageError"]


class UsageError(ConfigurationError):
    """The command line asks for something impossible; ``shardstream`` exits with status 2."""
