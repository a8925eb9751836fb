"""WebDataset-compatible ``shardlists`` namespace (thin re-exports).

``DirectoryShardList`` (shards claimed from a directory by concurrent readers) is in
:mod:`.directory_shards`; ``MultiShardSample`` (YAML mixtures, obsolete in WebDataset) is not
provided and raises.

WebDataset's module also binds what it imports (``dataclass``, ``field``, ``islice`` and the
``utils`` module); so does this one, for code that reaches them through it.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass as dataclass
from dataclasses import field as field
from itertools import islice as islice
from typing import Any

from ..pipeline.base import pipelinefilter
from ..pipeline.sampling import resampled
from ..readers.empty import non_empty
from ..readers.shardlists import (
    ResampledShards,
    SimpleShardList,
    shardspec,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from ..shards.spec import expand_urls
from ..shards.spec import expand_variables as envsubst
from . import utils as utils
from ._omitted import omitted
from .directory_shards import (
    DirectoryShardList,
    check_pid_is_running,
    get_pid_from_filename,
    without_last_extension,
)
from .pytorch import torch_names
from .utils import is_iterable, obsolete

#: WebDataset's module-level generator (used by its MultiShardSample).
default_rng = random.Random()

_MIXTURES = "its YAML dataset mixtures (obsolete in WebDataset itself); use shardstream.Mix or RandomMix"
MultiShardSample = omitted("MultiShardSample", _MIXTURES)
MSSource = omitted("MSSource", _MIXTURES)

ResampledShardList = ResampledShards


def expand(s: str) -> str:
    """``~`` and ``$VARS`` expanded in ``s``."""
    return os.path.expanduser(os.path.expandvars(s))


def envlookup(m: Any) -> str:
    """``WDS_<name>`` for a regular-expression match of ``${name}`` (WebDataset's helper)."""
    return envsubst("${" + m.group(1) + "}")


def resampled_(src: Iterable[Any], n: int = sys.maxsize) -> Iterator[Any]:
    """``n`` items drawn with replacement from ``src`` (WebDataset's function; seeded from the OS)."""
    rng = random.Random(os.urandom(20))
    items = list(src)
    for _ in range(n):
        yield rng.choice(items)


def expand_source(source: Any, max_urls: int = int(1e9)) -> list[str]:
    """A spec string, a list of URLs or any iterable of them as a list (WebDataset's helper)."""
    if isinstance(source, str):
        return expand_urls(source)
    if isinstance(source, list):
        return source
    if isinstance(source, (bytes, dict)) or not hasattr(source, "__iter__"):
        raise ValueError(f"cannot handle {type(source)}")
    return list(itertools.islice(source, max_urls))


__all__ = [  # noqa: F822 - IterableDataset: resolved by __getattr__
    "DirectoryShardList",
    "IterableDataset",
    "MSSource",
    "MultiShardSample",
    "ResampledShardList",
    "ResampledShards",
    "SimpleShardList",
    "check_pid_is_running",
    "default_rng",
    "envlookup",
    "envsubst",
    "expand",
    "expand_source",
    "expand_urls",
    "get_pid_from_filename",
    "is_iterable",
    "non_empty",
    "obsolete",
    "pipelinefilter",
    "resampled",
    "resampled_",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
    "without_last_extension",
]


__getattr__ = torch_names(__name__, "IterableDataset")
