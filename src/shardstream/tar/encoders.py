"""Default encoders by extension, the inverse of :mod:`shardstream.decoders`.

A sample is encoded field by field: ``bytes`` pass through, ``str`` becomes UTF-8, and any other
value goes to the encoder registered for the field's last extension component (``"seg.png"`` uses
``png``). A trailing ``.gz`` compresses the encoded bytes (with a zero gzip timestamp, so output is
reproducible). Pickle (``pyd``/``pickle``) is opt-in, as on the decoding side: files that unpickle
on read run arbitrary code, so a writer must ask for them with ``allow_pickle=True``.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import ConfigurationError, UnsafeOperationError

__all__ = [
    "PICKLE_EXTENSIONS",
    "EncoderSpec",
    "FieldEncoder",
    "SampleEncoder",
    "add_handlers",
    "bytestr",
    "cbor_dumps",
    "default_handlers",
    "encode_based_on_extension",
    "encode_based_on_extension1",
    "imageencoder",
    "make_encoder",
    "make_handlers",
    "mp_dumps",
    "numpy_dumps",
    "numpy_npz_dumps",
    "tenbin_dumps",
    "torch_dumps",
]

BytesLike = bytes | bytearray | memoryview
#: Turns one field value into bytes.
FieldEncoder = Callable[[Any], BytesLike]
#: Turns a whole sample into a dict of bytes (and string metadata).
SampleEncoder = Callable[[dict[str, Any]], dict[str, Any]]
#: What TarWriter's ``encoder=`` accepts.
EncoderSpec = bool | None | Mapping[str, FieldEncoder] | SampleEncoder

PICKLE_EXTENSIONS = frozenset({"pyd", "pickle", "pkl"})

_IMAGE_FORMATS = {
    "JPG": "JPEG",
    "IMG": "PPM",
    "IMAGE": "PPM",
    "TIF": "TIFF",
    "PGM": "PPM",
    "PBM": "PPM",
    "PNM": "PPM",
}
_NETPBM_MODES = {"PGM": "L", "PBM": "1"}


def imageencoder(image: Any, format: str = "PNG") -> bytes:  # noqa: A002 - WebDataset's name
    """Compress an image (PIL image or HWC ndarray) with Pillow.

    Args:
        image: a ``PIL.Image.Image`` or an ndarray of shape ``(H, W)`` or ``(H, W, C)`` with C in
            1, 3, 4. Float arrays must lie in [0, 1] and are scaled to uint8.
        format: a Pillow format name or extension (``"png"``, ``"jpg"``, ``"ppm"``, ``"webp"``...).
            JPEG is written at quality 100, like WebDataset.

    Returns:
        The encoded file's bytes.
    """
    import PIL.Image

    if isinstance(image, np.ndarray):
        if image.dtype.kind == "f":
            low, high = float(np.amin(image)), float(np.amax(image))
            if low <= -0.001 or high >= 1.001:
                raise ValueError(
                    f"float image values span [{low}, {high}], outside [0, 1]; scale them to [0, 1] "
                    "or pass a uint8 array"
                )
            image = (np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[:, :, 0]
        if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[2] not in (3, 4)):
            raise ValueError(
                f"cannot encode an array of shape {image.shape} as an image; use (H, W) or (H, W, C) "
                "with C in 1, 3, 4 (convert CHW tensors with .permute(1, 2, 0).numpy())"
            )
        image = PIL.Image.fromarray(image)
    elif not isinstance(image, PIL.Image.Image):
        raise ValueError(
            f"cannot encode a {type(image).__name__} as an image; pass a PIL image or an ndarray"
        )
    fmt = format.upper()
    # Pillow writes PBM/PGM through its PPM plugin, choosing the variant from the image mode.
    if fmt in _NETPBM_MODES and image.mode != _NETPBM_MODES[fmt]:
        image = image.convert(_NETPBM_MODES[fmt])
    fmt = _IMAGE_FORMATS.get(fmt, fmt)
    options: dict[str, Any] = {"quality": 100} if fmt == "JPEG" else {}
    with io.BytesIO() as stream:
        image.save(stream, format=fmt, **options)
        return stream.getvalue()


def bytestr(data: Any) -> bytes:
    """``data`` as bytes: bytes unchanged, anything else through ``str`` and ASCII."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("ascii")
    return str(data).encode("ascii")


