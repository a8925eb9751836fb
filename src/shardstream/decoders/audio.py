"""Audio decoding through torchaudio (``torch_audio``, WebDataset-compatible), imported lazily."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ._lazy import TORCH_INSTALL_HINT, require

__all__ = ["AUDIO_EXTENSIONS", "torch_audio"]

AUDIO_EXTENSIONS = frozenset("flac mp3 sox wav m4a ogg wma".split())


class _TorchAudio:
    """``torch_audio(key, data)``: ``torchaudio.load`` output ``(waveform, sample_rate)``, else None.

    The bytes go through a temporary file so every torchaudio backend can read them. Needs
    ``torchaudio`` (``pip install torchaudio``, matching the installed torch version).
    """

    dispatch_extensions = AUDIO_EXTENSIONS

    def __call__(self, key: str, data: bytes) -> Any:
        extension = key.rpartition(".")[2].lower()
        if extension not in AUDIO_EXTENSIONS:
            return None
        torchaudio = require(
            "torchaudio",
            purpose="decoding audio fields",
            install=f"pip install torchaudio (same version as torch), and torch first: {TORCH_INSTALL_HINT}",
        )
        with tempfile.TemporaryDirectory() as dirname:
            path = os.path.join(dirname, f"file.{extension}")
            with open(path, "wb") as stream:
                stream.write(data)
            return torchaudio.load(path)

    def __repr__(self) -> str:
        return "torch_audio"


torch_audio = _TorchAudio()
