"""WebDataset's ``typecheck`` module: its list of module names, without the typeguard import hook.

WebDataset installs typeguard's import hook on its modules when typeguard is importable;
shardstream is checked statically (``mypy --strict``) and installs no hook.
"""

from __future__ import annotations

__all__ = ["modules"]

#: The WebDataset modules that ``webdataset.typecheck`` would instrument.
modules = [
    "tenbin",
    "autodecode",
    "cache",
    "cborsiterators",
    "compat",
    "extradatasets",
    "filters",
    "gopen",
    "handlers",
    "mix",
    "pipeline",
    "shardlists",
    "tariterators",
    "utils",
    "writer",
]
