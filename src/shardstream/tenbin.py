"""The ``.ten`` binary tensor format (WebDataset's tenbin), read and written with NumPy.

A buffer is a sequence of chunks, each ``magic (8 bytes) | length (int64) | payload`` with the
payload zero-padded to a multiple of 64 bytes, so every payload starts 16-byte aligned and arrays
can be used in place. Every
array takes two chunks: a header (an int64 vector ``[dtype code, info, ndim, dim0, dim1, ...]``,
where the dtype code and info are ASCII strings of at most 8 bytes packed into an int64) and the
raw array bytes in C order. Integers use the machine's byte order, as WebDataset does.

Unlike WebDataset 1.0.2 this module accepts ``uint32`` arrays (its table misspells the name) and
compares ``infos`` lists instead of always failing.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from typing import IO, Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "bytedata",
    "bytelen",
    "check_acceptable_input_type",
    "check_infos",
    "decode_buffer",
    "decode_chunks",
    "decode_header",
    "decode_list",
    "encode_buffer",
    "encode_chunks",
    "encode_header",
    "encode_list",
    "load",
    "long_to_short",
    "magic",
    "magic_bytes",
    "magic_str",
    "read",
    "read_chunk",
    "roundup",
    "save",
    "short_to_long",
    "str64",
    "unstr64",
    "write",
    "write_chunk",
]

ByteData = bytes | bytearray | memoryview
Array = npt.NDArray[Any]
#: ``False``/``None``: return the arrays; ``True``: return ``(arrays, infos)``; a list: check them.
InfoSpec = bool | None | Sequence[str]

#: NumPy dtype name -> the short code stored in headers.
long_to_short: dict[str, str] = {
    "float16": "f2",
    "float32": "f4",
    "float64": "f8",
    "int8": "i1",
    "int16": "i2",
    "int32": "i4",
    "int64": "i8",
    "uint8": "u1",
    "uint16": "u2",
    "uint32": "u4",
    "uint64": "u8",
}
short_to_long: dict[str, str] = {short: name for name, short in long_to_short.items()}

_INT64 = struct.Struct("@q")
_WIDE = frozenset({"float64", "int64", "uint64"})


def bytelen(a: Array | ByteData) -> int:
    """Length of an array or bytes-like object in bytes."""
    if isinstance(a, (bytes, bytearray)):
        return len(a)
    if isinstance(a, (np.ndarray, memoryview)):
        return int(a.nbytes)
    raise ValueError(f"cannot tell the byte length of a {type(a).__name__}; pass an ndarray or bytes")


def bytedata(a: Array | ByteData) -> ByteData:
    """The raw bytes of an array (as a memoryview) or a bytes-like object itself."""
    if isinstance(a, (bytes, bytearray, memoryview)):
        return a
    if isinstance(a, np.ndarray):
        return np.ascontiguousarray(a).reshape(-1).view(np.uint8).data
    raise ValueError(f"cannot take the raw bytes of a {type(a).__name__}; pass an ndarray or bytes")


def check_acceptable_input_type(data: Sequence[Array], allow64: bool) -> None:
    """Raise ValueError unless every array has an encodable dtype (64-bit ones only if ``allow64``)."""
    for a in data:
        name = a.dtype.name
        if name not in long_to_short:
            raise ValueError(
                f"dtype {name} cannot be stored in tenbin; use one of {', '.join(long_to_short)}"
            )
        if not allow64 and name in _WIDE:
            raise ValueError(f"dtype {name} is 64-bit; pass allow64=True to store it")


def str64(s: str) -> int:
    """Pack an ASCII string of at most 8 characters into an int64."""
    raw = s.encode("ascii")
    if len(raw) > 8:
        raise ValueError(f"tenbin info string {s!r} is longer than 8 bytes; shorten it")
    value: int = _INT64.unpack(raw.ljust(8, b"\0"))[0]
    return value


def unstr64(i: int) -> str:
    """Inverse of :func:`str64`."""
    return _INT64.pack(int(i)).decode("ascii").strip("\0")


def check_infos(data: list[Array], infos: list[str], required_infos: InfoSpec = None) -> Any:
    """Return ``data``, ``(data, infos)`` or check ``infos`` against ``required_infos``."""
    if required_infos is None or required_infos is False:
        return data
    if required_infos is True:
        return data, infos
    if isinstance(required_infos, str) or not isinstance(required_infos, Sequence):
        raise ValueError(f"infos={required_infos!r} must be a bool or a list of strings")
    for required, actual in zip(required_infos, infos, strict=False):
        if required != actual:
            raise ValueError(f"tenbin array info {actual!r} does not match the required {required!r}")
    return data


def encode_header(a: Array, info: str = "") -> ByteData:
    """The header chunk describing array ``a``."""
    if a.ndim >= 10:
        raise ValueError(f"tenbin stores at most 9 dimensions; got shape {a.shape}")
    if a.dtype.name not in long_to_short:
        raise ValueError(
            f"dtype {a.dtype.name} cannot be stored in tenbin; convert to one of {', '.join(long_to_short)}"
        )
    header = [str64(long_to_short[a.dtype.name]), str64(info), a.ndim, *a.shape]
    return np.array(header, dtype=np.int64).view(np.uint8).data


def decode_header(h: ByteData) -> tuple[tuple[int, ...], np.dtype[Any], str]:
    """Decode a header chunk into ``(shape, dtype, info)``."""
    words = np.frombuffer(h, dtype=np.int64)
    if len(words) < 3:
        raise ValueError(f"tenbin header of {len(words) * 8} bytes is too short; the data is corrupt")
    code = unstr64(int(words[0]))
    if code not in short_to_long:
        raise ValueError(f"tenbin dtype code {code!r} is unknown; the data is corrupt or not tenbin")
    rank = int(words[2])
    shape = tuple(int(d) for d in words[3 : 3 + rank])
    return shape, np.dtype(short_to_long[code]), unstr64(int(words[1]))


def encode_list(arrays: Sequence[Array], infos: Sequence[str] | None = None) -> list[ByteData]:
    """Encode arrays into the alternating list ``[header, data, header, data, ...]``."""
    if infos is None:
        infos = [""]
    elif len(arrays) != len(infos):
        raise ValueError(f"got {len(arrays)} arrays but {len(infos)} infos; pass one info per array")
    result: list[ByteData] = []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        if not a.dtype.isnative:
            # Headers record only the dtype name, so store the bytes in machine order.
            a = a.astype(a.dtype.newbyteorder("="))
        result += [encode_header(a, infos[i % len(infos)]), bytedata(a)]
    return result


def decode_list(chunks: Sequence[ByteData], infos: InfoSpec = False) -> Any:
    """Decode the alternating ``[header, data, ...]`` list back into arrays."""
    arrays: list[Array] = []
    names: list[str] = []
    for header, data in zip(chunks[::2], chunks[1::2], strict=False):
        shape, dtype, info = decode_header(header)
        count = int(np.prod(shape, dtype=np.int64))
        arrays.append(np.frombuffer(data, dtype=dtype, count=count).reshape(shape))
        names.append(info)
    return check_infos(arrays, names, infos)


magic_str = "~TenBin~"
magic = str64(magic_str)
magic_bytes = magic_str.encode("ascii")


def roundup(n: int, k: int = 64) -> int:
    """``n`` rounded up to a multiple of ``k``."""
    return k * ((n + k - 1) // k)


def encode_chunks(chunks: Sequence[Array | ByteData]) -> bytearray:
    """Concatenate chunks, each with magic, length and padding, into one buffer."""
    result = bytearray(sum(16 + roundup(bytelen(c)) for c in chunks))
    offset = 0
    for chunk in chunks:
        nbytes = bytelen(chunk)
        result[offset : offset + 8] = magic_bytes
        _INT64.pack_into(result, offset + 8, nbytes)
        offset += 16
        result[offset : offset + nbytes] = bytedata(chunk)
        offset += roundup(nbytes)
    return result


def decode_chunks(buf: ByteData) -> list[ByteData]:
    """Split a buffer made by :func:`encode_chunks` into its payloads (views, no copies)."""
    view = memoryview(buf).cast("B")
    result: list[ByteData] = []
    offset, total = 0, len(view)
    while offset < total:
        if view[offset : offset + 8] != magic_bytes:
            raise ValueError(f"tenbin magic missing at byte {offset}; the data is corrupt or not tenbin")
        (nbytes,) = _INT64.unpack_from(view, offset + 8)
        offset += 16
        if nbytes < 0 or offset + nbytes > total:
            raise ValueError(
                f"tenbin chunk at byte {offset - 16} claims {nbytes} bytes; the data is truncated"
            )
        result.append(view[offset : offset + nbytes])
        offset += roundup(nbytes)
    return result


def encode_buffer(arrays: list[Array], infos: Sequence[str] | None = None) -> bytearray:
    """Encode a list of arrays into one tenbin buffer."""
    if not isinstance(arrays, list):
        raise ValueError(f"encode_buffer takes a list of arrays, not a {type(arrays).__name__}")
    return encode_chunks(encode_list(arrays, infos=infos))


def decode_buffer(buf: ByteData, infos: InfoSpec = False) -> Any:
    """Decode a tenbin buffer into a list of arrays (read-only views into ``buf``)."""
    return decode_list(decode_chunks(buf), infos=infos)


def write_chunk(stream: IO[bytes], buf: Array | ByteData) -> None:
    """Write one chunk (magic, length, payload, padding) to ``stream``."""
    nbytes = bytelen(buf)
    stream.write(magic_bytes)
    stream.write(_INT64.pack(nbytes))
    stream.write(bytedata(buf))
    stream.write(b"\0" * (roundup(nbytes) - nbytes))


def read_chunk(stream: IO[bytes]) -> bytes | None:
    """Read one chunk from ``stream``; ``None`` at a clean end of stream."""
    head = stream.read(8)
    if head == b"":
        return None
    if head != magic_bytes:
        raise ValueError("tenbin magic missing in stream; the data is corrupt or not tenbin")
    length = stream.read(8)
    if len(length) != 8:
        raise ValueError("tenbin stream ends inside a chunk header; it is truncated")
    (nbytes,) = _INT64.unpack(length)
    if nbytes < 0:
        raise ValueError(f"tenbin chunk claims a negative length {nbytes}; the data is corrupt")
    data = stream.read(nbytes)
    if len(data) != nbytes:
        raise ValueError(f"tenbin chunk of {nbytes} bytes is truncated after {len(data)} bytes")
    stream.read(roundup(nbytes) - nbytes)
    return data


def write(stream: IO[bytes], arrays: Sequence[Array], infos: Sequence[str] | None = None) -> None:
    """Write arrays to ``stream`` in tenbin format."""
    for chunk in encode_list(arrays, infos=infos):
        write_chunk(stream, chunk)


def read(stream: IO[bytes], n: int = sys.maxsize, infos: InfoSpec = False) -> Any:
    """Read up to ``n`` arrays from ``stream``."""
    chunks: list[ByteData] = []
    for _ in range(n):
        header = read_chunk(stream)
        if header is None:
            break
        data = read_chunk(stream)
        if data is None:
            raise ValueError("tenbin stream ends after an array header; it is truncated")
        chunks += [header, data]
    return decode_list(chunks, infos=infos)


def _check_name(fname: str, nocheck: bool) -> None:
    if not nocheck and not fname.endswith(".ten"):
        raise ValueError(f"file name {fname!r} should end in .ten; pass nocheck=True to use it anyway")


def save(fname: str, *args: Array, infos: Sequence[str] | None = None, nocheck: bool = False) -> None:
    """Save arrays to the file ``fname``."""
    _check_name(fname, nocheck)
    with open(fname, "wb") as stream:
        write(stream, args, infos=infos)


def load(fname: str, infos: InfoSpec = False, nocheck: bool = False) -> Any:
    """Load the arrays stored in the file ``fname``."""
    _check_name(fname, nocheck)
    with open(fname, "rb") as stream:
        return read(stream, infos=infos)