def torch_dumps(data: Any) -> bytes:
    """Serialize with ``torch.save`` (readable back with ``weights_only=True`` for tensors/dicts)."""
    from ..optional import require_torch

    torch = require_torch(purpose="encoding .pth fields")

    stream = io.BytesIO()
    torch.save(data, stream)
    return stream.getvalue()


def numpy_dumps(data: np.ndarray[Any, Any]) -> bytes:
    """Serialize an array in ``.npy`` format (object arrays are refused: they would need pickle)."""
    import numpy.lib.format

    stream = io.BytesIO()
    numpy.lib.format.write_array(stream, np.asanyarray(data), allow_pickle=False)
    return stream.getvalue()


def numpy_npz_dumps(data: Mapping[str, np.ndarray[Any, Any]]) -> bytes:
    """Serialize a dict of arrays in compressed ``.npz`` format."""
    if not isinstance(data, Mapping):
        raise ValueError(f"npz encoding takes a dict of name -> ndarray, not a {type(data).__name__}")
    for name, value in data.items():
        if not isinstance(name, str) or not isinstance(value, np.ndarray):
            raise ValueError(f"npz entry {name!r} must map a str to an ndarray, got {type(value).__name__}")
    stream = io.BytesIO()
    np.savez_compressed(stream, allow_pickle=False, **data)
    return stream.getvalue()


def tenbin_dumps(x: Any) -> memoryview:
    """Serialize an array, or a list of arrays, in tenbin (``.ten``) format."""
    from .. import tenbin

    return memoryview(tenbin.encode_buffer(x if isinstance(x, list) else [x]))


def cbor_dumps(x: Any) -> bytes:
    """Serialize with the ``cbor`` package (installed separately)."""
    try:
        import cbor
    except ImportError as exc:
        raise ImportError("encoding .cbor fields needs the 'cbor' package: pip install cbor") from exc
    result: bytes = cbor.dumps(x)
    return result


def mp_dumps(x: Any) -> bytes:
    """Serialize with MessagePack."""
    try:
        import msgpack
    except ImportError as exc:
        raise ImportError("encoding .mp/.msgpack fields needs 'msgpack': pip install msgpack") from exc
    result: bytes = msgpack.packb(x)
    return result


def _pickle_dumps(x: Any) -> bytes:
    return pickle.dumps(x)


def add_handlers(d: dict[str, FieldEncoder], keys: str | list[str], value: FieldEncoder) -> None:
    """Register ``value`` in ``d`` for each extension in ``keys`` (a list or space-separated str)."""
    for key in keys.split() if isinstance(keys, str) else keys:
        d[key] = value


def _image(fmt: str) -> FieldEncoder:
    def encode(data: Any) -> bytes:
        return imageencoder(data, fmt)

    encode.__name__ = f"encode_{fmt.lower()}"
    return encode


def _text(x: Any) -> bytes:
    return str(x).encode("utf-8")


def _ascii(x: Any) -> bytes:
    return str(x).encode("ascii")


def _json(x: Any) -> bytes:
    return json.dumps(x).encode("utf-8")


