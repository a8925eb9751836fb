"""Parsing ``--storage-option KEY=VALUE`` arguments, shared by the subcommands that open URLs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError

__all__ = ["parse_options"]


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> dict; ``true``/``false`` become booleans, numbers become int or float."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigurationError(
                f"--storage-option {pair!r}: expected KEY=VALUE, e.g. endpoint_url=http://127.0.0.1:8333"
            )
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for convert in (int, float):
                try:
                    value = convert(raw)
                    break
                except ValueError:
                    pass
        options[key] = value
    return options
