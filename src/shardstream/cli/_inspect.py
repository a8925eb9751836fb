"""``shardstream ls | cat | stat``: look inside shards and datasets without writing any Python.

All three stream shards through the reader the data path uses (every URL scheme, gzip shards
too) and never hold more than one sample in memory. Offsets are positions in the uncompressed tar
stream: a member's header, and its data 512 bytes later.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Iterator
from contextlib import closing
from typing import Any

from ..errors import ShardNotFoundError
from ._scan import Problem, ShardScan

__all__ = [
    "DESCRIPTIONS",
    "add_cat_arguments",
    "add_ls_arguments",
    "add_stat_arguments",
    "run_cat",
    "run_ls",
    "run_stat",
]

DESCRIPTIONS = {
    "ls": "List a dataset's shards with their samples, bytes and extensions, and the dataset total "
    "(from the _info.json index when there is one and a shard's size is the index's, else by reading "
    "the shard; a size that differs is reported: `shardstream verify` checks everything). Given one "
    "shard URL, or with --members, list the members of each shard with their offsets and sizes "
    "instead.",
    "cat": "Write the named members of a shard to stdout, in the order they occur in the shard.",
    "stat": "Summarize each shard (size, members, samples, extensions with counts and bytes, key "
    "range, video codecs) and the dataset as a whole, reading every shard.",
}

URLSPEC_HELP = (
    "shards: a URL, a brace spec such as 'data/train-{000000..000099}.tar', a local directory or "
    "glob, or an s3:// or http(s):// prefix ending in / that holds an _info.json"
)


def add_common(parser: argparse.ArgumentParser, *, jobs: bool = True) -> None:
    """``--storage-option`` and ``--allow-pipe`` (and ``--jobs``), shared by commands that read URLs."""
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option for the URL's source, e.g. endpoint_url=http://127.0.0.1:8333 (repeatable)",
    )
    parser.add_argument(
        "--allow-pipe", action="store_true", help="allow pipe: URLs (they run shell commands)"
    )
    if jobs:
        parser.add_argument("--jobs", "-j", type=int, default=8, help="shards read in parallel (default 8)")


def _members(url: str, args: argparse.Namespace) -> Iterator[tuple[str, bytes, int]]:
    from ..sources import open_url
    from ..tar.reader import iter_members
    from ._options import parse_options

    stream = open_url(url, storage_options=parse_options(args.storage_option), allow_pipe=args.allow_pipe)
    with closing(stream):
        yield from iter_members(stream, url)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")  # pragma: no cover


def _exts(counts: dict[str, int]) -> str:
    return " ".join(f"{ext}:{n}" for ext, n in sorted(counts.items())) or "-"


# -- ls ---------------------------------------------------------------------------------------------


def add_ls_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="URLSPEC", help=URLSPEC_HELP)
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--members", "-m", action="store_true", help="list each shard's members")
    view.add_argument("--shards", action="store_true", help="list shards even when URLSPEC is one shard")
    parser.add_argument("--scan", action="store_true", help="read the shards even where an index has counts")
    parser.add_argument("--no-header", action="store_true", help="omit the column header and the total")
    parser.add_argument("--json", action="store_true", help="print JSON instead of columns")
    add_common(parser)


def _is_one_shard(spec: str, urls: list[str]) -> bool:
    return len(urls) == 1 and urls[0] == spec and "{" not in spec


def run_ls(args: argparse.Namespace) -> int:
    from ._dataset import resolve
    from ._options import parse_options

    urls = resolve(args.spec, storage_options=parse_options(args.storage_option))
    if args.members or (_is_one_shard(args.spec, urls) and not args.shards):
        return _ls_members(urls, args)
    return _ls_shards(urls, args)


def _ls_members(urls: list[str], args: argparse.Namespace) -> int:
    out = sys.stdout
    rows: list[dict[str, Any]] = []
    for i, url in enumerate(urls):
        if args.json:
            rows.extend(
                {"url": url, "name": n, "offset": o, "size": len(d)} for n, d, o in _members(url, args)
            )
            continue
        if len(urls) > 1:
            out.write(("\n" if i else "") + f"{url}:\n")
        if not args.no_header:
            out.write(f"{'OFFSET':>12} {'DATA':>12} {'SIZE':>12}  NAME\n")
        for name, data, offset in _members(url, args):
            out.write(f"{offset:>12} {offset + 512:>12} {len(data):>12}  {name}\n")
    if args.json:
        json.dump(rows, out, indent=1)
        out.write("\n")
    return 0


def _index_rows(
    urls: list[str], args: argparse.Namespace, options: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], list[Problem]]:
    """The rows the indexes beside ``urls`` give, for shards whose size is the index's (a stat or
    a listing each, see ``_sizes.py``); a shard that is missing, or whose size differs (cut short
    or rewritten since it was indexed), gets no row here: it is read like an unindexed one."""
    import shlex

    from ..errors import ShardNotFoundError, redact_url
    from ..tar.index import index_url
    from ._dataset import read_indexes, split_url
    from ._sizes import shard_sizes

    indexes = read_indexes(urls, storage_options=options)
    entries = {}
    for url in urls:
        directory, name = split_url(url)
        entry = (indexes.get(directory) or {}).get(name)
        if entry is not None:
            entries[url] = entry
    sizes = shard_sizes(list(entries), storage_options=options, jobs=args.jobs)
    rows: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    for url, entry in entries.items():
        size, listed = sizes[url], entry["bytes"]
        if isinstance(size, ShardNotFoundError):
            continue  # reading it reports that it cannot be opened
        if isinstance(size, Exception):
            problems.append(Problem(url, f"cannot check the index's figures against the shard: {size}"))
            size = listed
        elif listed >= 0 and size != listed:
            problems.append(
                Problem(
                    url,
                    f"index says {listed:,} bytes, the shard has {size:,} (cut short or rewritten since "
                    f"{index_url(split_url(url)[0])} was written; its row is read from the shard): "
                    f"run `shardstream verify {shlex.quote(redact_url(args.spec))}`",
                )
            )
            continue
        rows[url] = {
            "url": url,
            "samples": entry["samples"],
            "bytes": size,
            "extensions": entry.get("extensions"),
            "from": "index",
        }
    return rows, problems


def _ls_shards(urls: list[str], args: argparse.Namespace) -> int:
    from ._options import parse_options
    from ._scan import scan_many

    options = parse_options(args.storage_option)
    rows: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    if not args.scan:
        rows, problems = _index_rows(urls, args, options)
    missing = [u for u in urls if u not in rows]
    scans = scan_many(
        missing,
        storage_options=options,
        allow_pipe=args.allow_pipe,
        jobs=args.jobs,
        desc="ls",
        headers_only=True,
    )
    problems += [p for s in scans for p in s.problems]
    for s in scans:
        rows[s.url] = {
            "url": s.url,
            "samples": s.samples,
            "bytes": s.stored_bytes,
            "extensions": dict(sorted(s.extensions.items())),
            "from": "scan",
        }
    ordered = [rows[u] for u in urls]
    total = _total(ordered)
    if args.json:
        result = {"shards": ordered, "total": total, "problems": [p.as_dict() for p in problems]}
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print_shard_table(ordered, total, header=not args.no_header)
    for problem in problems:
        sys.stderr.write(f"problem: {problem}\n")
    return 1 if problems else 0


def _total(rows: list[dict[str, Any]]) -> dict[str, Any]:
    exts: collections.Counter[str] = collections.Counter()
    known = all(r["extensions"] is not None for r in rows)
    for r in rows:
        exts.update(r["extensions"] or {})
    return {
        "shards": len(rows),
        "samples": sum(r["samples"] for r in rows),
        "bytes": sum(max(r["bytes"], 0) for r in rows),
        "extensions": dict(sorted(exts.items())) if known else None,
    }


def _print_shard_table(rows: list[dict[str, Any]], total: dict[str, Any], *, header: bool) -> None:
    out = sys.stdout
    if header:
        out.write(f"{'SAMPLES':>10} {'BYTES':>15}  {'EXTENSIONS':<30} SHARD\n")

    def exts(value: dict[str, int] | None) -> str:
        # An index written before ShardWriter recorded extensions: --scan reads them.
        return _exts(value) if value is not None else "? (--scan)"

    for r in rows:
        out.write(f"{r['samples']:>10} {r['bytes']:>15,}  {exts(r['extensions']):<30} {r['url']}\n")
    if header:
        out.write(
            f"{total['samples']:>10} {total['bytes']:>15,}  {exts(total['extensions']):<30} "
            f"total: {total['shards']} shards, {_human(total['bytes'])}\n"
        )


# -- cat --------------------------------------------------------------------------------------------


def add_cat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="one shard (path, file://, s3://, http(s)://)")
    parser.add_argument(
        "members", nargs="+", metavar="MEMBER", help="member names, as `shardstream ls` shows them"
    )
    add_common(parser, jobs=False)


def run_cat(args: argparse.Namespace) -> int:
    wanted = set(args.members)
    out = sys.stdout.buffer
    for name, data, _offset in _members(args.url, args):
        if name in wanted:
            out.write(data)
            wanted.discard(name)
            if not wanted:
                break  # stop reading the shard as soon as everything was found
    out.flush()
    if wanted:
        missing = ", ".join(sorted(wanted))
        raise ShardNotFoundError(
            f"no member named {missing} in {args.url}; `shardstream ls {args.url}` lists the member names"
        )
    return 0


# -- stat -------------------------------------------------------------------------------------------


def add_stat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", metavar="URLSPEC", help=URLSPEC_HELP)
    parser.add_argument("--summary", "-s", action="store_true", help="print only the dataset total")
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_common(parser)


def _video_hook(scan: ShardScan, sample: dict[str, Any], where: dict[str, int]) -> None:
    from ..decoders.video import VIDEO_EXTENSIONS, VideoSummary

    for ext, value in sample.items():
        if ext.rpartition(".")[2].lower() in VIDEO_EXTENSIONS and isinstance(value, bytes):
            summary = scan.extra.setdefault("video", VideoSummary())
            summary.add(f"{sample['__key__']}.{ext}", value)


def _shard_dict(s: ShardScan) -> dict[str, Any]:
    video = s.extra.get("video")
    return {
        "url": s.url,
        "stored_bytes": s.stored_bytes,
        "compressed": s.compressed,
        "members": s.members,
        "samples": s.samples,
        "extensions": {e: [s.extensions[e], s.extension_bytes[e]] for e in sorted(s.extensions)},
        "first_key": s.keys[0] if s.keys else None,
        "last_key": s.keys[-1] if s.keys else None,
        "video": video.lines() if video is not None else [],
    }


def run_stat(args: argparse.Namespace) -> int:
    from ._dataset import resolve_each
    from ._options import parse_options
    from ._scan import scan_many

    options = parse_options(args.storage_option)
    urls = resolve_each(args.specs, storage_options=options)
    scans = scan_many(
        urls,
        storage_options=options,
        allow_pipe=args.allow_pipe,
        jobs=args.jobs,
        desc="stat",
        hook=_video_hook,
    )
    shards = [_shard_dict(s) for s in scans]
    counts: collections.Counter[str] = collections.Counter()
    sizes: collections.Counter[str] = collections.Counter()
    for s in scans:
        counts.update(s.extensions)
        sizes.update(s.extension_bytes)
    total = {
        "shards": len(scans),
        "stored_bytes": sum(s.stored_bytes for s in scans),
        "members": sum(s.members for s in scans),
        "samples": sum(s.samples for s in scans),
        "extensions": {e: [counts[e], sizes[e]] for e in sorted(counts)},
    }
    problems = [p for s in scans for p in s.problems]
    out = sys.stdout
    if args.json:
        json.dump(
            {"shards": shards, "total": total, "problems": [p.as_dict() for p in problems]}, out, indent=1
        )
        out.write("\n")
    else:
        blocks = [] if args.summary else [_shard_block(s) for s in shards]
        if args.summary or len(shards) > 1:
            blocks.append(_total_block(total))
        out.write("\n".join(blocks))
    for problem in problems:
        sys.stderr.write(f"problem: {problem}\n")
    return 1 if problems else 0


def _ext_text(extensions: dict[str, list[int]]) -> str:
    return ", ".join(f"{ext} x{n} ({_human(b)})" for ext, (n, b) in extensions.items()) or "-"


def _shard_block(s: dict[str, Any]) -> str:
    return (
        f"url:        {s['url']}\n"
        f"size:       {s['stored_bytes']:,} bytes ({'tar+gzip' if s['compressed'] else 'tar'})\n"
        f"members:    {s['members']}\n"
        f"samples:    {s['samples']}\n"
        f"extensions: {_ext_text(s['extensions'])}\n"
        f"keys:       {s['first_key']} .. {s['last_key']}\n"
    ) + "".join(line + "\n" for line in s["video"])


def _total_block(t: dict[str, Any]) -> str:
    return (
        f"dataset:    {t['shards']} shards\n"
        f"size:       {t['stored_bytes']:,} bytes ({_human(t['stored_bytes'])})\n"
        f"members:    {t['members']}\n"
        f"samples:    {t['samples']}\n"
        f"extensions: {_ext_text(t['extensions'])}\n"
    )
