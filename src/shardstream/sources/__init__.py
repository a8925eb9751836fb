"""Opening URLs as byte streams: a registry from URL scheme to :class:`Source` class.

Backends are imported lazily, so ``import shardstream`` never imports an SDK; when an optional
backend's package is missing, the error names the extra to install. :class:`SchemeRouter` is a
picklable Source over the whole registry; every source reads whole objects or byte ranges
(``open(url, offset=, length=)``). ``storage_options`` apply per scheme: each source gets the
options its constructor accepts (``source_options(scheme)``), and an option that no source
accepts raises ConfigurationError. Fork safety of our threads and locks: see ``shardstream.forks``.

Optional capabilities (open-ahead, size, whole-object ``get_into``, bulk ``get_many`` with typed
:class:`Outcome` kinds) are declared with defaults on :class:`SourceBase` (:mod:`.base`,
:mod:`.many`); the wire itself lives below, in :mod:`shardstream.net`.
"""

from __future__ import annotations

from ._registry import (
    check_pipe,
    check_storage_options,
    create_url,
    forget_sources,
    get_source,
    open_url,
    read_url,
    register_source,
    registered_schemes,
    scheme_of,
    source_options,
    stat_url,
    unregister_source,
)
from ._retry import RetryPolicy
from ._router import SchemeRouter
from ._status import is_throttle
from .base import ObjectInfo, Source, SourceBase, WritableSource, local_path_of, with_defaults
from .many import FAILED, OK, RETRY, THROTTLED, ManyGets, Outcome
from .ranges import limit

__all__ = [
    "FAILED",
    "OK",
    "RETRY",
    "THROTTLED",
    "ManyGets",
    "ObjectInfo",
    "Outcome",
    "RetryPolicy",
    "SchemeRouter",
    "Source",
    "SourceBase",
    "WritableSource",
    "check_pipe",
    "check_storage_options",
    "create_url",
    "forget_sources",
    "get_source",
    "is_throttle",
    "limit",
    "local_path_of",
    "open_url",
    "read_url",
    "register_source",
    "registered_schemes",
    "scheme_of",
    "source_options",
    "stat_url",
    "unregister_source",
    "with_defaults",
]
