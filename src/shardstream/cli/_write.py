"""``shardstream write DIR PATTERN``: pack a directory tree of files into WebDataset shards.

Files are grouped into samples by WebDataset's key rule applied to their path relative to DIR:
``train/cat01.jpg`` and ``train/cat01.cls`` form the sample ``train/cat01`` with fields ``jpg``
and ``cls``. Samples are written in sorted key order (fields sorted by extension), so the same
directory always gives byte-identical shards (mtime fixed to 0). Files whose name has no
extension, or starts with a dot, are skipped and counted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator
from itertools import groupby
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError

__all__ = ["add_arguments", "collect", "run"]

log = logging.getLogger(__name__)


def collect(root: Path) -> tuple[list[tuple[str, str, Path]], int]:
    """``([(key, ext, path), ...] sorted, skipped)`` for the files under ``root``."""
    from ..tar.grouping import split_key

    entries: list[tuple[str, str, Path]] = []
    skipped = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in filenames:
            path = Path(dirpath) / filename
            rel = path.relative_to(root).as_posix()
            parts = split_key(rel)
            if parts is None:
                skipped += 1
                log.info("skipping %s: no extension in the file name", rel)
                continue
            entries.append((parts[0], parts[1], path))
    entries.sort(key=lambda e: (e[0], e[1]))
    return entries, skipped


def _samples(entries: list[tuple[str, str, Path]]) -> Iterator[dict[str, Any]]:
    for key, group in groupby(entries, key=lambda e: e[0]):
        sample: dict[str, Any] = {"__key__": key}
        for _key, ext, path in group:
            sample[ext] = path.read_bytes()  # bytes pass through the encoders unchanged
        yield sample


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path, metavar="DIR", help="directory tree to pack")
    parser.add_argument("pattern", metavar="PATTERN", help="output shard pattern, e.g. out/train-%%06d.tar")
    parser.add_argument("--maxcount", type=int, default=10_000, help="samples per shard (default 10000)")
    parser.add_argument("--maxsize", type=float, default=1e9, help="bytes per shard (default 1e9)")
    parser.add_argument("--compress", action="store_true", help="gzip the shards (name them .tar.gz)")
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option for the output URL's source (s3:// endpoint, credentials)",
    )


def run(args: argparse.Namespace) -> int:
    """Pack the directory into shards (with a progress bar on a terminal)."""
    from ..tar.sharded_writer import ShardWriter
    from ._options import parse_options
    from ._progress import Progress

    root: Path = args.directory
    if not root.is_dir():
        raise ConfigurationError(
            f"{str(root)!r} is not a directory; `shardstream write DIR PATTERN` packs a directory"
        )
    entries, skipped = collect(root)
    if not entries:
        raise ConfigurationError(f"no files with an extension under {str(root)!r}; nothing to write")
    options = parse_options(args.storage_option)
    kw: dict[str, Any] = {"mtime": 0, "compress": True if args.compress else None}
    if options:
        kw["storage_options"] = options
    count = 0
    samples = len({key for key, _ext, _path in entries})
    with (
        ShardWriter(args.pattern, maxcount=args.maxcount, maxsize=args.maxsize, **kw) as sink,
        Progress(samples, "write", "sample") as bar,
    ):
        for sample in _samples(entries):
            sink.write(sample)
            count += 1
            bar.update(1, shard=sink.shard)
        shards = sink.shard  # the next shard number: equals the number written from 0
    sys.stdout.write(
        f"wrote {count} samples from {len(entries)} files into {shards} shards ({args.pattern})"
        + (f"; skipped {skipped} files without an extension" if skipped else "")
        + "\n"
    )
    return 0
