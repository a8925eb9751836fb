"""Error policies: what a stage does when processing one item raises.

A base-layer module: sources, formats and stages all take a policy.

A handler is called with the exception and returns True to skip the item and go on, False to
stop the stream quietly, or re-raises. WebDataset's names are kept. The warning handlers use
:mod:`logging` (and :mod:`warnings`, once per message text) and never sleep. Their warning
category is ``UserWarning``, as WebDataset's (``warnings.warn(repr(exn))``), so warning filters
written for WebDataset code apply unchanged.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

from .errors import redact_url

__all__ = [
    "Handler",
    "ignore_and_continue",
    "ignore_and_stop",
    "reraise_exception",
    "warn_and_continue",
    "warn_and_stop",
]

log = logging.getLogger("shardstream")

#: The type of an error policy: exception -> True (skip and continue) / False (stop).
Handler = Callable[[BaseException], bool]


def reraise_exception(exn: BaseException) -> bool:
    """Re-raise the exception: the default policy, nothing is skipped silently."""
    raise exn


def ignore_and_continue(exn: BaseException) -> bool:
    """Skip the failing item and go on, without a message (skips are still counted)."""
    return True


def _warn(exn: BaseException, action: str) -> None:
    # (an error from anywhere: a user's map function or a library may have put a URL in it)
    text = redact_url(f"{type(exn).__name__}: {exn} ({action})")
    log.warning("%s", text)
    warnings.warn(text, UserWarning, stacklevel=3)


def warn_and_continue(exn: BaseException) -> bool:
    """Log a warning naming the error, skip the failing item and go on."""
    _warn(exn, "skipped, continuing")
    return True


def ignore_and_stop(exn: BaseException) -> bool:
    """End the stream quietly at the first error."""
    return False


def warn_and_stop(exn: BaseException) -> bool:
    """Log a warning naming the error and end the stream."""
    _warn(exn, "stopping the stream")
    return False
