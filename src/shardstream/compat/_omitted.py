"""Stand-ins for WebDataset names shardstream deliberately does not provide: they raise on use.

Importing such a name works (code that imports it but never calls it keeps running); calling or
instantiating it raises :class:`NotImplementedError` saying why and what to use instead.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["omitted"]


def omitted(name: str, why: str) -> type:
    """A class named ``name`` whose instantiation raises ``NotImplementedError(why)``.

    A class serves functions too: calling it is instantiating it.
    """

    def refuse(*args: Any, **kw: Any) -> NoReturn:
        raise NotImplementedError(f"{name} is not provided by shardstream: {why}")

    return type(name, (), {"__new__": refuse, "__doc__": f"Not provided by shardstream: {why}"})