def make_handlers(*, allow_pickle: bool = False) -> dict[str, FieldEncoder]:
    """A fresh extension -> encoder dict (pickle extensions only when ``allow_pickle``)."""
    handlers: dict[str, FieldEncoder] = {}
    add_handlers(handlers, "cls cls2 class count index inx id", _ascii)
    add_handlers(handlers, "txt text transcript html htm", _text)
    add_handlers(handlers, "json jsn", _json)
    add_handlers(handlers, "pth", torch_dumps)
    add_handlers(handlers, "npy", numpy_dumps)
    add_handlers(handlers, "npz", numpy_npz_dumps)
    add_handlers(handlers, "ten tenbin tb", tenbin_dumps)
    add_handlers(handlers, "mp msgpack msg", mp_dumps)
    add_handlers(handlers, "cbor", cbor_dumps)
    add_handlers(handlers, "jpg jpeg img image", _image("jpg"))
    for fmt in ("png", "pbm", "pgm", "ppm", "webp", "bmp"):
        add_handlers(handlers, fmt, _image(fmt))
    add_handlers(handlers, "tiff tif", _image("tiff"))
    if allow_pickle:
        add_handlers(handlers, sorted(PICKLE_EXTENSIONS), _pickle_dumps)
    return handlers


#: The encoders used by ``TarWriter(encoder=True)``; no pickle.
default_handlers: dict[str, FieldEncoder] = make_handlers()


def encode_based_on_extension1(data: Any, tname: str, handlers: Mapping[str, FieldEncoder]) -> Any:
    """Encode one field value ``data`` stored under the field name ``tname``.

    Metadata fields (names starting with ``_``) must be strings and are returned unchanged.
    """
    if tname.startswith("_"):
        if not isinstance(data, str):
            raise ValueError(f"metadata field {tname!r} must be a str, not a {type(data).__name__}")
        return data
    compress = tname.endswith(".gz")
    if compress:
        tname = tname[:-3]
    if isinstance(data, (bytes, bytearray, memoryview)):
        result: BytesLike = data
    elif isinstance(data, str):
        result = data.encode("utf-8")
    else:
        extension = tname.rpartition(".")[2].lower()
        handler = handlers.get(extension)
        if handler is None:
            if extension in PICKLE_EXTENSIONS:
                raise UnsafeOperationError(
                    f"field {tname!r}: writing .{extension} as pickle is opt-in, because reading it back "
                    "runs arbitrary code. Pass allow_pickle=True to TarWriter/ShardWriter, or store "
                    "the value in a safe format (.json, .npy, .pth)."
                )
            raise ValueError(
                f"no encoder for field {tname!r} (extension {extension!r}, value of type "
                f"{type(data).__name__}); pass bytes or str, use a known extension "
                f"({', '.join(sorted(handlers))}), or give TarWriter an encoder dict"
            )
        result = handler(data)
    if compress:
        # mtime=0 keeps the gzip header, and so the shard, byte-for-byte reproducible.
        return gzip.compress(result, mtime=0)
    return result


def encode_based_on_extension(
    sample: Mapping[str, Any], handlers: Mapping[str, FieldEncoder]
) -> dict[str, Any]:
    """Encode every field of ``sample`` with :func:`encode_based_on_extension1`."""
    return {k: encode_based_on_extension1(v, k, handlers) for k, v in sample.items()}


def _identity(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def make_encoder(spec: EncoderSpec, *, allow_pickle: bool = False) -> SampleEncoder:
    """Turn TarWriter's ``encoder=`` argument into a sample encoder.

    Args:
        spec: ``True`` for the default encoders, ``False``/``None`` for none (values must already
            be bytes), a dict of extension -> encoder, or a callable taking and returning a sample.
        allow_pickle: with ``spec=True``, also encode ``pyd``/``pickle``/``pkl`` fields with pickle.
    """
    if spec is False or spec is None:
        return _identity
    if spec is True:
        handlers = make_handlers(allow_pickle=True) if allow_pickle else default_handlers
    elif isinstance(spec, Mapping):
        handlers = dict(spec)
    elif callable(spec):
        return spec
    else:
        raise ConfigurationError(
            f"encoder={spec!r} is not an encoder spec; pass True, False, a dict of extension -> "
            "function, or a callable that encodes a whole sample"
        )

    def encode(sample: dict[str, Any]) -> dict[str, Any]:
        return encode_based_on_extension(sample, handlers)

    return encode
