"""Image decoding with WebDataset's image specs (``"pil"``, ``"rgb8"``, ``"torchrgb"``, ...).

A spec names the output type, element type and channels:

========== ====== ======= ===== =====================================================
spec       type   dtype   mode  shape
========== ====== ======= ===== =====================================================
l8         numpy  uint8   L     (H, W)
rgb8       numpy  uint8   RGB   (H, W, 3)
rgba8      numpy  uint8   RGBA  (H, W, 4)
l          numpy  float32 L     (H, W), values in [0, 1]
rgb        numpy  float32 RGB   (H, W, 3), values in [0, 1]
rgba       numpy  float32 RGBA  (H, W, 4), values in [0, 1]
torchl8    torch  uint8   L     (H, W)
torchrgb8  torch  uint8   RGB   (3, H, W)
torchrgba8 torch  uint8   RGBA  (4, H, W)
torchl     torch  float32 L     (H, W), values in [0, 1]
torchrgb   torch  float32 RGB   (3, H, W), values in [0, 1]; ``torch`` is the same
torchrgba  torch  float32 RGBA  (4, H, W), values in [0, 1]
pill       PIL    -       L
pil        PIL    -       RGB; ``pilrgb`` is the same
pilrgba    PIL    -       RGBA
========== ====== ======= ===== =====================================================

JPEGs decoded to arrays or tensors go through simplejpeg or PyTurboJPEG when one is installed
(see :mod:`._jpeg`), else Pillow; ``jpeg_backend="pillow"`` forces Pillow. Every path applies
Pillow's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) to the header's dimensions
before any pixel buffer is allocated, with Pillow's error and warning types. Arrays returned are
writable and C-contiguous (WebDataset returns read-only arrays for the numpy specs, which makes
``torch.as_tensor`` warn).
"""

from __future__ import annotations

import copy
import functools
import io
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from ..errors import ConfigurationError
from ..optional import require, require_torch
from ._jpeg import JpegInto, get_backend, get_into
from .deferred import DeferredArray

__all__ = ["IMAGE_EXTENSIONS", "JPEG_EXTENSIONS", "ImageHandler", "ImageSpec", "imagehandler", "imagespecs"]

#: Extensions handed to the image decoder by default: every format Pillow can open.
IMAGE_EXTENSIONS: list[str] = (
    "blp bmp dib bufr cur pcx dcx dds ps eps fit fits fli flc ftc ftu gbr gif grib h5 hdf png apng jp2 "
    "j2k jpc jpf jpx j2c icns ico im iim tif tiff jfif jpe jpg jpeg mpg mpeg msp pcd pxr pbm pgm ppm pnm "
    "psd bw rgb rgba sgi ras tga icb vda vst webp wmf emf xbm xpm"
).split()

#: Extensions whose bytes may take the fast JPEG path.
JPEG_EXTENSIONS = frozenset({"jpg", "jpeg", "jpe", "jfif"})

_CHANNELS = {"rgb": 3, "rgba": 4}
_UINT8 = np.dtype(np.uint8)


class ImageSpec(NamedTuple):
    """What an image spec decodes to: ``atype`` (numpy/torch/pil), ``etype`` (uint8/float/None), mode."""

    atype: str
    etype: str | None
    mode: str


imagespecs: dict[str, ImageSpec] = {
    "l8": ImageSpec("numpy", "uint8", "l"),
    "rgb8": ImageSpec("numpy", "uint8", "rgb"),
    "rgba8": ImageSpec("numpy", "uint8", "rgba"),
    "l": ImageSpec("numpy", "float", "l"),
    "rgb": ImageSpec("numpy", "float", "rgb"),
    "rgba": ImageSpec("numpy", "float", "rgba"),
    "torchl8": ImageSpec("torch", "uint8", "l"),
    "torchrgb8": ImageSpec("torch", "uint8", "rgb"),
    "torchrgba8": ImageSpec("torch", "uint8", "rgba"),
    "torchl": ImageSpec("torch", "float", "l"),
    "torchrgb": ImageSpec("torch", "float", "rgb"),
    "torch": ImageSpec("torch", "float", "rgb"),
    "torchrgba": ImageSpec("torch", "float", "rgba"),
    "pill": ImageSpec("pil", None, "l"),
    "pil": ImageSpec("pil", None, "rgb"),
    "pilrgb": ImageSpec("pil", None, "rgb"),
    "pilrgba": ImageSpec("pil", None, "rgba"),
}

_PIL_HINT = "pip install pillow (or pip install 'shardstream[image]')"


def _pil() -> ModuleType:
    return require("PIL.Image", purpose="decoding images", install=_PIL_HINT)


