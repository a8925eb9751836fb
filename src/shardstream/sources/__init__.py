"""Opening URLs as byte streams: a registry from URL scheme to :class:`Source` class.

Backends are imported lazily, so ``import shardstream`` never imports an SDK; when an optional
backend's package is missing, the error names the extra to install. :class:`SchemeRouter` is a
picklable Source over the whole registry; every source reads whole objects or byte ranges
(``open(url, offset=, length=)``). ``storage_options`` apply per scheme: each source gets the
options its constructor accepts (``source_options(scheme)``), and an option that no source
accepts raises ConfigurationError. Fork safety of our threads and locks: see ``shardstream.forks``.
"""

from __future__ import annotations

# The registry table, instance cache and lock are re-exported (``x as x``) for other modules and tests.
from ._registry import _REGISTRY as _REGISTRY
from ._registry import _instances as _instances
from ._registry import _lock as _lock
from ._registry import (
    check_storage_options,
    create_url,
    get_source,
    open_url,
    register_source,
    scheme_of,
    source_options,
    stat_url,
)
from ._router import SchemeRouter
from .base import ObjectInfo, Source, WritableSource, local_path_of

__all__ = [
    "ObjectInfo",
    "SchemeRouter",
    "Source",
    "WritableSource",
    "check_storage_options",
    "create_url",
    "get_source",
    "local_path_of",
    "open_url",
    "register_source",
    "scheme_of",
    "source_options",
    "stat_url",
]
