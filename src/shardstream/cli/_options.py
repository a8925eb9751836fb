"""Parsing ``--storage-option KEY=VALUE`` arguments, and the usage error the commands raise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError
from ._errors import UsageError

__all__ = ["UsageError", "parse_options", "parse_size"]


def parse_size(text: str) -> int:
    """``"500G"``, ``"1.5T"``, ``"10MB"``, ``"123"`` -> bytes (decimal units)."""
    units = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
    raw = text.strip().upper().removesuffix("B")
    number, unit = (raw[:-1], raw[-1]) if raw[-1:] in units and raw[-1:] else (raw, "")
    try:
        value = float(number) * units[unit]
    except (ValueError, KeyError):
        raise UsageError(
            f"size {text!r}: expected bytes with an optional unit, e.g. 500G, 1.5T, 10MB"
        ) from None
    if value < 0:
        raise UsageError(f"size {text!r} is negative")
    return int(value)


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> dict; ``true``/``false`` become booleans, numbers become int or float."""
    options: dict[str, Any] = {}
    for number, pair in enumerate(pairs, 1):
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            # (not quoted: without its "=" there is no telling a name from a key pasted alone)
            raise ConfigurationError(
                f"--storage-option number {number} of {len(pairs)} has no KEY= before its value: "
                "expected KEY=VALUE, e.g. endpoint_url=http://127.0.0.1:8333"
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
