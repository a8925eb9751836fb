"""PyAV plumbing shared by the video and audio decoders: opening bytes, threads, metadata, seeking.

Everything decodes from the sample's bytes in memory (``av.open`` over a ``BytesIO``, no temp
file), and every container is closed when the call returns (``with``), so open decoders never pile
up until garbage collection. Nothing is created at import and no decoder object outlives a call,
so nothing is inherited across a DataLoader worker's fork.

Threads: FFmpeg's automatic threading starts one decoder thread per core (and swscale does the
same for colour conversion). Under a DataLoader every worker would do that, so ``N`` workers on
``N`` cores would run ``N x N`` threads. ``threads=None`` therefore means one thread inside a
DataLoader worker (parallelism comes from the workers) and FFmpeg's automatic count elsewhere.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from types import ModuleType
from typing import Any

from ..errors import DecodingError
from ..optional import in_loader_thread, require
from ..optional import in_worker as in_dataloader_worker

__all__ = [
    "AV_INSTALL_HINT",
    "MediaError",
    "VideoMeta",
    "channel_count",
    "configure_threads",
    "decode_failure",
    "describe",
    "in_dataloader_worker",
    "open_media",
    "read_frames",
    "require_av",
    "rgb_converter",
    "thread_count",
    "video_meta",
]

AV_INSTALL_HINT = "pip install av (or pip install 'shardstream[video]')"


def require_av(purpose: str) -> ModuleType:
    """Import PyAV or raise ImportError with the install hint."""
    return require("av", purpose=purpose, install=AV_INSTALL_HINT)


def thread_count(threads: int | None) -> int:
    """FFmpeg's thread count for ``threads=``: None -> 1 in a DataLoader worker or on one of
    ``ss.Loader``'s threads (each shares the cores with the others), else 0 (automatic)."""
    if threads is None:
        return 1 if in_dataloader_worker() or in_loader_thread() else 0
    return threads


def configure_threads(stream: Any, threads: int | None) -> int:
    """Set a stream's decoder threads before its first packet; returns the count for swscale too.

    One thread decodes serially; more (or 0, automatic) allows frame and slice threads.
    """
    n = thread_count(threads)
    context = stream.codec_context
    context.thread_count = n
    context.thread_type = "SLICE" if n == 1 else "AUTO"
    return n


class MediaError(Exception):
    """Raised inside :func:`open_media` for a problem PyAV does not report itself (a truncated
    stream, no video stream); ``open_media`` turns it into a DecodingError naming the sample.

    Args:
        what: the stream and codec (``"h264 video (mp4, 64x64)"``).
        reason: what went wrong.
    """

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(what, reason)
        self.what, self.reason = what, reason


def rgb_converter(threads: int, width: int, height: int) -> Callable[[Any], Any]:
    """``frame -> H x W x 3 uint8`` array at ``width`` x ``height`` (swscale converts and resizes
    in one pass), with ``threads`` swscale threads where PyAV has threaded scaling (17 and later;
    its default there is one per core)."""
    av = require_av("converting video frames")
    extra = {"threads": threads} if int(av.__version__.split(".")[0]) >= 17 else {}

    def convert(frame: Any) -> Any:
        return frame.to_ndarray(format="rgb24", width=width, height=height, **extra)

    return convert


def channel_count(stream: Any) -> int:
    """Audio channels of a stream (``layout.channels`` exists in every supported PyAV)."""
    return len(stream.codec_context.layout.channels)


def where(sample: Mapping[str, Any] | None) -> dict[str, Any]:
    """``url``/``key`` keyword arguments for :class:`DecodingError` from a sample, if known."""
    if not sample:
        return {}
    return {"url": sample.get("__url__"), "key": sample.get("__key__")}


def decode_failure(
    what: str, reason: str, *, extension: str, sample: Mapping[str, Any] | None = None
) -> DecodingError:
    """The error for a member PyAV cannot decode; ``what`` names the stream and codec."""
    return DecodingError(
        f"cannot decode {what}: {reason}; the file is corrupt or truncated, or its codec is not in "
        "PyAV's FFmpeg build (`shardstream stat` shows the codecs of a shard's videos)",
        extension=extension,
        **where(sample),
    )


def _reason(exc: Exception) -> str:
    """FFmpeg's message without PyAV's errno and ``'<none>'`` file name."""
    return str(getattr(exc, "strerror", None) or exc)


def describe(container: Any, extension: str) -> str:
    """E.g. ``"the .mp4 member (mov,mp4,m4a,3gp,3g2,mj2: h264 video 64x64, aac audio)"``."""
    streams = []
    for stream in container.streams:
        context = stream.codec_context
        name = context.name if context is not None and context.name else "unknown codec"
        size = f" {context.width}x{context.height}" if stream.type == "video" else ""
        streams.append(f"{name} {stream.type}{size}")
    return f"the .{extension} member ({container.format.name}: {', '.join(streams) or 'no streams'})"


@contextmanager
def open_media(
    data: bytes, *, extension: str, purpose: str, sample: Mapping[str, Any] | None = None
) -> Iterator[Any]:
    """Open ``data`` as a media container, closed on exit; FFmpeg errors become DecodingError.

    Errors raised inside the ``with`` block are translated too: PyAV's naming the container
    format, :class:`MediaError` with the stream and codec it names.
    """
    av = require_av(purpose)
    ffmpeg_error = av.error.FFmpegError
    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore")
    except ffmpeg_error as exc:
        raise decode_failure(
            f"a .{extension} container ({len(data)} bytes)", _reason(exc), extension=extension, sample=sample
        ) from exc
    try:
        yield container
    except MediaError as exc:
        raise decode_failure(exc.what, exc.reason, extension=extension, sample=sample) from exc
    except ffmpeg_error as exc:
        raise decode_failure(
            describe(container, extension), _reason(exc), extension=extension, sample=sample
        ) from exc
    finally:
        container.close()


