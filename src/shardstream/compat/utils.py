"""WebDataset-compatible ``utils`` namespace: the helpers WebDataset 1.0.2 code imports from it.

They behave as WebDataset's do, except where noted: ``make_seed`` hashes strings stably (Python's
``hash`` of a string changes with every process), ``repeatedly`` honours ``batchsize=`` and stops
at an empty pass instead of spinning, and ``enforce_security`` is always False (unsafe features
are opt-in per object here: ``allow_pipe=``, ``allow_pickle=``).
"""

from __future__ import annotations

import fnmatch
import glob
import importlib
import itertools
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import braceexpand
import numpy as np

from ..deprecation import ObsoleteException, deprecated, obsolete
from ..pipeline.base import PipelineStage
from ..shards.world import World, derive_seed

__all__ = [
    "ObsoleteException",
    "PipelineStage",
    "compute_sample_weights",
    "deprecated",
    "enforce_security",
    "fnmatch_with_braces",
    "glob_with_braces",
    "guess_batchsize",
    "identity",
    "is_iterable",
    "lookup_sym",
    "make_seed",
    "obsolete",
    "pytorch_worker_info",
    "pytorch_worker_seed",
    "repeatedly",
    "repeatedly0",
    "safe_eval",
]

#: WebDataset's process-wide security switch (``WDS_SECURE``). Always False: shardstream refuses
#: ``pipe:`` URLs and pickle unless the dataset, writer or decoder opts in.
enforce_security = False


def pytorch_worker_info(group: Any = None) -> tuple[int, int, int, int]:
    """``(rank, world_size, worker, num_workers)`` of the calling process."""
    world = World.current(group)
    return world.rank, world.world_size, world.worker, world.num_workers


def pytorch_worker_seed(group: Any = None) -> int:
    """WebDataset's per-reader seed: ``rank * 1000 + worker``."""
    world = World.current(group)
    return world.rank * 1000 + world.worker


def make_seed(*args: Any) -> int:
    """A 31-bit seed from arbitrary values: WebDataset's formula, with the same result for numbers
    (whose ``hash`` is stable); other values are hashed stably across processes."""
    seed = 0
    for arg in args:
        h = hash(arg) if isinstance(arg, (int, float)) else derive_seed(0, arg)
        seed = (seed * 31 + h) & 0x7FFFFFFF
    return seed


def identity(x: Any) -> Any:
    return x


def is_iterable(obj: Any) -> bool:
    """True for iterables other than ``str`` and ``bytes``."""
    if isinstance(obj, (str, bytes)):
        return False
    try:
        iter(obj)
    except TypeError:
        return False
    return True


def glob_with_braces(pattern: str) -> list[str]:
    """``glob`` each brace expansion of ``pattern``."""
    return [f for pat in braceexpand.braceexpand(pattern) for f in glob.glob(pat)]


def fnmatch_with_braces(filename: str, pattern: str) -> bool:
    """True when ``filename`` matches one brace expansion of ``pattern``."""
    return any(fnmatch.fnmatch(filename, pat) for pat in braceexpand.braceexpand(pattern))


def safe_eval(s: str, expr: str = "{}") -> Any:
    """Evaluate ``expr.format(s)`` for an identifier-like ``s`` (WebDataset's helper)."""
    if re.sub("[^A-Za-z0-9_]", "", s) != s:
        raise ValueError(f"safe_eval: illegal characters in: '{s}'")
    return eval(expr.format(s))  # noqa: S307 - WebDataset's contract; s is a plain identifier


def lookup_sym(sym: str, modules: list[str]) -> Any:
    """The first attribute ``sym`` of the named modules (relative names: within shardstream)."""
    for name in modules:
        module = importlib.import_module(name, package="shardstream")
        result = getattr(module, sym, None)
        if result is not None:
            return result
    return None


def repeatedly0(
    loader: Iterable[Any], nepochs: int = sys.maxsize, nbatches: int = sys.maxsize
) -> Iterator[Any]:
    """``nepochs`` passes over ``loader``, at most ``nbatches`` items each."""
    for _ in range(nepochs):
        yield from itertools.islice(loader, nbatches)


def guess_batchsize(batch: Any) -> int:
    """The length of a batch's first column (``len(batch[0])``)."""
    return len(batch[0])


def repeatedly(
    source: Iterable[Any],
    nepochs: int | None = None,
    nbatches: int | None = None,
    nsamples: int | None = None,
    batchsize: Callable[..., int] = guess_batchsize,
) -> Iterator[Any]:
    """Iterate ``source`` again and again (WebDataset's ``utils.repeatedly``).

    Stops after ``nbatches`` items or once ``nsamples`` samples were yielded (counted with
    ``batchsize(item)``, by default the length of the item's first column), or at the end of the
    pass in which ``nepochs`` is reached (as in WebDataset, at least one pass runs). Unlike
    WebDataset, it also stops at a pass that yields nothing, and honours ``batchsize``.
    """
    epoch = batches = total = 0
    while True:
        count = 0
        for sample in source:
            yield sample
            count += 1
            batches += 1
            if nbatches is not None and batches >= nbatches:
                return
            if nsamples is not None:
                total += batchsize(sample)
                if total >= nsamples:
                    return
        epoch += 1
        if count == 0 or (nepochs is not None and epoch >= nepochs):
            return


def compute_sample_weights(n_w_pairs: Iterable[tuple[float, float]]) -> Any:
    """Weights ``n * w`` of ``(n, w)`` pairs, scaled so that the largest is 1."""
    pairs = list(n_w_pairs)
    weighted = np.array([p[0] for p in pairs]) * np.array([p[1] for p in pairs])
    return weighted / np.amax(weighted)
