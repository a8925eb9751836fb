"""WebDataset's ``log_keys`` stage: append one line per sample passing through to a log file.

Each line is ``index<TAB>__worker__<TAB>__rank__<TAB>__key__`` (``None`` for a missing field),
the format of WebDataset 1.0.2, so scripts that read those logs keep working. The index counts the
samples of this pass of this iterator. Several DataLoader workers may share one file: each line
is one ``write`` on a file opened with ``O_APPEND``, which the kernel appends whole (WebDataset
takes an ``flock`` around each write for the same purpose, which Windows lacks).

A plain generator stage, as in WebDataset: a pipeline that holds it saves a replay count instead
of positions (see ``docs/design.md``); it is a debugging aid, not meant for long training runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from .base import pipelinefilter

__all__ = ["log_keys"]


def _log_keys(data: Iterable[Any], logfile: str | os.PathLike[str] | None = None) -> Iterator[Any]:
    """Yield ``data`` unchanged, logging each sample's key to ``logfile`` (None or "": no log)."""
    if logfile is None or logfile == "":
        yield from data
        return
    fd = os.open(logfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        for i, sample in enumerate(data):
            get = sample.get if isinstance(sample, dict) else _no_field
            os.write(fd, f"{i}\t{get('__worker__')}\t{get('__rank__')}\t{get('__key__')}\n".encode())
            yield sample
    finally:
        os.close(fd)


def _no_field(name: str) -> None:
    return None


#: ``log_keys(logfile=None)``: a stage that logs the key of every sample (see the module doc).
log_keys = pipelinefilter(_log_keys)
