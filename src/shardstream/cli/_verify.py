"""``shardstream verify URLSPEC``: read every shard and report each problem with its place.

Checks, per shard (read in parallel threads, one pass each): the tar structure and every header
checksum, truncation (against the size the source reports), the grouping of members into samples
(a repeated extension within a sample), and, with ``--decode jpg,json``, that every field with
one of those extensions decodes. Across the dataset: keys that occur more than once (in one shard
or in two). Against the ``_info.json`` index beside the shards (when there is one): every shard
is listed, with its sample count, byte size and per-sample offsets as read; every listed shard
exists. Exit status 1 when anything is wrong, 0 when nothing is.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import ShardNotFoundError
from ._scan import Problem, SampleHook, ShardScan

__all__ = ["add_arguments", "check_index", "duplicate_keys", "run"]

DESCRIPTION = (
    "Read every shard and check tar structure and header checksums, truncation, sample grouping, "
    "duplicate keys, decodability of the --decode extensions and the _info.json index (sample "
    "counts, sizes, per-sample offsets). Prints each problem with URL, member and byte offset; "
    "exit status 1 if there is any."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ._inspect import URLSPEC_HELP, add_common

    parser.add_argument("specs", nargs="+", metavar="URLSPEC", help=URLSPEC_HELP)
    parser.add_argument(
        "--decode", default="", metavar="EXTS", help="also decode fields with these extensions, e.g. jpg,json"
    )
    parser.add_argument("--no-index", action="store_true", help="do not check the _info.json index")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    parser.add_argument(
        "--max-problems", type=int, default=1000, metavar="N", help="print at most N problems (default 1000)"
    )
    add_common(parser)


def _decode_hook(extensions: frozenset[str]) -> SampleHook:
    from ..decoders import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, Decoder, registered_extensions, video_info
    from ._errors import UsageError

    images, videos = frozenset(IMAGE_EXTENSIONS), frozenset(VIDEO_EXTENSIONS)
    known = registered_extensions() | images | videos
    unknown = sorted(extensions - known)
    if unknown:
        raise UsageError(
            f"--decode {','.join(unknown)}: no decoder for "
            f"{'this extension' if len(unknown) == 1 else 'these extensions'}; "
            f"known: {', '.join(sorted(known))}"
        )
    handlers: list[Any] = []
    if extensions & videos:
        handlers.append(video_info)  # reads the container and stream headers
    if extensions & images:
        handlers.append("rgb8")  # numpy images: no torch needed
    decoder = Decoder(handlers)

    def hook(scan: ShardScan, sample: dict[str, Any], where: dict[str, int]) -> None:
        for field, data in sample.items():
            if field.rpartition(".")[2] not in extensions or not isinstance(data, bytes):
                continue
            try:
                decoder.decode1(field, data, sample)
            except ImportError:
                raise
            except Exception as exc:  # noqa: BLE001 - any decoder failure is a finding
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                scan.problem(
                    f"cannot decode .{field}: {reason}", f"{sample['__key__']}.{field}", where.get(field)
                )

    return hook


def duplicate_keys(scans: Sequence[ShardScan]) -> list[Problem]:
    """Each key seen before (in the same shard or an earlier one), at its second place."""
    first: dict[str, tuple[str, int]] = {}
    problems = []
    for scan in scans:
        for key, offset in zip(scan.keys, scan.offsets, strict=True):
            seen = first.setdefault(key, (scan.url, offset))
            if seen != (scan.url, offset):
                also = "earlier in this shard" if seen[0] == scan.url else f"in {seen[0]}"
                problems.append(
                    Problem(scan.url, f"duplicate key {key!r} (also {also} at byte {seen[1]})", None, offset)
                )
    return problems


def check_index(scans: Sequence[ShardScan], storage_options: dict[str, Any]) -> tuple[list[Problem], int]:
    """Problems of the indexes beside ``scans``' shards, and how many indexes were checked."""
    from ..sources import stat_url
    from ..tar.index import index_url
    from ._dataset import read_indexes, split_url

    problems: list[Problem] = []
    indexes = read_indexes([s.url for s in scans], storage_options=storage_options)
    named = {s.url for s in scans}
    for scan in scans:
        directory, name = split_url(scan.url)
        index = indexes.get(directory)
        if index is None:
            continue
        where = index_url(directory)
        entry = index.get(name)
        if entry is None:
            problems.append(Problem(where, f"index out of date: it does not list {name}"))
            continue
        if (scan.complete or scan.sized) and entry["bytes"] >= 0 and entry["bytes"] != scan.stored_bytes:
            # Also for a shard cut short: its size is what it has, and the index's figures for
            # it (what `ls` would show) are not.
            problems.append(
                Problem(
                    scan.url,
                    f"size differs from the index: {entry['bytes']:,} bytes listed in {where}, "
                    f"{scan.stored_bytes:,} in the shard (cut short or rewritten since it was indexed)",
                )
            )
        if not scan.complete:
            continue  # the shard's own problem was reported; its counts mean nothing
        if entry["samples"] != scan.samples:
            problems.append(
                Problem(
                    where,
                    f"index out of date for {name}: {entry['samples']} samples listed, "
                    f"{scan.samples} in the shard",
                )
            )
        offsets = entry.get("offsets")
        if entry.get("sidecar"):
            offsets, problem = _sidecar_offsets(directory, name, storage_options)
            if problem is not None:
                problems.append(problem)
        if offsets is not None and offsets != scan.offsets:
            i = next(
                (i for i, (a, b) in enumerate(zip(offsets, scan.offsets, strict=False)) if a != b),
                min(len(offsets), scan.samples),
            )
            listed = offsets[i] if i < len(offsets) else "none"
            actual = scan.offsets[i] if i < scan.samples else "none"
            problems.append(
                Problem(
                    where,
                    f"index out of date for {name}: sample {i} listed at byte {listed}, "
                    f"found at byte {actual}",
                )
            )
    for directory, index in indexes.items():
        for name in index or {}:
            url = f"{directory}/{name}" if directory else name
            if url in named:
                continue
            try:
                stat_url(url, storage_options=storage_options)
            except ShardNotFoundError:
                problems.append(Problem(index_url(directory), f"index lists {name}, which does not exist"))
    return problems, sum(1 for i in indexes.values() if i is not None)


