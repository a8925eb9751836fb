"""Synthetic videos and tones encoded with PyAV, for tests, benchmarks and examples.

Every frame of :func:`encode_video` draws its own index as 16 gray blocks (two rows of eight, a
bit each, bright for 1), so a decoded frame tells which frame it is (:func:`read_pattern`), even
after lossy coding and resizing. :func:`encode_tone` writes a sine of known frequency.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import Any

import numpy as np

from ._av import require_av

__all__ = ["encode_tone", "encode_video", "h264_encoder", "pattern_frame", "read_pattern"]

_BITS = 16
_CONTAINERS = {"mkv": "matroska", "m4a": "ipod", "ogg": "ogg", "opus": "ogg"}
_VIDEO_AUDIO = {"webm": "libopus", "avi": "pcm_s16le"}  # else aac
_AUDIO_CODECS = {
    "wav": "pcm_s16le",
    "flac": "flac",
    "mp3": "libmp3lame",
    "ogg": "libopus",
    "opus": "libopus",
    "m4a": "aac",
}


def h264_encoder() -> str:
    """``"libx264"`` when PyAV's FFmpeg has it, else ``"mpeg4"``."""
    av = require_av("encoding test videos")
    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


def pattern_frame(index: int, height: int = 64, width: int = 64, texture: Any = None) -> np.ndarray[Any, Any]:
    """An RGB frame drawing ``index`` (< 65536) as blocks in its top quarter.

    Args:
        texture: an optional ``H x W x 3`` uint8 image scrolled by the frame index under the
            pattern (more realistic motion and bit rate than flat colour).
    """
    frame: np.ndarray[Any, Any]
    if texture is not None:
        frame = np.roll(texture, 4 * index, axis=1)[:height, :width].copy()
    else:
        frame = np.empty((height, width, 3), np.uint8)
        frame[:] = np.linspace(40, 200, width, dtype=np.uint8)[None, :, None]
        frame[..., 1] = (index * 5) % 256
    bh, bw = height // 8, width // 8
    for bit in range(_BITS):
        row, col = divmod(bit, 8)
        frame[row * bh : (row + 1) * bh, col * bw : (col + 1) * bw] = 235 if (index >> bit) & 1 else 16
    return frame


def read_pattern(frame: np.ndarray[Any, Any]) -> int:
    """The index drawn by :func:`pattern_frame` into an RGB frame (any size)."""
    height, width = frame.shape[:2]
    bh, bw = height / 8, width / 8
    value = 0
    for bit in range(_BITS):
        row, col = divmod(bit, 8)
        y0, y1 = int((row + 0.25) * bh), max(int((row + 0.75) * bh), int((row + 0.25) * bh) + 1)
        x0, x1 = int((col + 0.25) * bw), max(int((col + 0.75) * bw), int((col + 0.25) * bw) + 1)
        if frame[y0:y1, x0:x1].mean() > 125:
            value |= 1 << bit
    return value


def _audio_frame(av: Any, signal: np.ndarray[Any, Any], stream: Any, pts: int) -> Any:
    """An AudioFrame of ``signal`` (channels x n float) in a sample format the encoder takes."""
    formats = [f.name for f in stream.codec_context.codec.audio_formats]
    layout = "mono" if signal.shape[0] == 1 else "stereo"
    for name in ("fltp", "flt", "s16", "s16p", "s32p", "s32"):
        if name in formats:
            break
    planar = name.endswith("p")
    if name.startswith("flt"):
        array = signal.astype(np.float32)
    else:
        scale = 32767 if name.startswith("s16") else 2**31 - 256
        array = (np.clip(signal, -1, 1) * scale).astype(np.int16 if name.startswith("s16") else np.int32)
    if not planar:
        array = array.T.reshape(1, -1)
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(array), format=name, layout=layout)
    frame.sample_rate, frame.pts = stream.codec_context.sample_rate, pts
    return frame


def _tone(start: int, count: int, rate: int, channels: int, freq: float) -> np.ndarray[Any, Any]:
    t = (np.arange(start, start + count) / rate)[None, :]
    return np.repeat(0.5 * np.sin(2 * np.pi * freq * t), channels, axis=0)


