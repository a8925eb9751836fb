"""Shard specs -> lists of URLs: ``${NAME}`` variables, brace expansion, ``::`` joined lists.

The shard-list stages built on this (``SimpleShardList``, ``ResampledShards``) are in
:mod:`shardstream.readers.shardlists`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import braceexpand

from ..config import spec_variable
from ..errors import ConfigurationError, redact_url

__all__ = ["expand_urls", "expand_variables"]

_VARIABLE = re.compile(r"\$\{(\w+)\}")
#: How often a value may itself name variables (WebDataset's limit).
_MAX_ROUNDS = 10
#: One numeric range and nothing else to expand: ``prefix{000000..999999}suffix``.
_ONE_RANGE = re.compile(r"([^{}\\]*)\{(\d+)\.\.(\d+)\}([^{}\\]*)", re.DOTALL)


def expand_variables(spec: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace every ``${NAME}`` in ``spec`` with the environment variable ``WDS_NAME``.

    WebDataset 1.0.2's rule: values may name further variables (expanded up to 10 rounds); a
    bare ``$NAME`` is left alone. The environment is read through :mod:`shardstream.config`.

    Raises:
        ConfigurationError: (a ValueError) when a named variable is not set.
    """

    def lookup(match: re.Match[str]) -> str:
        value = spec_variable(match.group(1), environ)
        if value is None:
            raise ConfigurationError(
                f"the shard spec {redact_url(spec)!r} names ${{{match.group(1)}}}, but WDS_{match.group(1)} "
                f"is not set; set it (export WDS_{match.group(1)}=...) or write the value into the spec"
            )
        return value

    for _ in range(_MAX_ROUNDS):
        expanded = _VARIABLE.sub(lookup, spec)
        if expanded == spec:
            break
        spec = expanded
    return spec


def expand_urls(urls: str | Iterable[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """Expand ``"${DATA}/a-{000..009}.tar::b-{00..03}.tar"`` (or a list of such) into a flat URL list.

    Each ``::``-separated part has its ``${NAME}`` variables replaced (see
    :func:`expand_variables`), then its braces expanded. Strings inside a list are expanded the
    same way (WebDataset takes a list as it is).

    Raises:
        ConfigurationError: (a ValueError) when the spec expands to nothing or names an unset
            variable.
    """
    if isinstance(urls, str):
        specs = urls.split("::")
    else:
        urls = list(urls)
        if urls and not [u for u in urls if type(u) is not str or _special(u)]:
            return urls  # already a list of URLs (ShardStream hands its own to the planner): no copies
        specs = [u for spec in urls for u in (spec.split("::") if isinstance(spec, str) else [str(spec)])]
    result: list[str] = []
    for spec in specs:
        spec = spec.strip()
        if spec:
            result.extend(_expand(expand_variables(spec, environ)))
    if not result:
        raise ConfigurationError(
            f"the shard spec {urls!r} names no shards; pass a URL, a brace pattern such as "
            "'data-{000000..000099}.tar', or a non-empty list of URLs"
        )
    return result


def _special(url: str) -> bool:
    """Whether a list item may expand to something else (braces, variables, ``::``, escapes,
    surrounding blanks, empty)."""
    return (
        not url or "{" in url or "}" in url or "$" in url or "::" in url or "\\" in url or url != url.strip()
    )


def _expand(spec: str) -> list[str]:
    """``braceexpand``'s expansion of ``spec``; the common one-range spec made directly (several
    times faster than ``braceexpand`` at a million shards), with its zero-padding rule."""
    if "{" not in spec:
        return [spec] if "}" not in spec and "\\" not in spec else list(braceexpand.braceexpand(spec))
    m = _ONE_RANGE.fullmatch(spec)
    if m is None:
        return list(braceexpand.braceexpand(spec))
    prefix, a, b, suffix = m.groups()
    width = max(len(a), len(b)) if any(s.startswith("0") for s in (a, b) if s != "0") else 0
    first, last = int(a), int(b)
    numbers = range(first, last + 1) if first <= last else range(first, last - 1, -1)
    return [f"{prefix}{i:0{width}d}{suffix}" for i in numbers]
