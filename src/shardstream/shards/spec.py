"""Shard specs -> lists of URLs: brace expansion, ``::`` joined lists, sequences of URLs.

The shard-list stages built on this (``SimpleShardList``, ``ResampledShards``) are in
:mod:`shardstream.pipeline.shardlists`.
"""

from __future__ import annotations

from collections.abc import Iterable

import braceexpand

from ..errors import ConfigurationError

__all__ = ["expand_urls"]


def expand_urls(urls: str | Iterable[str]) -> list[str]:
    """Expand ``"a-{000..009}.tar::b-{00..03}.tar"`` (or a list of such) into a flat URL list.

    Raises:
        ConfigurationError: (a ValueError) when the spec expands to nothing.
    """
    if isinstance(urls, str):
        specs = urls.split("::")
    else:
        specs = [u for spec in urls for u in (spec.split("::") if isinstance(spec, str) else [str(spec)])]
    result: list[str] = []
    for spec in specs:
        spec = spec.strip()
        if spec:
            result.extend(braceexpand.braceexpand(spec))
    if not result:
        raise ConfigurationError(
            f"the shard spec {urls!r} names no shards; pass a URL, a brace pattern such as "
            "'data-{000000..000099}.tar', or a non-empty list of URLs"
        )
    return result
