"""``VideoClips``: fixed-length clips from video fields, decoded by seeking, never the whole file.

For each clip the decoder seeks to the keyframe before the clip's first frame and decodes forward
only to its last frame; several clips of one video are read in one ascending pass (see
:func:`._av.read_frames`). Frames are converted (and resized, inside swscale) straight into the
output array, so memory is the clips themselves plus one decoded frame, whatever the video's
length. The cost of a clip is the distance from the keyframe before it plus its own frames: with
a keyframe every 2 s, an 8-frame clip of a 30 s video decodes about 1/20 of its frames.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from ..optional import require_torch
from ._av import (
    MediaError,
    VideoMeta,
    configure_threads,
    describe,
    open_media,
    read_frames,
    rgb_converter,
    video_meta,
)
from ._starts import SeededFieldDecoder, check_start, window_starts
from .video import VIDEO_EXTENSIONS

__all__ = ["VideoClips", "output_size"]

_OUTPUTS = ("torch", "numpy")


def output_size(size: int | tuple[int, int] | None, height: int, width: int) -> tuple[int, int]:
    """(height, width) after resizing: ``None`` keeps it, an int is the shorter side (aspect kept),
    a pair is ``(height, width)``."""
    if size is None:
        return height, width
    if isinstance(size, int):
        if width <= height:
            return max(1, round(height * size / width)), size
        return size, max(1, round(width * size / height))
    return int(size[0]), int(size[1])


def _positive(name: str, value: Any, *, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{name}={value!r} must be an integer >= {low}")


class VideoClips(SeededFieldDecoder):
    """Decodes each video field into ``clips`` clips of ``num_frames`` frames (a field decoder).

    Use as ``.decode(VideoClips(8))``; each video field becomes a dict:

    * ``frames``: uint8, ``clips x num_frames x H x W x 3`` (RGB), a torch tensor (or NumPy array
      with ``output="numpy"``);
    * ``indices``: int64, ``clips x num_frames``, the frame numbers in the video;
    * ``fps`` (the video's frame rate), ``duration`` (seconds) and ``total_frames``.

    Clips are ordered by start. A clip longer than the video repeats its last frame, so shapes
    are fixed and batches collate.

    Args:
        num_frames: frames per clip.
        step: take every ``step``-th frame of the clip's frame grid (the video's frames, or the
            grid of ``fps``). Default 1.
        fps: sample clips at this frame rate (the frame showing at each instant; frames are
            repeated or skipped, never interpolated). Default None: the video's own rate.
        clips: clips per video. Default 1.
        start: ``"random"`` (default: a pure function of seed, epoch and sample key, so a resumed
            epoch reproduces it), ``"uniform"`` (evenly spaced over the video) or ``"center"``
            (centred in equal segments of the video).
        size: resize while converting: an int for the shorter side (aspect kept) or
            ``(height, width)``. Default None: the video's size.
        seed: seed of the random starts. Default None: the pipeline's seed, else
            ``SHARDSTREAM_SEED``, else 0.
        threads: FFmpeg threads per video. Default None: 1 inside a DataLoader worker (the workers
            are the parallelism), FFmpeg's automatic count elsewhere.
        extensions: fields to decode (last extension component). Default: the video extensions.
        output: ``"torch"`` (default) or ``"numpy"``.
    """

    def __init__(
        self,
        num_frames: int,
        *,
        step: int = 1,
        fps: float | None = None,
        clips: int = 1,
        start: str = "random",
        size: int | tuple[int, int] | None = None,
        seed: int | None = None,
        threads: int | None = None,
        extensions: str | Iterable[str] = VIDEO_EXTENSIONS,
        output: str = "torch",
    ) -> None:
        _positive("num_frames", num_frames)
        _positive("step", step)
        _positive("clips", clips)
        if threads is not None:
            _positive("threads", threads, allow_zero=True)
        if fps is not None and not (isinstance(fps, (int, float)) and fps > 0):
            raise ConfigurationError(f"fps={fps!r} must be a positive number or None")
        if size is not None:
            pair = (size,) if isinstance(size, int) else tuple(size)
            if len(pair) not in (1, 2) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in pair
            ):
                raise ConfigurationError(f"size={size!r} must be a positive int or (height, width)")
            size = size if isinstance(size, int) else (pair[0], pair[1])
        if output not in _OUTPUTS:
            raise ConfigurationError(f"output={output!r} must be 'torch' or 'numpy'")
        check_start(start)
        if output == "torch":
            require_torch(purpose="VideoClips(output='torch'); pass output='numpy' for NumPy arrays")
        self.num_frames, self.step, self.fps, self.clips = num_frames, step, fps, clips
        self.start = start
        self.size, self.threads, self.output = size, threads, output
        self._init_dispatch(seed, extensions)

    def decode_in_sample(self, key: str, data: bytes, sample: Mapping[str, Any]) -> dict[str, Any] | None:
        """Decode the field ``key`` (with its leading dot) of ``sample``; ``None`` if not a video field."""
        extension = self._dispatch(key)
        if extension is None:
            return None
        rng = self._rng("clips", key, sample)
        with open_media(data, extension=extension, purpose="VideoClips", sample=sample) as container:
            if not container.streams.video:
                raise MediaError(describe(container, extension), "it has no video stream")
            stream = container.streams.video[0]
            threads = configure_threads(stream, self.threads)
            meta = video_meta(container, stream)
            if meta.total_frames < 1:
                raise MediaError(meta.describe(), "the stream has no frames")
            indices = self.frame_indices(meta.total_frames, meta.fps, rng)
            frames = self._read(container, stream, meta, indices, threads)
        return self._result(frames, indices, meta)

    def frame_indices(
        self, total_frames: int, video_fps: float, rng: np.random.Generator
    ) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The frame numbers of every clip (``clips x num_frames``) for a video of this length."""
        ratio = video_fps / self.fps if self.fps else 1.0  # video frames per grid position
        length = max(1, math.floor(total_frames / ratio + 1e-9))
        span = (self.num_frames - 1) * self.step + 1
        starts = window_starts(self.start, length, span, self.clips, rng)
        grid = starts[:, None] + np.arange(self.num_frames, dtype=np.int64) * self.step
        frames: np.ndarray[Any, np.dtype[np.int64]] = np.floor(grid * ratio + 1e-6).astype(np.int64)
        np.minimum(frames, total_frames - 1, out=frames)
        return frames

    def _read(
        self, container: Any, stream: Any, meta: VideoMeta, indices: np.ndarray[Any, Any], threads: int
    ) -> np.ndarray[Any, np.dtype[np.uint8]]:
        height, width = output_size(self.size, meta.height, meta.width)
        out = np.empty((*indices.shape, height, width, 3), dtype=np.uint8)
        flat = out.reshape(-1, height, width, 3)
        convert = rgb_converter(threads, width, height)
        slots: dict[int, list[int]] = {}
        for position, index in enumerate(indices.ravel().tolist()):
            slots.setdefault(index, []).append(position)

        def store(index: int, frame: Any) -> None:
            first, *rest = slots[index]
            flat[first] = convert(frame)
            for position in rest:
                flat[position] = flat[first]

        read_frames(container, stream, meta, sorted(slots), store)
        return out

    def _result(
        self, frames: np.ndarray[Any, Any], indices: np.ndarray[Any, Any], meta: VideoMeta
    ) -> dict[str, Any]:
        result: dict[str, Any] = {
            "frames": frames,
            "indices": indices,
            "fps": meta.fps,
            "duration": meta.duration,
            "total_frames": meta.total_frames,
        }
        if self.output == "torch":
            torch = require_torch(purpose="VideoClips(output='torch')")
            result["frames"] = torch.from_numpy(frames)
            result["indices"] = torch.from_numpy(indices)
        return result

    def __repr__(self) -> str:
        return (
            f"VideoClips({self.num_frames}, step={self.step}, fps={self.fps}, clips={self.clips}, "
            f"start={self.start!r}, size={self.size}, seed={self.seed}, threads={self.threads})"
        )
