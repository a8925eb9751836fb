"""Whole-video decoding (``torch_video``, WebDataset-compatible) and metadata (``video_info``) on PyAV.

``torch_video`` returns what WebDataset's did through ``torchvision.io.read_video``: ``(frames,
audio, info)`` with frames uint8 ``T x H x W x 3``, audio float32 ``channels x samples`` (``1 x 0``
without audio) and ``info = {"video_fps": ..., "audio_fps": ...}``, but decodes from memory with
PyAV, needs neither torchvision nor a temp file, and reads video and audio in one demuxing pass.
It decodes every frame: for training on clips use :class:`~shardstream.decoders.clips.VideoClips`.

``video_info`` reads headers only (plus a packet count for containers without one, such as
WebM): duration, frame rate, frame count, size, codecs and audio streams.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import DecodingError
from ..optional import require_torch
from ._av import (
    MediaError,
    channel_count,
    configure_threads,
    describe,
    open_media,
    require_av,
    rgb_converter,
    video_meta,
)

__all__ = ["VIDEO_EXTENSIONS", "VideoSummary", "decode_video", "probe_video", "torch_video", "video_info"]

#: Fields the video decoders take (last extension component).
VIDEO_EXTENSIONS = frozenset("mp4 m4v mkv webm avi mov ogv mjpeg h264 mpg wmv flv ts".split())


def decode_video(
    data: bytes,
    extension: str = "mp4",
    *,
    threads: int | None = None,
    sample: Mapping[str, Any] | None = None,
) -> tuple[np.ndarray[Any, np.dtype[np.uint8]], np.ndarray[Any, np.dtype[np.float32]], dict[str, Any]]:
    """Every frame and the first audio stream: ``(frames THWC uint8, audio CxL float32, info)``."""
    av = require_av("decoding video fields")
    with open_media(data, extension=extension, purpose="decoding video fields", sample=sample) as container:
        if not container.streams.video:
            raise MediaError(describe(container, extension), "it has no video stream")
        video = container.streams.video[0]
        audio = container.streams.audio[0] if container.streams.audio else None
        n = configure_threads(video, threads)
        # Every frame is converted to the stream's declared size, even if it changes mid-stream.
        height, width = int(video.codec_context.height), int(video.codec_context.width)
        if not (height and width):
            raise MediaError(describe(container, extension), "the video stream declares no frame size")
        frames = _FrameBuffer(int(video.frames or 0), height, width)
        convert = rgb_converter(n, width, height)
        chunks: list[np.ndarray[Any, Any]] = []
        resampler = av.AudioResampler(format="fltp") if audio is not None else None
        for packet in container.demux(*(s for s in (video, audio) if s is not None)):
            for frame in packet.decode():
                if packet.stream is video:
                    frames.append(convert(frame))
                elif resampler is not None:
                    chunks.extend(out.to_ndarray() for out in resampler.resample(frame))
        if resampler is not None:
            chunks.extend(out.to_ndarray() for out in resampler.resample(None))
        if not frames.count:
            raise MediaError(describe(container, extension), "no frame could be decoded")
        info: dict[str, Any] = {"video_fps": float(video.average_rate or video.guessed_rate or 0)}
        if audio is not None:
            info["audio_fps"] = int(audio.codec_context.sample_rate)
    samples = np.concatenate(chunks, axis=1) if chunks else np.empty((1, 0), np.float32)
    return frames.result(), samples.astype(np.float32, copy=False), info


class _FrameBuffer:
    """Frames written into one array sized from the header's frame count (no list-then-stack
    copy, which doubles the peak); grows if the header undercounts, trimmed if it overcounts."""

    def __init__(self, expected: int, height: int, width: int) -> None:
        self.array = np.empty((max(expected, 1), height, width, 3), np.uint8)
        self.count = 0

    def append(self, frame: np.ndarray[Any, Any]) -> None:
        if self.count == len(self.array):
            grown = np.empty((len(self.array) * 2, *self.array.shape[1:]), np.uint8)
            grown[: self.count] = self.array
            self.array = grown
        self.array[self.count] = frame
        self.count += 1

    def result(self) -> np.ndarray[Any, np.dtype[np.uint8]]:
        return self.array if self.count == len(self.array) else self.array[: self.count].copy()


class _TorchVideo:
    """``torch_video(key, data)``: ``(frames, audio, info)`` tensors for video fields, else None.

    A drop-in for WebDataset's ``torch_video`` (see the module docstring). Needs torch and PyAV.
    """

    dispatch_extensions = VIDEO_EXTENSIONS

    def __call__(self, key: str, data: bytes) -> Any:
        extension = key.rpartition(".")[2].lower()
        if extension not in VIDEO_EXTENSIONS:
            return None
        torch = require_torch(purpose="torch_video")
        frames, audio, info = decode_video(data, extension)
        return torch.from_numpy(frames), torch.from_numpy(audio), info

    def __repr__(self) -> str:
        return "torch_video"


torch_video = _TorchVideo()


def probe_video(
    data: bytes, extension: str = "mp4", *, sample: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Metadata of a video's bytes without decoding frames.

    Returns a dict: ``format`` (container), ``duration`` (s), ``bit_rate``; of the first video
    stream ``codec``, ``width``, ``height``, ``fps``, ``total_frames``, ``pix_fmt`` (all None
    without one); ``audio``: a list of ``{codec, sample_rate, channels, duration}``.
    """
    with open_media(data, extension=extension, purpose="reading video metadata", sample=sample) as container:
        info: dict[str, Any] = {
            "format": container.format.name,
            "duration": container.duration / 1_000_000 if container.duration is not None else None,
            "bit_rate": container.bit_rate or None,
        }
        audio = [
            {
                "codec": stream.codec_context.name,
                "sample_rate": int(stream.codec_context.sample_rate),
                "channels": channel_count(stream),
                "duration": float(stream.duration * stream.time_base) if stream.duration else None,
            }
            for stream in container.streams.audio
        ]
        keys = ("codec", "width", "height", "fps", "total_frames", "pix_fmt")
        info.update(dict.fromkeys(keys))
        if container.streams.video:
            stream = container.streams.video[0]
            meta = video_meta(container, stream)
            info.update(
                codec=meta.codec,
                width=meta.width,
                height=meta.height,
                fps=meta.fps,
                total_frames=meta.total_frames,
                pix_fmt=stream.codec_context.pix_fmt,
            )
            info["duration"] = info["duration"] or meta.duration
        info["audio"] = audio
    return info


