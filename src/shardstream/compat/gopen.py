"""WebDataset-compatible ``gopen``: open a URL for reading or writing through the sources registry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, BinaryIO

from ..sources import _REGISTRY, create_url, open_url

__all__ = ["gopen", "gopen_schemes"]

#: Scheme names known to the sources registry (WebDataset exposes a scheme -> opener dict).
gopen_schemes = _REGISTRY


def gopen(
    url: str,
    mode: str = "rb",
    bufsize: int = 8192,
    *,
    storage_options: Mapping[str, Any] | None = None,
    allow_pipe: bool = False,
) -> BinaryIO:
    """Open ``url`` (a path or any registered scheme) for reading ("rb") or writing ("wb").

    ``pipe:`` URLs need ``allow_pipe=True``; ``storage_options=`` passes source options.
    ``bufsize`` is WebDataset's buffering size; our sources read in large blocks of their own, so
    only the default is accepted (another value raises rather than being silently ignored).
    """
    if bufsize != 8192:
        raise TypeError(
            f"gopen(bufsize={bufsize}) has no effect: shardstream's sources choose their own block "
            "sizes; drop the argument"
        )
    if mode.startswith("r"):
        return open_url(url, storage_options=storage_options, allow_pipe=allow_pipe)
    if mode.startswith("w"):
        return create_url(url, storage_options=storage_options, allow_pipe=allow_pipe)
    raise ValueError(f"gopen mode {mode!r} is not supported; use 'rb' or 'wb'")
