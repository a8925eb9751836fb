"""Video decoding through torchvision (``torch_video``, WebDataset-compatible), imported lazily."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ._lazy import TORCH_INSTALL_HINT, require

__all__ = ["VIDEO_EXTENSIONS", "torch_video"]

VIDEO_EXTENSIONS = frozenset("mp4 ogv mjpeg avi mov h264 mpg webm wmv".split())


class _TorchVideo:
    """``torch_video(key, data)``: ``torchvision.io.read_video`` output for video fields, else None.

    Returns ``(video frames THWC uint8, audio, info)``. torchvision reads from a path, so the bytes
    go through a temporary file. Needs ``torchvision`` and PyAV (``pip install torchvision av``).
    """

    dispatch_extensions = VIDEO_EXTENSIONS

    def __call__(self, key: str, data: bytes) -> Any:
        extension = key.rpartition(".")[2].lower()
        if extension not in VIDEO_EXTENSIONS:
            return None
        io = require(
            "torchvision.io",
            purpose="decoding video fields",
            install=f"pip install torchvision av, and torch first: {TORCH_INSTALL_HINT}",
        )
        with tempfile.TemporaryDirectory() as dirname:
            path = os.path.join(dirname, f"file.{extension}")
            with open(path, "wb") as stream:
                stream.write(data)
            return io.read_video(path, pts_unit="sec")

    def __repr__(self) -> str:
        return "torch_video"


torch_video = _TorchVideo()