@dataclass(frozen=True)
class VideoMeta:
    """A video stream's timing and geometry, read from headers (``total_frames`` may be counted).

    Frame numbers come from timestamps at the stream's average frame rate: exact for
    constant-frame-rate video; for variable rates, frame ``i`` is the frame showing at ``i / fps``.
    """

    fps: float
    duration: float
    total_frames: int
    width: int
    height: int
    codec: str
    container: str
    start_pts: int
    pts_per_frame: float  # 1 / (fps * time_base)

    def describe(self) -> str:
        """E.g. ``"h264 video (mov,mp4,m4a,3gp,3g2,mj2, 64x64)"`` for error messages."""
        return f"{self.codec} video ({self.container}, {self.width}x{self.height})"

    def frame_index(self, pts: int) -> int:
        return round((pts - self.start_pts) / self.pts_per_frame)

    def pts_of(self, index: int) -> int:
        return self.start_pts + round(index * self.pts_per_frame)


def video_meta(container: Any, stream: Any, *, count_packets: bool = True) -> VideoMeta:
    """Metadata of ``stream``; without a frame count in the headers (Matroska, WebM), the video
    packets are counted (demuxed, not decoded: a few ms for 30 s) if ``count_packets``.

    Leaves the container positioned anywhere: callers seek before decoding.
    """
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    time_base = stream.time_base
    context = stream.codec_context
    codec = context.name if context is not None and context.name else "unknown"
    if not rate or not time_base:
        raise MediaError(f"{codec} video ({container.format.name})", "the stream declares no frame rate")
    fps = Fraction(rate)
    if stream.duration is not None:
        duration = float(stream.duration * time_base)
    elif container.duration is not None:
        duration = container.duration / 1_000_000
    else:
        duration = 0.0
    total = int(stream.frames or 0)
    if total == 0 and count_packets:
        total = sum(1 for packet in container.demux(stream) if packet.size)
        if duration and total < duration * fps - max(2.0, float(fps)):
            raise MediaError(
                f"{codec} video ({container.format.name})",
                f"it holds {total} frames where its duration ({duration:.2f} s) declares "
                f"{round(duration * fps)}: the file is probably truncated",
            )
    if total == 0:
        total = round(duration * fps)
    if duration == 0.0:
        duration = float(total / fps)
    return VideoMeta(
        fps=float(fps),
        duration=duration,
        total_frames=total,
        width=int(context.width),
        height=int(context.height),
        codec=codec,
        container=container.format.name,
        start_pts=int(stream.start_time or 0),
        pts_per_frame=float(1 / (fps * time_base)),
    )


def read_frames(
    container: Any, stream: Any, meta: VideoMeta, wanted: Sequence[int], store: Callable[[int, Any], None]
) -> None:
    """Decode the frames numbered ``wanted`` (ascending, unique) and hand each to ``store(i, frame)``.

    One ascending pass: seek to the keyframe before the first wanted frame, decode forward to the
    last one; a gap to the next wanted frame longer than the longest keyframe interval seen (at
    least one second) is crossed by another seek, shorter gaps by decoding through (seeking would
    land on a keyframe already passed). A wanted frame missing from the stream (variable frame
    rate) gets the frame before it. Frames are handed over as decoded and never kept, so memory is
    one frame plus what ``store`` keeps.

    Raises:
        MediaError: the stream ends before a wanted frame, more than a second before the
            length its headers declare (a truncated file).
    """
    n, j = len(wanted), 0
    current, prev = -1, None
    gap = tolerance = max(2, round(meta.fps))
    last_key: int | None = None
    frames: Iterator[Any] | None = None
    sought = -1  # the frame the last seek was for: decode at least to it before seeking again
    while j < n:
        if frames is None or wanted[j] - current > gap:
            # Always seek first: reading the metadata may have demuxed the container to its end.
            container.seek(meta.pts_of(wanted[j]), stream=stream, backward=True, any_frame=False)
            frames, prev, last_key, sought, before = container.decode(stream), None, None, wanted[j], current
        for frame in frames:
            index = current + 1 if frame.pts is None else meta.frame_index(frame.pts)
            if prev is None and index <= before:
                # The seek landed on a keyframe already passed: keyframes are at least this far
                # apart, so decode through such gaps from now on instead of seeking.
                gap = max(gap, sought - index)
            if frame.key_frame:
                if last_key is not None and index > last_key:
                    gap = max(gap, index - last_key)
                last_key = index
            while j < n and wanted[j] < index:
                store(wanted[j], prev if prev is not None else frame)
                j += 1
            if j < n and wanted[j] == index:
                store(index, frame)
                j += 1
            prev, current = frame, index
            if j == n or (wanted[j] - current > gap and current >= sought):
                break
        else:  # end of stream
            if prev is None or wanted[j] < meta.total_frames - tolerance:
                where = f"at frame {current}" if prev is not None else f"before frame {wanted[j]}"
                raise MediaError(
                    meta.describe(),
                    f"the stream ended {where} of the {meta.total_frames} its headers declare "
                    f"(frame {wanted[j]} was wanted)",
                )
            while j < n:  # the headers overstate the length by a few frames: repeat the last one
                store(wanted[j], prev)
                j += 1