class ImageHandler:
    """Decodes image fields according to an image spec (a WebDataset-style handler).

    Args:
        imagespec: one of :data:`imagespecs` (case-insensitive).
        extensions: extensions (last component, case-insensitive) this handler decodes.
            Default :data:`IMAGE_EXTENSIONS`.
        jpeg_backend: ``"auto"`` (default: simplejpeg, then PyTurboJPEG, then Pillow),
            ``"pillow"``, ``"simplejpeg"`` or ``"turbojpeg"``. Only array/tensor specs use it.
    """

    def __init__(
        self, imagespec: str, extensions: Any = IMAGE_EXTENSIONS, *, jpeg_backend: str = "auto"
    ) -> None:
        spec = imagespec.lower() if isinstance(imagespec, str) else imagespec
        if spec not in imagespecs:
            raise ConfigurationError(
                f"unknown image spec {imagespec!r}; use one of {', '.join(imagespecs)} "
                "(e.g. decode('rgb8') for uint8 HWC arrays, decode('pil') for PIL images)"
            )
        if isinstance(extensions, str):
            extensions = extensions.split()
        self.imagespec: str = spec
        self.spec = imagespecs[spec]
        self.extensions = frozenset(e.lower() for e in extensions)
        self.dispatch_extensions = self.extensions
        self.jpeg_backend = jpeg_backend
        self._fast = get_backend(jpeg_backend) if self.spec.atype != "pil" else None
        # Torch specs fail here, when the pipeline is built, rather than at the first image.
        self._torch: ModuleType | None = (
            require_torch(purpose=f"image spec {self.imagespec!r}") if self.spec.atype == "torch" else None
        )
        self._into: JpegInto | None = None  # set in a copy made by deferring()

    def deferring(self) -> ImageHandler:
        """This handler, returning JPEGs as :class:`~.deferred.DeferredArray` values that the
        default collation decodes straight into the batch (``deferred.py``), or ``self`` when it
        cannot: only uint8 numpy specs (``rgb8``, ``rgba8``, ``l8``) on simplejpeg defer."""
        if self.spec.atype != "numpy" or self.spec.etype != "uint8":
            return self
        into = get_into(self.jpeg_backend)
        if into is None:
            return self
        deferring = copy.copy(self)
        deferring._into = into
        return deferring

    def __getstate__(self) -> dict[str, Any]:
        # Modules and the JPEG backend's closure do not pickle (DataLoader workers started with
        # spawn receive the handler pickled): drop them and resolve them again on arrival.
        state = dict(self.__dict__)
        state["_fast"] = state["_torch"] = None
        state["_defer"], state["_into"] = state["_into"] is not None, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        defer = state.pop("_defer", False)
        self.__dict__.update(state)
        if self.spec.atype != "pil":
            self._fast = get_backend(self.jpeg_backend)
        self._into = get_into(self.jpeg_backend) if defer else None

    def __call__(self, key: str, data: bytes) -> Any:
        extension = key.rpartition(".")[2].lower()
        if extension not in self.extensions:
            return None
        return self.decode(data, extension)

    def dispatch_lookup(self, extension: str) -> Callable[[bytes], Any] | None:
        """For the Decoder's dispatch table: a ``bytes -> image`` function for ``extension``."""
        if extension not in self.extensions:
            return None
        return functools.partial(self.decode, extension=extension)

    def decode(self, data: bytes, extension: str = "") -> Any:
        """Decode image bytes; ``extension`` (lower-case) enables the fast JPEG path for JPEGs."""
        atype, etype, mode = self.spec
        if atype == "pil":
            return self._pil_image(data, mode)
        array = None
        if self._into is not None and extension in JPEG_EXTENSIONS:
            dims = self._into.header(data)
            if dims is not None:
                shape = dims if mode == "l" else (*dims, _CHANNELS[mode])
                return DeferredArray(shape, _UINT8, functools.partial(self._fill, data, mode))
        if self._fast is not None and extension in JPEG_EXTENSIONS:
            array = self._fast(data, mode)
        if array is None:
            array = np.array(self._pil_image(data, mode))
        if etype == "float":
            array = array.astype(np.float32)
            array /= 255.0
        if atype == "numpy":
            return array
        torch = self._torch
        if torch is None:  # unpickled in a worker
            torch = self._torch = require_torch(purpose=f"image spec {self.imagespec!r}")
        if array.ndim == 3:
            array = np.ascontiguousarray(array.transpose(2, 0, 1))
        return torch.from_numpy(array)

    def _fill(self, data: bytes, mode: str, out: np.ndarray[Any, Any]) -> None:
        """A deferred JPEG's decode into ``out``; Pillow when simplejpeg cannot (as eagerly)."""
        assert self._into is not None
        if self._into.into(data, mode, out):
            return
        array = np.asarray(self._pil_image(data, mode))
        if array.shape != out.shape:
            raise ValueError(f"Pillow decoded a {array.shape} image where the JPEG header said {out.shape}")
        out[...] = array

    @staticmethod
    def _pil_image(data: bytes, mode: str) -> Any:
        image = _pil().open(io.BytesIO(data))
        image.load()
        wanted = mode.upper()
        return image if image.mode == wanted else image.convert(wanted)

    def __repr__(self) -> str:
        return f"ImageHandler({self.imagespec!r}, jpeg_backend={self.jpeg_backend!r})"


def imagehandler(
    imagespec: str, extensions: Any = IMAGE_EXTENSIONS, *, jpeg_backend: str = "auto"
) -> ImageHandler:
    """Build an :class:`ImageHandler` (WebDataset's lower-case alias)."""
    return ImageHandler(imagespec, extensions, jpeg_backend=jpeg_backend)
