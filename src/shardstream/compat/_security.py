"""WebDataset's process-wide ``enforce_security`` switch, honoured where it makes things stricter.

shardstream is safe by default (pickle and ``pipe:`` are opt-in per object), so the switch can
only refuse more: with ``shardstream.utils.enforce_security = True``, the WebDataset-named
helpers (``autodecode.torch_loads``/``unpickle_loads``/``decoders``, ``gopen`` on local paths and
``pipe:`` URLs, ``gopen.rewrite_url``) raise ``ValueError`` with WebDataset's messages.
"""

from __future__ import annotations

__all__ = ["refuse_if_enforced"]


class SecurityEnforced(ValueError):
    """Raised by a WebDataset helper while ``utils.enforce_security`` is True."""


def refuse_if_enforced(message: str) -> None:
    """Raise ``SecurityEnforced(message)`` when ``shardstream.utils.enforce_security`` is set."""
    from . import utils

    if utils.enforce_security:
        raise SecurityEnforced(message)
