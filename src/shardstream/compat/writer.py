"""WebDataset-compatible ``writer`` namespace (thin re-exports)."""

from ..tar.encoders import imageencoder, make_handlers, numpy_dumps, torch_dumps
from ..tar.sharded_writer import ShardWriter
from ..tar.writer import TarWriter

__all__ = ["ShardWriter", "TarWriter", "imageencoder", "make_handlers", "numpy_dumps", "torch_dumps"]