def encode_video(
    num_frames: int,
    *,
    fps: int = 25,
    width: int = 64,
    height: int = 64,
    codec: str = "h264",
    container: str = "mp4",
    gop: int | None = None,
    audio_rate: int | None = None,
    tone_hz: float = 440.0,
    texture: Any = None,
    options: dict[str, str] | None = None,
    faststart: bool = False,
) -> bytes:
    """Encode ``num_frames`` :func:`pattern_frame` frames; returns the file's bytes.

    Args:
        codec: an FFmpeg encoder; ``"h264"`` picks :func:`h264_encoder`.
        container: ``mp4``, ``mkv``, ``webm``, ``avi`` or ``mov``.
        gop: keyframe interval (frames); default the encoder's (x264: 250 and scene cuts).
        audio_rate: add a mono sine track at this sample rate.
        options: encoder options (``{"preset": "veryfast"}``).
        faststart: MP4/MOV: put the index (``moov``) before the frames, as streaming sites do.
    """
    av = require_av("encoding test videos")
    codec = h264_encoder() if codec == "h264" else codec
    if faststart:  # FFmpeg moves the index by re-reading the output: it needs a named file
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, f"video.{container}")
            _encode_video(av, path, num_frames, fps, width, height, codec, container, gop, audio_rate,
                          tone_hz, texture, options, {"movflags": "faststart"})  # fmt: skip
            with open(path, "rb") as stream:
                return stream.read()
    buffer = io.BytesIO()
    _encode_video(av, buffer, num_frames, fps, width, height, codec, container, gop, audio_rate,
                  tone_hz, texture, options, {})  # fmt: skip
    return buffer.getvalue()


def _encode_video(
    av: Any,
    target: Any,
    num_frames: int,
    fps: int,
    width: int,
    height: int,
    codec: str,
    container: str,
    gop: int | None,
    audio_rate: int | None,
    tone_hz: float,
    texture: Any,
    options: dict[str, str] | None,
    muxer: dict[str, str],
) -> None:
    with av.open(target, "w", format=_CONTAINERS.get(container, container), options=muxer) as out:
        settings = dict(options or {})
        if gop is not None and codec == "libx264":  # a fixed interval: no extra keyframes at scene cuts
            settings.update(g=str(gop), keyint_min=str(gop), sc_threshold="0")
        video = out.add_stream(codec, rate=fps, options=settings)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        if gop is not None:
            video.codec_context.gop_size = gop
        audio = None
        rate = audio_rate or 0
        if rate:
            audio = out.add_stream(_VIDEO_AUDIO.get(container, "aac"), rate=rate, layout="mono")
        written, chunk = 0, 1024
        for i in range(num_frames):
            frame = av.VideoFrame.from_ndarray(pattern_frame(i, height, width, texture), format="rgb24")
            out.mux(video.encode(frame))
            while audio is not None and written < (i + 1) * rate // fps:
                size = audio.codec_context.frame_size or chunk
                signal = _tone(written, size, rate, 1, tone_hz)
                out.mux(audio.encode(_audio_frame(av, signal, audio, written)))
                written += size
        out.mux(video.encode(None))
        if audio is not None:
            out.mux(audio.encode(None))


def encode_tone(
    seconds: float,
    *,
    sample_rate: int = 16000,
    channels: int = 1,
    freq: float = 440.0,
    container: str = "wav",
    codec: str | None = None,
) -> bytes:
    """A sine of ``freq`` Hz (amplitude 0.5) encoded as ``container`` (wav, flac, mp3, ogg, opus, m4a)."""
    av = require_av("encoding test audio")
    buffer = io.BytesIO()
    total = round(seconds * sample_rate)
    layout = "mono" if channels == 1 else "stereo"
    with av.open(buffer, "w", format=_CONTAINERS.get(container, container)) as out:
        stream = out.add_stream(codec or _AUDIO_CODECS[container], rate=sample_rate, layout=layout)
        size = stream.codec_context.frame_size or 1024
        for start in range(0, total, size):
            count = min(size, total - start)
            signal = _tone(start, count, sample_rate, channels, freq)
            out.mux(stream.encode(_audio_frame(av, signal, stream, start)))
        out.mux(stream.encode(None))
    return buffer.getvalue()
