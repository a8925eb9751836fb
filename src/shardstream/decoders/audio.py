"""Audio on PyAV: whole files (``torch_audio``, WebDataset-compatible) and windows (``AudioWindows``).

Both decode from memory and convert every sample format to float32 planar through PyAV's
``AudioResampler`` (which also changes the rate when asked). ``torch_audio`` returns what
``torchaudio.load`` did: ``(waveform float32 channels x samples, sample_rate)``, without
torchaudio or a temp file. ``AudioWindows`` seeks to each window and decodes only around it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from ..optional import require_torch
from ._av import MediaError, channel_count, describe, open_media, require_av
from ._starts import SeededFieldDecoder, check_start, window_starts

__all__ = ["AUDIO_EXTENSIONS", "AudioWindows", "decode_audio", "torch_audio"]

#: Fields the audio decoders take (last extension component).
AUDIO_EXTENSIONS = frozenset("flac mp3 wav m4a ogg oga opus aac wma sox".split())
_PREROLL = 0.2  # seconds decoded before a window: codecs (Opus, AAC, MP3) and the resampler need history


def _audio_stream(container: Any, extension: str) -> Any:
    if not container.streams.audio:
        raise MediaError(describe(container, extension), "it has no audio stream")
    return container.streams.audio[0]


def decode_audio(
    data: bytes,
    extension: str = "wav",
    *,
    sample_rate: int | None = None,
    sample: Mapping[str, Any] | None = None,
) -> tuple[np.ndarray[Any, np.dtype[np.float32]], int]:
    """The first audio stream, whole: ``(samples float32 channels x n, sample rate)``."""
    av = require_av("decoding audio fields")
    with open_media(data, extension=extension, purpose="decoding audio fields", sample=sample) as container:
        stream = _audio_stream(container, extension)
        rate = sample_rate or int(stream.codec_context.sample_rate)
        resampler = av.AudioResampler(format="fltp", rate=rate)
        chunks = [out.to_ndarray() for frame in container.decode(stream) for out in resampler.resample(frame)]
        chunks.extend(out.to_ndarray() for out in resampler.resample(None))
        channels = channel_count(stream)
    samples = np.concatenate(chunks, axis=1) if chunks else np.zeros((channels, 0), np.float32)
    return samples.astype(np.float32, copy=False), rate


class _TorchAudio:
    """``torch_audio(key, data)``: ``(waveform, sample_rate)`` as ``torchaudio.load`` gave, else None."""

    dispatch_extensions = AUDIO_EXTENSIONS

    def __call__(self, key: str, data: bytes) -> Any:
        extension = key.rpartition(".")[2].lower()
        if extension not in AUDIO_EXTENSIONS:
            return None
        torch = require_torch(purpose="torch_audio")
        samples, rate = decode_audio(data, extension)
        return torch.from_numpy(samples), rate

    def __repr__(self) -> str:
        return "torch_audio"


torch_audio = _TorchAudio()


def _read_window(
    av: Any, container: Any, stream: Any, first: int, dst: np.ndarray[Any, Any], rate: int
) -> None:
    """Fill ``dst`` (channels x n) with samples ``first .. first + n`` at ``rate``; zeros past the end.

    Seeks to the packet ``_PREROLL`` before the window (after a seek, Opus, AAC and MP3 decoders
    and the resampler's filter need history to converge) and decodes forward to the window's end.
    A seek that lands after the window's start (inexact seeking in headerless MP3) is retried from
    the stream's start.
    """
    start_pts = int(stream.start_time or 0)
    seconds = max(0.0, first / rate - _PREROLL)
    for target in (start_pts + int(seconds / stream.time_base), start_pts):
        container.seek(target, stream=stream, backward=True, any_frame=False)
        resampler = av.AudioResampler(format="fltp", rate=rate)
        if _fill(container.decode(stream), resampler, first, dst, strict=target != start_pts):
            return


def _fill(
    frames: Iterable[Any], resampler: Any, first: int, dst: np.ndarray[Any, Any], *, strict: bool
) -> bool:
    """Copy resampled output overlapping the window into ``dst``; False if it began after the window."""
    n, position = dst.shape[1], None
    for frame in itertools.chain(frames, [None]):  # None flushes the resampler
        for out in resampler.resample(frame):
            # Positions in samples at the output rate (a pass-through frame keeps its stream's time base).
            if out.pts is not None:
                at = round(out.pts * out.time_base * out.sample_rate)
            else:
                at = position if position is not None else first
            if position is None and at > first and strict:
                return False
            chunk = out.to_ndarray()
            lo, hi = max(at, first), min(at + chunk.shape[1], first + n)
            if hi > lo:
                dst[:, lo - first : hi - first] = chunk[:, lo - at : hi - at]
            position = at + chunk.shape[1]
            if position >= first + n:
                return True
    return True


class AudioWindows(SeededFieldDecoder):
    """Decodes each audio field into ``windows`` windows of ``seconds`` (a field decoder).

    Use as ``.decode(AudioWindows(2.0, sample_rate=16000))``; each audio field becomes a dict:
    ``samples`` (float32 ``windows x channels x n`` with ``n = round(seconds * sample_rate)``; a
    torch tensor, or NumPy with ``output="numpy"``), ``sample_rate`` and ``starts`` (float64
    seconds, ascending). A window past the end is zero-padded, so shapes are fixed.

    Args:
        seconds: window length.
        sample_rate: resample to this rate (PyAV's ``AudioResampler``). Default: the file's rate.
        windows: windows per field. Default 1.
        start: ``"random"`` (default, a pure function of seed, epoch and sample key),
            ``"uniform"`` or ``"center"``, as for :class:`~shardstream.VideoClips`.
        mono: average the channels into one. Default False.
        seed: seed of the random starts. Default: the pipeline's seed, else ``SHARDSTREAM_SEED``,
            else 0.
        extensions: fields to decode. Default: the audio extensions (pass ``"mp4"`` to take the
            audio of videos).
        output: ``"torch"`` (default) or ``"numpy"``.
    """

    def __init__(
        self,
        seconds: float,
        *,
        sample_rate: int | None = None,
        windows: int = 1,
        start: str = "random",
        mono: bool = False,
        seed: int | None = None,
        extensions: str | Iterable[str] = AUDIO_EXTENSIONS,
        output: str = "torch",
    ) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ConfigurationError(f"seconds={seconds!r} must be a positive number")
        if sample_rate is not None and (
            isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate < 1
        ):
            raise ConfigurationError(f"sample_rate={sample_rate!r} must be a positive int or None")
        if isinstance(windows, bool) or not isinstance(windows, int) or windows < 1:
            raise ConfigurationError(f"windows={windows!r} must be an integer >= 1")
        if output not in ("torch", "numpy"):
            raise ConfigurationError(f"output={output!r} must be 'torch' or 'numpy'")
        check_start(start)
        if output == "torch":
            require_torch(purpose="AudioWindows(output='torch'); pass output='numpy' for NumPy arrays")
        self.seconds, self.sample_rate, self.windows = float(seconds), sample_rate, windows
        self.start, self.mono, self.output = start, mono, output
        self._init_dispatch(seed, extensions)

    def decode_in_sample(self, key: str, data: bytes, sample: Mapping[str, Any]) -> dict[str, Any] | None:
        """Decode the field ``key`` (with its leading dot) of ``sample``; ``None`` if not an audio field."""
        extension = self._dispatch(key)
        if extension is None:
            return None
        rng = self._rng("windows", key, sample)
        av = require_av("AudioWindows")
        with open_media(data, extension=extension, purpose="AudioWindows", sample=sample) as container:
            stream = _audio_stream(container, extension)
            native = int(stream.codec_context.sample_rate)
            rate = self.sample_rate or native
            if stream.duration:
                duration = float(stream.duration * stream.time_base)
            else:
                duration = (container.duration or 0) / 1_000_000
            n = round(self.seconds * rate)
            starts = window_starts(self.start, math.floor(duration * rate), n, self.windows, rng)
            channels = channel_count(stream)
            out = np.zeros((self.windows, channels, n), dtype=np.float32)
            for window, first in enumerate(starts.tolist()):
                _read_window(av, container, stream, first, out[window], rate)
        if self.mono and channels > 1:
            out = out.mean(axis=1, keepdims=True)
        return self._result(out, rate, starts / rate)

    def _result(
        self, samples: np.ndarray[Any, Any], rate: int, starts: np.ndarray[Any, Any]
    ) -> dict[str, Any]:
        result: dict[str, Any] = {"samples": samples, "sample_rate": rate, "starts": starts}
        if self.output == "torch":
            torch = require_torch(purpose="AudioWindows(output='torch')")
            result["samples"] = torch.from_numpy(samples)
            result["starts"] = torch.from_numpy(starts)
        return result

    def __repr__(self) -> str:
        return (
            f"AudioWindows({self.seconds}, sample_rate={self.sample_rate}, windows={self.windows}, "
            f"start={self.start!r}, mono={self.mono}, seed={self.seed})"
        )
