"""WebDataset's markers for functions on their way out: ``deprecated`` warns, ``obsolete`` raises.

They sit in the base layer, not in :mod:`shardstream.compat`, because WebDataset's ``cache``
module re-exports ``obsolete`` and ``wds.cache`` is :mod:`shardstream.cache` here; the compat
``utils`` module re-exports all three names.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from .config import allow_obsolete

__all__ = ["ObsoleteException", "deprecated", "obsolete"]


def deprecated(arg: Any = None) -> Any:
    """Decorator (``@deprecated`` or ``@deprecated("reason")``): warn with DeprecationWarning on call."""
    reason = None if callable(arg) else arg

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def new_func(*args: Any, **kwargs: Any) -> Any:
            msg = f"Call to deprecated function {func.__name__}."
            if reason is not None:
                msg += " Reason: " + reason
            warnings.warn(msg, category=DeprecationWarning, stacklevel=2)
            return func(*args, **kwargs)

        return new_func

    return decorator(arg) if callable(arg) else decorator


class ObsoleteException(Exception):
    """Raised by a function marked ``@obsolete``."""


def obsolete(func: Callable[..., Any] | None = None, *, reason: str | None = None) -> Any:
    """Decorator (``@obsolete`` or ``@obsolete(reason="...")``): calling the function raises
    :class:`ObsoleteException`, unless ``ALLOW_OBSOLETE`` is a non-zero integer in the
    environment when it is called (WebDataset's switch; ``config.allow_obsolete``)."""
    if func is None:
        return functools.partial(obsolete, reason=reason)
    name = getattr(func, "__name__", repr(func))

    @functools.wraps(func)
    def new_func(*args: Any, **kwargs: Any) -> Any:
        if not allow_obsolete():
            msg = f"Call to obsolete function {name}. Set env ALLOW_OBSOLETE=1 to permit."
            if reason is not None:
                msg += " Reason: " + reason
            raise ObsoleteException(msg)
        return func(*args, **kwargs)

    return new_func
