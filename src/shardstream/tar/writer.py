"""TarWriter: write samples (dicts keyed by extension) into one WebDataset tar shard.

Each sample becomes one tar member per field, named ``<__key__>.<field>``, in sorted field order.
Headers are ustar; a name that does not fit the 100-byte ustar name field gets a PAX extended
header (read by GNU tar, bsdtar, Python's ``tarfile`` and every WebDataset reader). Output is
reproducible by default: mtime 0, uid/gid 0 and fixed user/group names, and a zero gzip
timestamp for compressed shards; pass ``mtime=time.time()`` for wall-clock timestamps. The
archive ends with the two zero blocks of the standard, without ``tarfile``'s padding to 10 KiB,
so a shard's size is exactly the sum of :meth:`TarWriter.write` results plus 1024 bytes.

Keys are validated because the reader splits member names at the first dot of the basename: a
key such as ``"img.001"`` would silently come back as key ``"img"`` with field ``"001.jpg"``.
Member names must also be safe relative paths (no leading ``/``, no ``..`` or empty component,
no NUL), since extracting a shard writes each member under a directory by its name.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import logging
import lzma
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, BinaryIO, Literal, Protocol, cast, runtime_checkable

from ..errors import ConfigurationError
from ..paths import check_relative_path
from ..sources import create_url
from .encoders import EncoderSpec, make_encoder
from .index import IndexEntry

__all__ = ["END_OF_ARCHIVE", "Abortable", "EncodedSample", "TarWriter", "check_key"]

log = logging.getLogger(__name__)

_BLOCK = 512
#: Bytes appended by :meth:`TarWriter.close`: two zero blocks.
END_OF_ARCHIVE = 2 * _BLOCK
_ZEROS = bytes(_BLOCK)
_FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}

Bytes = bytes | bytearray | memoryview


#: The fix an unsafe key's or member's error ends with.
_RELATIVE_KEY = (
    "Give the sample a relative key without '..', empty components or NUL, such as 'train/000001': "
    "a shard whose member names cannot be unpacked under a directory is not written"
)


def check_key(key: object, *, shard: object = None) -> str:
    """Return ``key`` if it can be a sample key, else raise ConfigurationError saying why.

    Besides the dot rule (see the module doc), a key must be a safe relative path (no leading
    ``/``, no ``..`` or empty component, no NUL; :mod:`shardstream.paths`): ``unpack`` and any
    tar extractor write each member under a directory by its name. ``shard`` (the shard being
    written) is named in the message when given.
    """
    if not isinstance(key, str):
        raise ConfigurationError(
            f"sample __key__={key!r} is a {type(key).__name__}; keys must be str (e.g. f'{{index:08d}}')"
        )
    if not key:
        raise ConfigurationError("sample __key__ is empty; give every sample a unique non-empty key")
    check_relative_path(key, what="sample __key__", url=shard, fix=_RELATIVE_KEY)
    basename = key.rpartition("/")[2]
    if "." in basename:
        misread = key[: len(key) - len(basename)] + basename.split(".")[0]
        raise ConfigurationError(
            f"sample __key__={key!r} contains a dot in its last path component; readers split member "
            f"names at that dot, so it would come back as key {misread!r}. "
            "Replace the dot (e.g. with '_' or '-'); dots in directory parts ('a.b/c') are fine."
        )
    return key


@dataclass(frozen=True)
class EncodedSample:
    """A sample turned into tar blocks, ready to be written.

    Attributes:
        key: the sample key.
        members: ``(header, payload)`` pairs; each header may include a PAX header.
        nbytes: bytes the sample adds to the (uncompressed) archive, headers and padding included.
        extensions: the sample's extensions as readers will see them (lower-case, metadata
            fields such as ``__meta__`` left out): what the index counts per shard.
    """

    key: str
    members: tuple[tuple[bytes, Bytes], ...]
    nbytes: int
    extensions: tuple[str, ...] = ()


@runtime_checkable
class Abortable(Protocol):
    """A writable stream that can be discarded instead of published (the writers of
    ``create_url``: a local file's temporary name, an S3 multipart upload)."""

    def abort(self) -> None: ...


class _Sink(Protocol):
    def write(self, data: Bytes, /) -> int: ...


class _CountingStream:
    """Forwards writes to a binary stream and counts the bytes."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.count = 0

    def write(self, data: Bytes) -> int:
        self.stream.write(data)
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        self.count += n
        return n

    def flush(self) -> None:
        self.stream.flush()


class TarWriter:
    """Writes samples into one tar shard (drop-in for ``webdataset.TarWriter``).

    Args:
        fileobj: a writable binary stream (left open by :meth:`close`) or a URL/path, opened with
            :func:`shardstream.sources.create_url` and closed by :meth:`close`.
        user: user name stored in every header. Default ``"bigdata"``.
        group: group name stored in every header. Default ``"bigdata"``.
        mode: permission bits of every member. Default ``0o444``.
        compress: ``True``/``"gz"``, ``"bz2"``, ``"xz"``, or ``False`` for none. ``None`` (default)
            compresses when a URL ends in ``gz``/``bz2``/``xz``.
        encoder: ``True`` (default encoders by extension), ``False``/``None`` (fields must already
            be bytes or str), a dict of extension -> encoder, or a callable encoding a sample.
        keep_meta: also write fields whose name starts with ``_`` (other than ``__key__``).
        mtime: timestamp stored in every header. Default ``None`` means 0, for reproducible output.
        format: ``None`` (ustar, PAX only for long or non-ASCII names), or ``"ustar"``, ``"gnu"``,
            ``"pax"`` or a ``tarfile`` format constant.
        allow_pickle: let the default encoders write ``pyd``/``pickle`` fields. Default False.
        storage_options: passed to the URL's source when ``fileobj`` is a URL.
        allow_pipe: allow a ``pipe:`` URL as ``fileobj``. Default False.
    """

    def __init__(
        self,
        fileobj: str | IO[bytes],
        user: str = "bigdata",
        group: str = "bigdata",
        mode: int = 0o0444,
        compress: bool | str | None = None,
        encoder: EncoderSpec = True,
        keep_meta: bool = False,
        mtime: float | None = None,
        format: Any = None,  # noqa: A002 - WebDataset's name
        *,
        allow_pickle: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        allow_pipe: bool = False,
    ) -> None:
        self.user = user
        self.group = group
        self.mode = mode
        self.compress = compress
        self.keep_meta = keep_meta
        self.mtime = mtime
        self.format = _tar_format(format)
        self.encoder = make_encoder(encoder, allow_pickle=allow_pickle)
        self.name = fileobj if isinstance(fileobj, str) else getattr(fileobj, "name", None)
        tarmode = self.tarmode(fileobj, compress)
        self.own_fileobj: IO[bytes] | None = None
        if isinstance(fileobj, str):
            fileobj = create_url(fileobj, storage_options=storage_options, allow_pipe=allow_pipe)
            self.own_fileobj = fileobj
        self.stream = fileobj
        self._raw = _CountingStream(fileobj)
        self._compressor: gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile | None = None
        if tarmode == "w|gz":
            # filename="" and mtime=0 keep the gzip header free of names and times.
            self._compressor = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0)
        elif tarmode == "w|bz2":
            self._compressor = bz2.BZ2File(self._raw, mode="wb")
        elif tarmode == "w|xz":
            self._compressor = lzma.LZMAFile(cast(IO[bytes], self._raw), mode="wb")
        self._out: _Sink = self._compressor if self._compressor is not None else self._raw
        self.closed = False
        #: Uncompressed bytes written so far, not counting the end-of-archive blocks.
        self.offset = 0
        #: Samples written so far.
        self.count = 0
        #: Where each sample written so far starts, and its bytes (headers and padding
        #: included), in the uncompressed archive: what the index records for random access.
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        #: Samples written so far per extension (lower-case): the index's ``extensions``.
        self.extensions: collections.Counter[str] = collections.Counter()

    # -- context manager ------------------------------------------------------------------------

    def __enter__(self) -> TarWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None and self.own_fileobj is not None:
            self.abort()  # a shard cut short by an error is never published
        else:
            self.close()

    # -- writing --------------------------------------------------------------------------------

    def encode(self, sample: Mapping[str, Any]) -> EncodedSample:
        """Encode ``sample`` and build its tar headers without writing anything."""
        if not isinstance(sample, Mapping):
            raise ConfigurationError(
                f"a sample must be a dict of field -> value, not a {type(sample).__name__}"
            )
        if "__key__" not in sample:
            raise ConfigurationError(
                f"sample with fields {sorted(sample)} has no '__key__'; add a unique key such as "
                "{'__key__': f'{index:08d}', ...}"
            )
        key = check_key(sample["__key__"], shard=self.name)
        encoded = self.encoder(dict(sample))
        mtime = 0 if self.mtime is None else int(self.mtime)
        members: list[tuple[bytes, Bytes]] = []
        extensions: list[str] = []
        nbytes = 0
        for field in sorted(encoded):
            if field == "__key__" or (field.startswith("_") and not self.keep_meta):
                continue
            if not field:
                raise ConfigurationError(
                    f"sample {key!r} has a field with an empty name; name it by extension"
                )
            value = encoded[field]
            if isinstance(value, str):
                value = value.encode("utf-8")
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise ConfigurationError(
                    f"field {field!r} of sample {key!r} is a {type(value).__name__} after encoding, not "
                    "bytes; give it a known extension or pass encoder= a dict with an encoder for it"
                )
            if isinstance(value, memoryview):
                value = value.cast("B") if value.ndim != 1 or value.format != "B" else value
            size = len(value)
            # The key is safe; a field holding '/' or NUL could still make the name unsafe.
            name = check_relative_path(
                f"{key}.{field}",
                what=f"member (field {field!r} of sample {key!r})",
                url=self.name,
                fix="Name the field by its extension, without '/' or NUL",
            )
            info = tarfile.TarInfo(name)
            info.size = size
            info.mtime = mtime
            info.mode = self.mode
            info.uid = info.gid = 0
            info.uname = self.user
            info.gname = self.group
            try:
                header = info.tobuf(self.format, "utf-8", "surrogateescape")
            except ValueError as exc:
                raise ConfigurationError(
                    f"member name {info.name!r} does not fit the chosen tar format ({exc}); use the "
                    "default format=None, which adds a PAX header for long names"
                ) from exc
            members.append((header, value))
            nbytes += len(header) + size + (-size % _BLOCK)
            ext = field.lower()  # as the readers' grouping names it (tar/grouping.py)
            if not (ext.startswith("__") and ext.endswith("__")):
                extensions.append(ext)
        return EncodedSample(key, tuple(members), nbytes, tuple(extensions))

    def write_encoded(self, encoded: EncodedSample) -> int:
        """Write a sample made by :meth:`encode`; returns the bytes added to the archive."""
        if self.closed:
            raise ConfigurationError(f"TarWriter for {self.name!r} is closed; open a new one to write more")
        out = self._out
        for header, payload in encoded.members:
            out.write(header)
            out.write(payload)
            pad = -len(payload) % _BLOCK
            if pad:
                out.write(_ZEROS[:pad])
        self.offsets.append(self.offset)
        self.sizes.append(encoded.nbytes)
        self.extensions.update(encoded.extensions)
        self.offset += encoded.nbytes
        self.count += 1
        return encoded.nbytes

    def write(self, obj: Mapping[str, Any]) -> int:
        """Encode and write one sample.

        Args:
            obj: a dict with a ``__key__`` (str, no dot in its last path component) and one entry
                per field, named by extension.

        Returns:
            Bytes added to the uncompressed archive (headers, data and padding).
        """
        return self.write_encoded(self.encode(obj))

    @property
    def bytes_written(self) -> int:
        """Bytes written to the underlying stream so far (after compression)."""
        return self._raw.count

    def index_entry(self, name: str) -> IndexEntry:
        """This shard's ``_info.json`` entry under basename ``name``: counts, bytes, samples per
        extension and each sample's offset, with sizes when the shard is uncompressed (see
        :mod:`.index`). Call it after :meth:`close` for the final byte count."""
        entry = IndexEntry(url=name, samples=self.count, bytes=self.bytes_written)
        entry["extensions"] = dict(sorted(self.extensions.items()))
        entry["offsets"] = list(self.offsets)
        if self._compressor is None:
            entry["sizes"] = list(self.sizes)
        return entry

    def close(self) -> None:
        """Finish the archive; close the stream if this writer opened it. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._out.write(bytes(END_OF_ARCHIVE))
        if self._compressor is not None:
            self._compressor.close()
        self._raw.flush()
        if self.own_fileobj is not None:
            self.own_fileobj.close()
            self.own_fileobj = None

    def abort(self) -> None:
        """Stop without publishing: a stream this writer opened is discarded (a local file's
        temporary name is removed, an S3 multipart upload aborted); a caller's stream is left
        as it is, unfinished. Idempotent."""
        if self.closed:
            return
        self.closed = True
        own, self.own_fileobj = self.own_fileobj, None
        if isinstance(own, Abortable):
            own.abort()
        elif own is not None:
            own.close()

    @staticmethod
    def tarmode(fileobj: str | IO[bytes] | BinaryIO, compress: bool | str | None = None) -> str:
        """The ``tarfile`` stream mode WebDataset would use for this target and ``compress``."""
        name = fileobj if isinstance(fileobj, str) else ""
        if compress is False:
            return "w|"
        if compress is True or compress == "gz" or (compress is None and name.endswith("gz")):
            return "w|gz"
        if compress == "bz2" or (compress is None and name.endswith("bz2")):
            return "w|bz2"
        if compress == "xz" or (compress is None and name.endswith("xz")):
            return "w|xz"
        if compress is not None:
            raise ConfigurationError(
                f"compress={compress!r} is not supported; use True, 'gz', 'bz2', 'xz' or False"
            )
        return "w|"


_Format = Literal[0, 1, 2]


def _tar_format(format: Any) -> _Format:  # noqa: A002
    if format is None:
        # PAX headers are emitted only for members that need them; other headers are plain ustar.
        return tarfile.PAX_FORMAT
    if isinstance(format, int) and format in _FORMATS.values():
        return cast(_Format, format)
    if isinstance(format, str):
        key = format.lower().removesuffix("_format")
        if key in _FORMATS:
            return cast(_Format, _FORMATS[key])
    raise ConfigurationError(f"format={format!r} is not a tar format; use None, 'ustar', 'gnu' or 'pax'")
