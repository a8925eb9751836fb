"""WebDataset's ``multi`` module (a ZMQ-based ``MultiLoader``): deliberately not provided.

``webdataset.multi`` needs ``pyzmq`` and sends samples as pickles over sockets. Use
:class:`shardstream.WebLoader` (worker processes) or :class:`shardstream.Loader` (threads,
processes or both) instead.
"""

from __future__ import annotations

import pickle
import weakref
from typing import Any

from ._omitted import omitted

__all__ = ["EOF", "MultiLoader", "all_pids", "reader", "the_protocol"]

_WHY = "its ZMQ MultiLoader is not ported; use shardstream.WebLoader or shardstream.Loader"

#: WebDataset's pickle protocol for the samples it sends.
the_protocol = pickle.HIGHEST_PROTOCOL
#: WebDataset's set of reader processes (always empty here).
all_pids: weakref.WeakSet[Any] = weakref.WeakSet()


class EOF:
    """The end-of-stream marker of WebDataset's MultiLoader (keyword arguments become attributes)."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


MultiLoader = omitted("webdataset.multi.MultiLoader", _WHY)
reader = omitted("webdataset.multi.reader", _WHY)
