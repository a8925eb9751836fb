"""Decoders for non-image fields: text, numbers, JSON, NumPy, torch, tenbin, msgpack, pickle.

Each ``*_loads`` function turns a field's bytes into a value. :class:`BasicHandlers` dispatches on
the field's last extension component through the extension registry
(:func:`shardstream.decoders.register_decoder`), so user-registered extensions decode too.

Safety: ``.pth`` loads with ``torch.load(weights_only=True)`` (tensors, dicts, lists, numbers), and
``.pyd``/``.pickle``/``.pkl`` are refused with :class:`~shardstream.errors.UnsafeOperationError`.
A ``BasicHandlers(allow_pickle=True)`` (what ``Decoder(..., allow_pickle=True)`` installs) unpickles
and loads ``.pth`` without ``weights_only``; both can run arbitrary code from the shard.
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import UnsafeOperationError
from ..optional import require, require_torch

__all__ = [
    "PICKLE_EXTENSIONS",
    "BasicHandlers",
    "basichandlers",
    "cbor_loads",
    "int_loads",
    "json_loads",
    "msgpack_loads",
    "npy_loads",
    "npz_loads",
    "tenbin_loads",
    "text_loads",
    "torch_loads",
    "unpickle_loads",
]

#: Bytes -> value.
Loader = Callable[[bytes], Any]

PICKLE_EXTENSIONS = frozenset({"pyd", "pickle", "pkl"})


def text_loads(data: bytes) -> str:
    """UTF-8 text."""
    return data.decode("utf-8")


def int_loads(data: bytes) -> int:
    """A decimal integer such as a class label (surrounding whitespace allowed)."""
    return int(data)


def json_loads(data: bytes) -> Any:
    """A JSON document."""
    return json.loads(data)


def npy_loads(data: bytes) -> np.ndarray[Any, Any]:
    """A ``.npy`` array; object arrays are refused (they need pickle)."""
    import numpy.lib.format

    return numpy.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


def npz_loads(data: bytes) -> dict[str, np.ndarray[Any, Any]]:
    """A ``.npz`` archive as a dict of arrays; object arrays are refused."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return dict(archive)


def _torch_load(data: bytes, weights_only: bool) -> Any:
    torch = require_torch(purpose="decoding .pth fields")
    try:
        return torch.load(io.BytesIO(data), weights_only=weights_only, map_location="cpu")
    except pickle.UnpicklingError as exc:
        if not weights_only:
            raise
        raise UnsafeOperationError(
            "this .pth holds objects other than tensors and plain containers, and loading them "
            "would run code from the shard (torch.load refused them with weights_only=True: "
            f"{str(exc).splitlines()[0]}). If you trust the data, pass allow_pickle=True to "
            "decode()/Decoder(); better, store only tensors and dicts of tensors."
        ) from exc


def torch_loads(data: bytes) -> Any:
    """A ``torch.save`` file, loaded on the CPU with ``weights_only=True``."""
    return _torch_load(data, weights_only=True)


def tenbin_loads(data: bytes) -> Any:
    """A tenbin (``.ten``) buffer as a list of arrays."""
    from .. import tenbin

    return tenbin.decode_buffer(data)


def msgpack_loads(data: bytes) -> Any:
    """A MessagePack document."""
    msgpack = require("msgpack", purpose="decoding .mp/.msgpack fields", install="pip install msgpack")
    return msgpack.unpackb(data)


def cbor_loads(data: bytes) -> Any:
    """A CBOR document (needs the ``cbor`` package)."""
    cbor = require("cbor", purpose="decoding .cbor fields", install="pip install cbor")
    return cbor.loads(data)


def unpickle_loads(data: bytes, *, allow_pickle: bool = False) -> Any:
    """A pickle, only with ``allow_pickle=True``; otherwise UnsafeOperationError."""
    if not allow_pickle:
        raise UnsafeOperationError(
            "refusing to unpickle a .pyd/.pickle/.pkl field: unpickling runs arbitrary code from the "
            "shard. If you trust the data, pass allow_pickle=True to decode()/Decoder()/make_decoder(); "
            "otherwise store the field as .json, .npy or .pth."
        )
    return pickle.loads(data)


class BasicHandlers:
    """The default post-handler: decodes by extension through the registry.

    A WebDataset-style handler: ``handler(key, data)`` returns the decoded value, or ``None`` when
    the extension is not one it knows. ``key`` is the field name with a leading dot (``".cls"``).

    Args:
        allow_pickle: unpickle ``pyd``/``pickle``/``pkl`` and load ``.pth`` without
            ``weights_only``. Default False.
    """

    def __init__(self, *, allow_pickle: bool = False) -> None:
        self.allow_pickle = allow_pickle

    @property
    def dispatch_extensions(self) -> frozenset[str]:
        """The last extension components this handler decodes (for the Decoder's dispatch table)."""
        from . import registered_extensions

        return registered_extensions()

    def dispatch_lookup(self, extension: str) -> Loader | None:
        """The loader for a (last-component, lower-case) extension, or ``None``."""
        if self.allow_pickle:
            if extension in PICKLE_EXTENSIONS:
                return pickle.loads
            if extension == "pth":
                return _unsafe_torch_loads
        from . import get_decoder

        return get_decoder(extension)

    def __call__(self, key: str, data: bytes) -> Any:
        loader = self.dispatch_lookup(key.rpartition(".")[2].lower())
        return None if loader is None else loader(data)

    def __repr__(self) -> str:
        return f"BasicHandlers(allow_pickle={self.allow_pickle})"


def _unsafe_torch_loads(data: bytes) -> Any:
    return _torch_load(data, weights_only=False)


#: The default (pickle-refusing) instance, WebDataset's ``basichandlers``.
basichandlers = BasicHandlers()
