"""pack: build a Ray dataset of samples from files, a Parquet table or an S3 prefix, then write it.

Sources (``source="auto"`` picks by ``src``):

* ``files``: a local directory of ``KEY.EXT`` files (any depth), grouped into samples by key;
  ``parquet`` instead when every file in it ends in ``.parquet``.
* ``prefix``: the objects under ``s3://bucket/prefix/``, grouped the same way (listed with our
  S3 source and ``storage_options``).
* ``parquet``: a ``.parquet`` file or directory (local, or any URL Ray's reader takes with its
  own credentials). The ``key_column`` gives ``__key__``; every other column is a field named by
  its column name (``jpg``, ``cls``, ``json``); ``fetch_columns={"jpg": "url"}`` fetches the URLs
  in column ``url`` (http(s), s3, local, through our sources) into field ``jpg``.

Files and URLs are read by the Ray tasks, up to ``fetch_threads`` at a time per task.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from ..sources import SchemeRouter, check_storage_options, open_url, scheme_of
from ._info import ShardSetInfo
from ._listing import Listing, list_folder, list_prefix
from ._tasks import KEY
from ._write import absolute, require_ray, write_dataset

__all__ = ["fetch_columns_of", "fetch_listed", "pack"]

_SOURCES = ("auto", "files", "prefix", "parquet")


def _read(url: str, storage_options: Mapping[str, Any]) -> bytes:
    with open_url(url, storage_options=storage_options) as stream:
        return stream.read()


def _fetch_all(
    urls: list[str | None], storage_options: Mapping[str, Any], threads: int
) -> list[bytes | None]:
    """Fetch ``urls`` (``None`` stays ``None``) in order, ``threads`` at a time."""
    wanted = [u for u in urls if u is not None]
    if not wanted:
        return [None] * len(urls)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(wanted)))) as pool:
        data = iter(list(pool.map(lambda u: _read(u, storage_options), wanted)))
    return [None if u is None else next(data) for u in urls]


def fetch_listed(batch: Any, *, fields: list[str], storage_options: Mapping[str, Any], threads: int) -> Any:
    """Rows ``{__key__, <ext>: location}`` -> samples ``{__key__, <ext>: bytes}`` (a Ray task)."""
    import pyarrow as pa

    columns: dict[str, Any] = {KEY: batch.column(KEY)}
    for name in fields:
        fetched = _fetch_all(batch.column(name).to_pylist(), storage_options, threads)
        columns[name] = pa.array(fetched, pa.large_binary())
    return pa.table(columns)


def fetch_columns_of(
    batch: Any, *, key_column: str, fetch: Mapping[str, str], storage_options: Mapping[str, Any], threads: int
) -> Any:
    """Parquet rows -> samples: rename the key column, replace URL columns by the fetched bytes."""
    import pyarrow as pa

    if key_column not in batch.column_names:
        raise ConfigurationError(
            f"the Parquet table has no key column {key_column!r} (columns: {batch.column_names}); "
            "pass key_column= naming the column of unique sample keys"
        )
    columns: dict[str, Any] = {KEY: batch.column(key_column).cast(pa.string())}
    url_columns = set(fetch.values())
    for name in batch.column_names:
        if name != key_column and name not in url_columns:
            columns[name] = batch.column(name)
    for field, column in fetch.items():
        if column not in batch.column_names:
            raise ConfigurationError(
                f"fetch_columns={dict(fetch)!r} names column {column!r}, which the Parquet table does "
                f"not have (columns: {batch.column_names})"
            )
        urls = batch.column(column).to_pylist()
        columns[field] = pa.array(_fetch_all(urls, storage_options, threads), pa.large_binary())
    return pa.table(columns)


def _kind(src: str, source: str) -> str:
    if source not in _SOURCES:
        raise ConfigurationError(f"source={source!r} is not one of {_SOURCES}")
    if source != "auto":
        return source
    if src.rstrip("/").endswith(".parquet"):
        return "parquet"
    if scheme_of(src) not in ("file", "http", "https"):
        return "prefix"  # an object store's prefix (s3://, gs://, az://, hf://, fsspec's)
    path = Path(src.removeprefix("file://"))
    if not path.exists():
        raise ConfigurationError(
            f"{src!r} does not exist; pack a directory, a .parquet file or an s3:// prefix"
        )
    if not path.is_dir():
        return "parquet" if path.suffix == ".parquet" else "files"
    parquet = False
    for file in path.rglob("*"):  # stops at the first file that is not Parquet
        if file.is_file():
            if file.suffix != ".parquet":
                return "files"
            parquet = True
    return "parquet" if parquet else "files"


def _listed_dataset(listing: Listing, options: Mapping[str, Any], threads: int) -> Any:
    ray = require_ray()
    fields = sorted({ext for sample in listing.values() for ext in sample})
    items = [{KEY: key, **{ext: sample.get(ext) for ext in fields}} for key, sample in listing.items()]
    return ray.data.from_items(items).map_batches(
        fetch_listed,
        batch_format="pyarrow",
        fn_kwargs={"fields": fields, "storage_options": dict(options), "threads": threads},
    )


def pack(
    src: str,
    dst: str,
    *,
    shard_size: int | str = "256MB",
    storage_options: Mapping[str, Any] | None = None,
    prefix: str = "shard",
    source: str = "auto",
    key_column: str = KEY,
    fetch_columns: Mapping[str, str] | None = None,
    fetch_threads: int = 16,
) -> ShardSetInfo:
    """Pack ``src`` into shards under ``dst`` with Ray Data (see :func:`write_shards`).

    Args:
        src: a directory of ``KEY.EXT`` files, a ``.parquet`` file or directory, or an
            ``s3://bucket/prefix/``.
        dst: where the shards and ``_info.json`` go (local path or ``s3://``).
        shard_size: most bytes per shard. Default ``"256MB"``.
        storage_options: options for the ``s3://`` and ``http(s)://`` sources, used both for
            reading (prefixes, fetched URLs) and for writing ``dst``.
        prefix: shard basename prefix. Default ``"shard"``.
        source: ``"auto"`` (default), ``"files"``, ``"prefix"`` or ``"parquet"``.
        key_column: Parquet column of sample keys. Default ``"__key__"``.
        fetch_columns: Parquet only: field name -> column of URLs whose bytes become that field.
        fetch_threads: concurrent reads per Ray task. Default 16.
    """
    ray = require_ray()
    options = dict(storage_options or {})
    kind = _kind(src, source)
    if fetch_columns and kind != "parquet":
        raise ConfigurationError(f"fetch_columns= applies to Parquet sources; {src!r} is read as {kind}")
    if fetch_columns:  # fetched URLs may have any scheme: check only that each option exists
        SchemeRouter(options)
    else:
        check_storage_options(options, [src, dst])
    src = absolute(src)
    if kind == "files":
        ds = _listed_dataset(list_folder(Path(src.removeprefix("file://"))), options, fetch_threads)
    elif kind == "prefix":
        ds = _listed_dataset(list_prefix(src, options), options, fetch_threads)
    else:
        ds = ray.data.read_parquet(src).map_batches(
            fetch_columns_of,
            batch_format="pyarrow",
            fn_kwargs={
                "key_column": key_column,
                "fetch": dict(fetch_columns or {}),
                "storage_options": options,
                "threads": fetch_threads,
            },
        )
    return write_dataset(ds, dst, shard_size=shard_size, prefix=prefix, options=options, encoder=True)
