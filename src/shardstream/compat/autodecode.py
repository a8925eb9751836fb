"""WebDataset-compatible ``autodecode`` namespace (thin re-exports)."""

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
    torch_loads,
    torch_video,
)

#: Always True: ``.pth`` fields load with ``torch.load(weights_only=True)``. Arbitrary pickled
#: objects need ``decode(..., allow_pickle=True)`` instead of a process-wide switch.
pytorch_weights_only = True

__all__ = [
    "IMAGE_EXTENSIONS",
    "Continue",
    "Decoder",
    "DecodingError",
    "ImageHandler",
    "basichandlers",
    "call_extension_handler",
    "default_decoder",
    "default_post_handlers",
    "default_pre_handlers",
    "gzfilter",
    "handle_extension",
    "imagehandler",
    "imagespecs",
    "pytorch_weights_only",
    "torch_audio",
    "torch_loads",
    "torch_video",
]