class _VideoInfo:
    """``video_info(key, data)``: :func:`probe_video`'s dict for video fields, else None."""

    dispatch_extensions = VIDEO_EXTENSIONS

    def __call__(self, key: str, data: bytes) -> dict[str, Any] | None:
        extension = key.rpartition(".")[2].lower()
        if extension not in VIDEO_EXTENSIONS:
            return None
        return probe_video(data, extension)

    def __repr__(self) -> str:
        return "video_info"


#: Decode video fields to their metadata: ``.decode(video_info)`` (see :func:`probe_video`).
video_info = _VideoInfo()


class VideoSummary:
    """Aggregates :func:`probe_video` over a shard's video members (for ``shardstream stat``)."""

    def __init__(self) -> None:
        self.videos = 0
        self.unreadable: list[str] = []
        self.codecs: collections.Counter[str] = collections.Counter()
        self.sizes: collections.Counter[str] = collections.Counter()
        self.rates: collections.Counter[str] = collections.Counter()
        self.audio: collections.Counter[str] = collections.Counter()
        self.durations: list[float] = []
        self.frames = 0
        self.missing_av = False

    def add(self, name: str, data: bytes) -> None:
        """Count one video member (``name`` is the member's name, for the list of unreadable ones)."""
        self.videos += 1
        if self.missing_av:
            return
        try:
            info = probe_video(data, name.rpartition(".")[2].lower())
        except ImportError:
            self.missing_av = True
            return
        except DecodingError:
            self.unreadable.append(name)
            return
        self.codecs[info["codec"] or "none"] += 1
        self.sizes[f"{info['width']}x{info['height']}"] += 1
        self.rates[f"{info['fps']:.4g} fps" if info["fps"] else "no rate"] += 1
        self.audio.update([a["codec"] for a in info["audio"]] or ["none"])
        self.durations.append(info["duration"] or 0.0)
        self.frames += info["total_frames"] or 0

    def lines(self) -> list[str]:
        """``label: text`` pairs to print, empty without video members."""
        if not self.videos:
            return []

        def top(counter: collections.Counter[str]) -> str:
            items = counter.most_common()
            text = ", ".join(f"{value} x{n}" for value, n in items[:4])
            return text + (f", {len(items) - 4} more" if len(items) > 4 else "")

        if self.missing_av:
            out = [("videos", f"{self.videos} (codecs and durations need PyAV: pip install av)")]
        else:
            out = [("videos", f"{self.videos}: {top(self.codecs)}; {top(self.sizes)}; {top(self.rates)}")]
        if self.durations:
            d = self.durations
            out.append(
                (
                    "duration",
                    f"{min(d):.1f} / {statistics.median(d):.1f} / {max(d):.1f} s (min / median / max), "
                    f"{sum(d):,.0f} s and {self.frames:,} frames in all",
                )
            )
            out.append(("audio", top(self.audio)))
        if self.unreadable:
            out.append(("unreadable", f"{len(self.unreadable)}: {', '.join(self.unreadable[:3])}"))
        return [f"{label + ':':<12}{text}" for label, text in out]
