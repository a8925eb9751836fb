"""Tune glibc's allocator so per-sample image buffers are reused instead of mapped and unmapped.

Decoding a 256x256 RGB JPEG allocates a ~200-260 KB output buffer. glibc serves blocks above
``M_MMAP_THRESHOLD`` (128 KiB at start-up) with a fresh ``mmap`` and returns them with ``munmap``
on free, and it trims the top of the heap back to the kernel beyond ``M_TRIM_THRESHOLD``. Either
way every image touches new pages: about 64 minor page faults per buffer, and a decode loop spends
a large share of its time in the kernel zeroing pages. Raising both thresholds keeps such buffers
on the heap, where the next sample reuses the same warm pages.

The cost is memory that stays with the process after a peak instead of returning to the kernel
(bounded by the largest burst of live buffers, typically a few batches), which is the right trade
for a data-loading worker. :func:`tune_allocator` changes only the calling process: call it in the
main process and in each DataLoader worker (``worker_init_fn``). It does nothing off glibc (musl,
macOS, Windows) and reads no environment variables.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

__all__ = ["DEFAULT_MMAP_THRESHOLD", "DEFAULT_TRIM_THRESHOLD", "is_glibc", "tune_allocator"]

log = logging.getLogger(__name__)

# Constants from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Blocks below this size come from the heap. glibc caps it at 32 MiB on 64-bit systems.
DEFAULT_MMAP_THRESHOLD = 16 << 20
#: Free memory at the top of the heap kept for reuse before trimming.
DEFAULT_TRIM_THRESHOLD = 64 << 20

_lock = threading.Lock()
_applied: tuple[int, int] | None = None
_libc: ctypes.CDLL | None = None
_probed = False


def _glibc() -> ctypes.CDLL | None:
    global _libc, _probed
    if not _probed:
        _probed = True
        try:
            libc = ctypes.CDLL(None)
            version = libc.gnu_get_libc_version  # only glibc has this symbol
            version.restype = ctypes.c_char_p
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.mallopt.restype = ctypes.c_int
            log.debug("glibc %s found; allocator tuning available", version().decode())
            _libc = libc
        except (OSError, AttributeError):
            _libc = None
    return _libc


def is_glibc() -> bool:
    """Whether this process runs on glibc (the only allocator :func:`tune_allocator` knows)."""
    return _glibc() is not None


def tune_allocator(
    mmap_threshold: int = DEFAULT_MMAP_THRESHOLD, trim_threshold: int = DEFAULT_TRIM_THRESHOLD
) -> bool:
    """Raise glibc's mmap and trim thresholds in this process.

    Idempotent and cheap: repeated calls with the same values do nothing. Safe to call from
    ``worker_init_fn``; settings do not need re-applying after ``fork`` (the child inherits them),
    but calling again is harmless.

    Args:
        mmap_threshold: allocations at least this large use mmap. Default 16 MiB.
        trim_threshold: free bytes kept at the heap top before returning them. Default 64 MiB.

    Returns:
        True if the thresholds are in effect, False when not on glibc or glibc refused a value.
    """
    global _applied
    wanted = (int(mmap_threshold), int(trim_threshold))
    for name, value in zip(("mmap_threshold", "trim_threshold"), wanted, strict=True):
        if not 0 <= value < 1 << 31:  # mallopt takes a C int; larger values would wrap silently
            raise ValueError(f"{name}={value} is out of range; use 0 <= value < 2**31 bytes")
    with _lock:
        if _applied == wanted:
            return True
        libc = _glibc()
        if libc is None:
            return False
        ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, wanted[0])) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, wanted[1])
        )
        if ok:
            _applied = wanted
            log.debug("allocator tuned: M_MMAP_THRESHOLD=%d M_TRIM_THRESHOLD=%d", *wanted)
        else:
            log.warning(
                "glibc refused mallopt(M_MMAP_THRESHOLD=%d, M_TRIM_THRESHOLD=%d); the mmap threshold "
                "must be at most 32 MiB on 64-bit systems",
                *wanted,
            )
        return ok
