"""WebDataset-compatible ``gopen``: open a URL for reading or writing through the sources registry."""

from __future__ import annotations

from typing import Any, BinaryIO

from ..sources import _REGISTRY, create_url, open_url

__all__ = ["gopen", "gopen_schemes"]

#: Scheme names known to the sources registry (WebDataset exposes a scheme -> opener dict).
gopen_schemes = _REGISTRY


def gopen(url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> BinaryIO:
    """Open ``url`` (a path or any registered scheme) for reading ("rb") or writing ("wb").

    ``pipe:`` URLs need ``allow_pipe=True``; ``storage_options=`` passes source options.
    """
    if mode.startswith("r"):
        return open_url(
            url, storage_options=kw.get("storage_options"), allow_pipe=kw.get("allow_pipe", False)
        )
    if mode.startswith("w"):
        return create_url(
            url, storage_options=kw.get("storage_options"), allow_pipe=kw.get("allow_pipe", False)
        )
    raise ValueError(f"gopen mode {mode!r} is not supported; use 'rb' or 'wb'")
