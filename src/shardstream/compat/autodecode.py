"""WebDataset-compatible ``autodecode`` namespace (thin re-exports).

The ``*_loads`` functions and the ``decoders`` table are WebDataset's, over shardstream's
loaders: ``unpickle_loads`` refuses unless called with ``allow_pickle=True`` (pickle runs code
from the shard) and ``torch_loads`` loads with ``weights_only=True``. Both also refuse, with
WebDataset's ``ValueError``, while ``utils.enforce_security`` is set.

WebDataset's module also binds what it imports (``partial`` and the ``utils`` module); so does
this one, for code that reaches them through it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial as partial
from typing import Any

from ..decoders import (
    IMAGE_EXTENSIONS,
    Continue,
    Decoder,
    DecodingError,
    ImageHandler,
    basichandlers,
    call_extension_handler,
    default_decoder,
    default_post_handlers,
    default_pre_handlers,
    gzfilter,
    handle_extension,
    imagehandler,
    imagespecs,
    torch_audio,
    torch_video,
)
from ..decoders import torch_loads as native_torch_loads
from ..decoders.basic import cbor_loads, msgpack_loads, npy_loads, npz_loads, tenbin_loads
from ..decoders.basic import unpickle_loads as native_unpickle_loads
from . import utils as utils
from ._security import refuse_if_enforced

#: Always True: ``.pth`` fields load with ``torch.load(weights_only=True)``. Arbitrary pickled
#: objects need ``decode(..., allow_pickle=True)`` instead of a process-wide switch.
pytorch_weights_only = True


def torch_loads(data: bytes) -> Any:
    """A ``torch.save`` file, loaded on the CPU with ``weights_only=True``."""
    refuse_if_enforced("torch.loads is not allowed for security reasons when enforce_security is set.")
    return native_torch_loads(data)


def unpickle_loads(data: bytes, *, allow_pickle: bool = False) -> Any:
    """A pickle, only with ``allow_pickle=True`` (otherwise ``UnsafeOperationError``)."""
    refuse_if_enforced("Unpickling is not allowed for security reasons when enforce_security is set.")
    return native_unpickle_loads(data, allow_pickle=allow_pickle)


def _text(data: bytes) -> str:
    return data.decode("utf-8")


#: WebDataset's extension -> loader table (``pkl``/``pickle``/``pyd`` refuse: see unpickle_loads).
decoders: dict[str, Callable[[bytes], Any]] = {
    "txt": _text,
    "text": _text,
    "transcript": _text,
    "cls": int,
    "cls2": int,
    "index": int,
    "inx": int,
    "id": int,
    "json": json.loads,
    "jsn": json.loads,
    "pkl": unpickle_loads,
    "pickle": unpickle_loads,
    "pyd": unpickle_loads,
    "pth": torch_loads,
    "ten": tenbin_loads,
    "tb": tenbin_loads,
    "mp": msgpack_loads,
    "msg": msgpack_loads,
    "npy": npy_loads,
    "npz": npz_loads,
    "cbor": cbor_loads,
}

__all__ = [
    "IMAGE_EXTENSIONS",
    "Continue",
    "Decoder",
    "DecodingError",
    "ImageHandler",
    "basichandlers",
    "call_extension_handler",
    "cbor_loads",
    "decoders",
    "default_decoder",
    "default_post_handlers",
    "default_pre_handlers",
    "gzfilter",
    "handle_extension",
    "imagehandler",
    "imagespecs",
    "msgpack_loads",
    "npy_loads",
    "npz_loads",
    "pytorch_weights_only",
    "tenbin_loads",
    "torch_audio",
    "torch_loads",
    "torch_video",
    "unpickle_loads",
]
