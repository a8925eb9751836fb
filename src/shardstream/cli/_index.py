"""``shardstream index URLSPEC``: write the ``_info.json`` index of an existing dataset.

Every shard is read once (in parallel, with a progress bar) for its sample count, byte size,
samples per extension and each sample's byte offset and size; a local, uncompressed shard is
walked from header to header instead, its members' data skipped (:mod:`shardstream.tar.walk`).
One index is written per directory (or object prefix) of shards, locally or to S3, in the format
``ShardWriter`` writes (:mod:`shardstream.tar.index`: the counts table and entries in
``_info.json``, each shard's offsets and sizes in its sidecar under ``_offsets/``; an older index
is replaced), so ``split="equal"``, ``len()``, ``ls`` and ``ShardDataset``'s random access need
no counting pass. With ``--wids``, the ``wids`` index (:mod:`shardstream.tar.wids_index`) of all
the shards named is written too. A shard that cannot
be read completely is reported and nothing is written (exit status 1).

A sample's size is the distance to the next sample's offset; the last sample's runs to the
shard's end-of-archive blocks, taken as the shard's last 1024 bytes (exact for shards written
by shardstream; with tools that pad the archive further, the last range holds some padding,
which parsing skips). Compressed shards get offsets (of the uncompressed stream) but no sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any

__all__ = ["DESCRIPTION", "add_arguments", "run"]

DESCRIPTION = (
    "Read every shard and write the _info.json index beside them (per shard: samples, bytes, "
    "samples per extension; per-sample byte offsets in _offsets/), one per directory or S3 prefix. "
    "Writes nothing, and exits with status 1, if a shard is broken."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ._inspect import URLSPEC_HELP, add_common

    parser.add_argument("specs", nargs="+", metavar="URLSPEC", help=URLSPEC_HELP)
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep entries of an existing index for shards not named here (default: replace the index)",
    )
    parser.add_argument("--no-offsets", action="store_true", help="omit per-sample offsets (a smaller index)")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")
    parser.add_argument(
        "--wids",
        nargs="?",
        const="",
        metavar="PATH",
        help="also write the wids index of these shards (wids.ShardListDataset's JSON) to PATH "
        "(default: shardindex.json beside the first shard)",
    )
    add_common(parser)


def run(args: argparse.Namespace) -> int:
    from ..tar.index import IndexEntry, sample_sizes, write_index
    from ..tar.writer import END_OF_ARCHIVE
    from ._dataset import resolve_each, split_url
    from ._options import parse_options
    from ._scan import scan_many

    options = parse_options(args.storage_option)
    urls = resolve_each(args.specs, storage_options=options)
    scans = scan_many(
        urls,
        storage_options=options,
        allow_pipe=args.allow_pipe,
        jobs=args.jobs,
        desc="index",
        headers_only=True,
    )
    problems = [p for s in scans for p in s.problems]
    if problems:
        for problem in problems:
            sys.stderr.write(f"problem: {problem}\n")
        sys.stderr.write(
            f"shardstream index: {len(problems)} problem(s) in {len(urls)} shards; no index written. "
            "Re-create or remove the broken shards (`shardstream verify` lists everything), then index "
            "again.\n"
        )
        return 1
    by_directory: dict[str, list[IndexEntry]] = defaultdict(list)
    for scan in scans:
        directory, name = split_url(scan.url)
        entry = IndexEntry(url=name, samples=scan.samples, bytes=scan.stored_bytes)
        entry["extensions"] = dict(sorted(scan.extensions.items()))
        if not args.no_offsets:
            entry["offsets"] = scan.offsets
            if not scan.compressed:
                entry["sizes"] = sample_sizes(scan.offsets, scan.stored_bytes - END_OF_ARCHIVE)
        by_directory[directory].append(entry)
    written = []
    for directory, entries in by_directory.items():
        where = write_index(directory, entries, merge=args.merge, storage_options=options or None)
        written.append(
            {"index": where, "shards": len(entries), "samples": sum(e["samples"] for e in entries)}
        )
    if args.wids is not None:
        written.append(_write_wids(args.wids, scans, options))
    if args.json:
        json.dump(written, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for w in written:
            sys.stdout.write(f"wrote {w['index']}: {w['shards']} shards, {w['samples']} samples\n")
    return 0


def _write_wids(target: str, scans: list[Any], options: dict[str, Any]) -> dict[str, Any]:
    """Write the wids index of ``scans`` (in the order named) to ``target`` or beside the first
    shard; URLs are relative to the index's directory when the shard lies in it."""
    from ..tar.wids_index import make_wids_index, write_wids_index
    from ._dataset import split_url

    where = target or _beside(scans[0].url, "shardindex.json")
    base = where.rpartition("/")[0]
    shards = []
    for scan in scans:
        directory, name = split_url(scan.url)
        url = name if directory == base else scan.url
        shards.append({"url": url, "nsamples": scan.samples, "filesize": scan.stored_bytes})
    stem = split_url(scans[0].url)[1].partition(".")[0].rstrip("-0123456789") or "shards"
    write_wids_index(where, make_wids_index(shards, name=stem), storage_options=options or None)
    return {"index": where, "shards": len(shards), "samples": sum(s["nsamples"] for s in shards)}


def _beside(url: str, name: str) -> str:
    head, sep, _ = url.rpartition("/")
    return f"{head}{sep}{name}"
