"""WebDataset-compatible ``writer`` namespace (thin re-exports).

``default_handlers`` and ``make_handlers()`` leave out the pickle extensions (``pyd``,
``pickle``): a writer writes them only with ``allow_pickle=True``.

WebDataset's module also binds ``gopen``: the function ``gopen.gopen`` (its ``from . import gopen``
runs after the package bound that name to the function), and so does this one.
"""

from ..tar.encoders import (
    add_handlers,
    bytestr,
    cbor_dumps,
    default_handlers,
    encode_based_on_extension,
    encode_based_on_extension1,
    imageencoder,
    make_encoder,
    make_handlers,
    mp_dumps,
    numpy_dumps,
    numpy_npz_dumps,
    tenbin_dumps,
    torch_dumps,
)
from ..tar.sharded_writer import ShardWriter
from ..tar.writer import TarWriter
from .gopen import gopen as gopen

__all__ = [
    "ShardWriter",
    "TarWriter",
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
