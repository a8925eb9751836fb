"""``shardstream ls | cat | stat``: look inside a shard without writing any Python.

All three stream the shard through the same reader the data path uses (so they work for every
URL scheme and for gzip shards) and never hold more than one member in memory. Offsets are
positions in the uncompressed tar stream: the member's header and its data (header + 512).
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Iterator
from contextlib import closing
from typing import IO, Any

from ..errors import ShardNotFoundError

__all__ = ["add_cat_arguments", "add_ls_arguments", "add_stat_arguments", "run_cat", "run_ls", "run_stat"]


class _Sniffer:
    """Passes reads through and remembers the stream's first bytes (to tell gzip from tar)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.head = b""
        self.nread = 0

    def read(self, n: int = -1, /) -> bytes:
        data = self.stream.read(n)
        if self.nread == 0:
            self.head = data[:2]
        self.nread += len(data)
        return data


def _members(
    url: str, args: argparse.Namespace, sniffer: list[_Sniffer] | None = None
) -> Iterator[tuple[str, bytes, int]]:
    from ..sources import open_url
    from ..tar.reader import iter_members
    from ._options import parse_options

    stream = open_url(url, storage_options=parse_options(args.storage_option), allow_pipe=args.allow_pipe)
    with closing(stream):
        wrapped = _Sniffer(stream)
        if sniffer is not None:
            sniffer.append(wrapped)
        yield from iter_members(wrapped, url)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option for the URL's source, e.g. endpoint_url=http://127.0.0.1:8333",
    )
    parser.add_argument(
        "--allow-pipe", action="store_true", help="allow pipe: URLs (they run shell commands)"
    )


def add_ls_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="one shard (path, file://, s3://, http(s)://)")
    parser.add_argument("--no-header", action="store_true", help="omit the column header")
    _common(parser)


def run_ls(args: argparse.Namespace) -> int:
    """List members: header offset, data offset, size, name (one per line)."""
    out = sys.stdout
    if not args.no_header:
        out.write(f"{'OFFSET':>12} {'DATA':>12} {'SIZE':>12}  NAME\n")
    for name, data, offset in _members(args.url, args):
        out.write(f"{offset:>12} {offset + 512:>12} {len(data):>12}  {name}\n")
    return 0


def add_cat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="one shard")
    parser.add_argument(
        "members", nargs="+", metavar="MEMBER", help="member names, as `shardstream ls` shows them"
    )
    _common(parser)


def run_cat(args: argparse.Namespace) -> int:
    """Write the named members' bytes to stdout, in the order they occur in the shard."""
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


def add_stat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("urls", nargs="+", metavar="URL", help="shards")
    _common(parser)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"  # pragma: no cover - loop always returns


def shard_stats(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Counts for one shard: members, samples, per-extension counts and bytes, key range, and a
    summary of its video members (codecs, sizes, rates, durations, audio) read from their headers."""
    from ..decoders.video import VIDEO_EXTENSIONS, VideoSummary
    from ..sources import stat_url
    from ..tar.grouping import group_samples
    from ._options import parse_options

    sniffers: list[_Sniffer] = []
    per_ext: collections.Counter[str] = collections.Counter()
    ext_bytes: collections.Counter[str] = collections.Counter()
    members = 0

    def counted() -> Iterator[tuple[str, bytes, int]]:
        nonlocal members
        for member in _members(url, args, sniffers):
            members += 1
            yield member

    samples = 0
    videos = VideoSummary()
    first_key = last_key = None
    for sample in group_samples(counted(), url):
        samples += 1
        key = sample["__key__"]
        first_key = first_key or key
        last_key = key
        for ext, value in sample.items():
            if not (ext.startswith("__") and ext.endswith("__")):
                per_ext[ext] += 1
                ext_bytes[ext] += len(value)
                if ext.rpartition(".")[2].lower() in VIDEO_EXTENSIONS:
                    videos.add(f"{key}.{ext}", value)
    sniffer = sniffers[0] if sniffers else None
    size = sniffer.nread if sniffer else 0
    try:
        known = stat_url(url, storage_options=parse_options(args.storage_option)).size
        size = int(known) if known is not None else size
    except Exception:  # pipe: and servers without HEAD: fall back to the bytes read
        pass
    return {
        "url": url,
        "stored_bytes": size,
        "compressed": bool(sniffer and sniffer.head == b"\x1f\x8b"),
        "members": members,
        "samples": samples,
        "extensions": {ext: (per_ext[ext], ext_bytes[ext]) for ext in sorted(per_ext)},
        "first_key": first_key,
        "last_key": last_key,
        "video": videos.lines(),
    }


def run_stat(args: argparse.Namespace) -> int:
    """Print a summary block per shard."""
    out = sys.stdout
    for i, url in enumerate(args.urls):
        s = shard_stats(url, args)
        if i:
            out.write("\n")
        exts = ", ".join(f"{ext} x{n} ({_human(b)})" for ext, (n, b) in s["extensions"].items())
        out.write(
            f"url:        {s['url']}\n"
            f"size:       {s['stored_bytes']:,} bytes ({'tar+gzip' if s['compressed'] else 'tar'})\n"
            f"members:    {s['members']}\n"
            f"samples:    {s['samples']}\n"
            f"extensions: {exts or '-'}\n"
            f"keys:       {s['first_key']} .. {s['last_key']}\n"
        )
        out.writelines(line + "\n" for line in s["video"])
    return 0