def _sidecar_offsets(
    directory: str, name: str, storage_options: dict[str, Any]
) -> tuple[list[int] | None, Problem | None]:
    """The offsets in shard ``name``'s sidecar, or the problem that keeps them from being read."""
    from ..errors import IndexFormatError
    from ..tar.offsets import read_sidecar, sidecar_url

    where = sidecar_url(directory, name)
    try:
        offsets, _ = read_sidecar(where, storage_options=storage_options)
    except IndexFormatError as exc:
        return None, Problem(where, str(exc))
    return offsets.tolist(), None


def run(args: argparse.Namespace) -> int:
    from ._dataset import resolve_each
    from ._options import parse_options
    from ._scan import scan_many

    options = parse_options(args.storage_option)
    extensions = frozenset(e.strip().lstrip(".").lower() for e in args.decode.split(",") if e.strip())
    hook = _decode_hook(extensions) if extensions else None
    urls = resolve_each(args.specs, storage_options=options)
    scans = scan_many(
        urls, storage_options=options, allow_pipe=args.allow_pipe, jobs=args.jobs, desc="verify", hook=hook
    )
    problems = [p for s in scans for p in s.problems] + duplicate_keys(scans)
    indexes = 0
    if not args.no_index:
        found, indexes = check_index(scans, options)
        problems += found
    samples = sum(s.samples for s in scans)
    size = sum(s.stored_bytes for s in scans)
    summary = (
        f"verified {len(scans)} shards, {samples} samples, {size:,} bytes"
        + (f", {indexes} index{'es' if indexes != 1 else ''}" if indexes else ", no index")
        + (f", decoded {','.join(sorted(extensions))}" if extensions else "")
        + f": {len(problems)} problem{'s' if len(problems) != 1 else ''}"
    )
    out = sys.stdout
    if args.json:
        report = {
            "ok": not problems,
            "shards": len(scans),
            "samples": samples,
            "bytes": size,
            "indexes": indexes,
            "problems": [p.as_dict() for p in problems[: args.max_problems]],
            "problem_count": len(problems),
        }
        json.dump(report, out, indent=1)
        out.write("\n")
    else:
        for problem in problems[: args.max_problems]:
            out.write(f"{problem}\n")
        if len(problems) > args.max_problems:
            out.write(f"... and {len(problems) - args.max_problems} more\n")
        out.write(summary + "\n")
    return 1 if problems else 0
