"""``shardstream pack SRC DST`` and ``shardstream unpack SRC DST``: objects <-> WebDataset shards.

``pack`` turns a prefix of single-sample objects (``s3://``, a local directory, or any prefix
with ``--manifest``) into shards ``DST/{prefix}-000000.tar, ...`` of about ``--shard-size``
bytes, with the ``_info.json`` index. The shards are planned before anything is fetched (samples
in key order, cut by the manifest's object sizes), so shard ``k`` always holds the same samples:
an interrupted run started again keeps every shard the index already lists and writes only the
rest. Finished shards are recorded in the index in groups (every 64 shards or 30 s, and when the
run ends or fails), not one rewrite of the whole index per shard. Objects are read through the
same fetch-ahead engine as ``ObjectStream``.

``unpack`` writes every member of the shards back as one object per field,
``DST/{key}.{ext}``, plus a ``_manifest.jsonl`` (for debugging sets and round trips). A member
whose name is absolute, has a ``..`` or empty component, or holds NUL stops it before anything is
written under that name (:mod:`shardstream.paths`); links in a shard are never members (the reader
yields regular files only), so none is created.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ConfigurationError, redact_url
from ..paths import check_relative_path

__all__ = ["add_arguments", "add_unpack_arguments", "plan_shards", "run", "run_unpack"]

log = logging.getLogger(__name__)

_BLOCK = 512


def _tar_bytes(size: int) -> int:
    """Bytes one member of ``size`` bytes takes in a tar (header plus padded data)."""
    return _BLOCK + -(-max(size, 0) // _BLOCK) * _BLOCK


def plan_shards(sample_sizes: Sequence[Sequence[int]], shard_size: int) -> list[range]:
    """Consecutive sample ranges whose tar bytes stay within ``shard_size`` (a sample larger
    than that gets a shard of its own). Pure: the same sizes always give the same shards."""
    shards: list[range] = []
    start, used = 0, 0
    for i, sizes in enumerate(sample_sizes):
        need = sum(_tar_bytes(s) for s in sizes)
        if i > start and used + need > shard_size:
            shards.append(range(start, i))
            start, used = i, 0
        used += need
    if start < len(sample_sizes):
        shards.append(range(start, len(sample_sizes)))
    return shards


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", metavar="SRC", help="object prefix (s3://bucket/prefix/, a directory)")
    parser.add_argument("dst", metavar="DST", help="output directory or prefix for the shards")
    parser.add_argument("--shard-size", default="256MB", help="target bytes per shard (default 256MB)")
    parser.add_argument("--prefix", default="shard", help="shard name prefix (default 'shard')")
    parser.add_argument("--manifest", help="key list, JSONL or S3 Inventory CSV instead of listing SRC")
    parser.add_argument("--window", type=int, default=32, help="requests in flight (default 32)")
    parser.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local: this process (default); ray: a Ray Data job (pip install 'shardstream[ray]')",
    )
    _storage_argument(parser)


def add_unpack_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", metavar="SRC", help="shard spec, e.g. out/shard-{000000..000009}.tar")
    parser.add_argument("dst", metavar="DST", help="output directory or prefix for the objects")
    _storage_argument(parser)


def _storage_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option for the sources (s3:// endpoint_url, credentials); repeatable",
    )


def _progress(total: int, unit: str) -> Any:
    """A tqdm bar on a terminal; silent otherwise (and when tqdm is missing)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=unit, disable=not sys.stderr.isatty(), file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``pack``."""
    from ._options import parse_options, parse_size

    options = parse_options(args.storage_option)
    shard_size = parse_size(args.shard_size)
    if args.engine == "ray":
        try:
            # import_module, not ``from .. import ray``: an attribute left on the package by an
            # earlier import must not hide a failing (or disabled) import.
            ray_engine = importlib.import_module("shardstream.ray")
        except ImportError as exc:
            raise ImportError(
                f"--engine ray needs shardstream's Ray engine: pip install 'shardstream[ray]' ({exc})"
            ) from exc
        info = ray_engine.pack(
            args.src, args.dst, shard_size=shard_size, storage_options=options, prefix=args.prefix
        )
        summary = info.as_dict()
        sys.stdout.write(
            f"packed {summary['samples']} samples into {len(summary['shards'])} shards in "
            f"{args.dst} with Ray\n"
        )
        return 0
    written, kept, samples = pack(
        args.src,
        args.dst,
        shard_size=shard_size,
        prefix=args.prefix,
        manifest=args.manifest,
        storage_options=options,
        window=args.window,
    )
    sys.stdout.write(
        f"packed {samples} samples into {written + kept} shards in {args.dst} "
        f"({written} written, {kept} already complete)\n"
    )
    return 0


def pack(
    src: str,
    dst: str,
    *,
    shard_size: int,
    prefix: str = "shard",
    manifest: str | None = None,
    storage_options: dict[str, Any] | None = None,
    window: int = 32,
) -> tuple[int, int, int]:
    """Pack ``src`` into shards under ``dst``; returns ``(written, kept, samples)``."""
    from ..objects import ObjectReader
    from ..readers.objects import open_table
    from ..tar.index import read_index_entries
    from ..tar.writer import TarWriter

    if shard_size <= 2 * _BLOCK:
        raise ConfigurationError(f"--shard-size {shard_size} is too small for a tar shard")
    check_relative_path(
        f"{prefix}-000000.tar",
        what="--prefix makes the shard name",
        fix="Pass a plain name prefix such as 'train' and put directories in DST",
    )
    table = open_table(src, manifest, storage_options, None)
    sizes = [[table.manifest.sizes[j] for _, j in fields] for fields in table.fields]
    shards = plan_shards(sizes, shard_size)
    dst = dst.rstrip("/")
    names = [f"{prefix}-{k:06d}.tar" for k in range(len(shards))]
    try:
        done = {e["url"]: e["samples"] for e in read_index_entries(dst, storage_options=storage_options)}
    except (FileNotFoundError, ConfigurationError):
        done = {}
    todo = [k for k, name in enumerate(names) if done.get(name) != len(shards[k])]
    if dst and "://" not in dst:
        os.makedirs(dst, exist_ok=True)
    reader = ObjectReader(table, storage_options, window=window)
    bar = _progress(sum(len(shards[k]) for k in todo), "samples")
    indices = (i for k in todo for i in shards[k])
    stream = reader.stream(indices)
    index = _IndexUpdates(dst, storage_options)
    try:
        for k in todo:
            name = f"{dst}/{names[k]}" if dst else names[k]
            local = "://" not in name
            target = f"{name}.partial" if local else name  # an S3 object appears only when complete
            with TarWriter(target, mtime=0, storage_options=storage_options) as sink:
                for _ in shards[k]:
                    _, sample = next(stream)
                    if isinstance(sample, BaseException):
                        raise sample
                    sink.write({key: v for key, v in sample.items() if key != "__url__"})
                    if bar is not None:
                        bar.update(1)
            if local:
                os.replace(target, name)
            index.add(sink.index_entry(names[k]))  # counts, bytes, each sample's offset and size
            log.info("packed %s: %d samples", name, len(shards[k]))
    finally:
        stream.close()  # type: ignore[attr-defined]
        if bar is not None:
            bar.close()
        index.flush(failing=sys.exc_info()[1] is not None)
    return len(todo), len(shards) - len(todo), len(table)


class _IndexUpdates:
    """The shards ``pack`` finished, recorded in ``_info.json`` in groups.

    Rewriting the index after every shard costs the whole index each time: quadratic in the
    shard count (10,000 shards of a 2 MB index would write 20 GB). Finished shards are recorded
    every :attr:`EVERY` shards or :attr:`SECONDS` seconds, and when ``pack`` ends, also on an
    error, so a run started again redoes at most the shards of one group. Each shard's offsets
    sidecar is written with its group, before the index that names it.
    """

    EVERY = 64
    SECONDS = 30.0

    def __init__(self, dst: str, storage_options: dict[str, Any] | None) -> None:
        self.dst, self.storage_options = dst, storage_options
        self.pending: list[Any] = []
        self.since = time.monotonic()

    def add(self, entry: Any) -> None:
        self.pending.append(entry)
        if len(self.pending) >= self.EVERY or time.monotonic() - self.since >= self.SECONDS:
            self.flush()

    def flush(self, failing: bool = False) -> None:
        from ..tar.index import write_index

        if not self.pending:
            return
        try:
            write_index(self.dst, self.pending, storage_options=self.storage_options)
        except Exception:
            if not failing:
                raise
            # pack is already failing: its own error is the one to see; this one is logged
            log.exception(
                "could not record %d finished shards in the index under %s; a run started again "
                "writes them again",
                len(self.pending),
                redact_url(self.dst),
            )
            return
        self.pending, self.since = [], time.monotonic()


def run_unpack(args: argparse.Namespace) -> int:
    """Entry point of ``unpack``."""
    from ._options import parse_options

    options = parse_options(args.storage_option)
    count, objects = unpack(args.src, args.dst, storage_options=options)
    sys.stdout.write(f"unpacked {count} samples into {objects} objects under {args.dst}\n")
    return 0


def _fields(sample: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    for ext, value in sorted(sample.items()):
        if not ext.startswith("__") and isinstance(value, bytes | bytearray):
            yield ext, bytes(value)


def _check_member(sample: dict[str, Any], ext: str) -> None:
    """Refuse a sample whose object name ``{key}.{ext}`` could land outside DST (``../``, an
    absolute key, an empty component, NUL), naming the shard it came from."""
    key = sample["__key__"]
    check_relative_path(
        f"{key}.{ext}",
        what="member",
        url=sample.get("__url__"),
        fix=(
            "unpack writes each member under DST, so it stopped before writing this sample: rename "
            f"the sample (its __key__ {key!r}) to a relative key without '..', empty components or "
            "NUL, and re-pack the shard"
        ),
    )


def unpack(src: str, dst: str, *, storage_options: dict[str, Any] | None = None) -> tuple[int, int]:
    """Write every sample of the shards ``src`` as objects ``dst/{key}.{ext}``.

    Raises:
        UnsafePathError: a member's name is absolute, has a ``..`` or empty component, or holds
            NUL (it would be written outside ``dst`` or under another name); the samples before it
            are written, it and the rest are not.
    """
    from ..datasets.shard_stream import ShardStream
    from ..objects import MANIFEST_NAME, Manifest
    from ..sources import create_url

    dst = dst.rstrip("/")
    keys: list[str] = []
    sizes: list[int] = []
    count = 0
    for sample in ShardStream(src, shuffle_shards=False, cache=None, storage_options=storage_options):
        count += 1
        fields = list(_fields(sample))
        for ext, _ in fields:  # every field checked before any is written
            _check_member(sample, ext)
        for ext, data in fields:
            key = f"{sample['__key__']}.{ext}"
            url = f"{dst}/{key}"
            if "://" not in url:
                os.makedirs(os.path.dirname(os.path.abspath(url)), exist_ok=True)
                with open(url, "wb") as f:
                    f.write(data)
            else:
                with create_url(url, storage_options=storage_options) as out:
                    out.write(data)
            keys.append(key)
            sizes.append(len(data))
    Manifest(dst, keys, sizes).save(f"{dst}/{MANIFEST_NAME}", storage_options)
    return count, len(keys)
