"""Record compression (format version 2): zstd frames, one per record, through ``zstandard``.

Optional: ``pip install logspool[zstd]``. A log created without compression never imports it; a
log created with it needs it to append and to read compressed records, and says so when it is
missing. Compressor and decompressor objects are not thread-safe, so each thread keeps its own.

A payload is stored compressed only when that makes it smaller (flag ``FLAG_ZSTD`` on the record);
otherwise it is stored as is, so incompressible data costs one compression attempt and no space.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType

from . import limits
from .errors import CodecMissingError

CODECS = ("zstd",)
_local = threading.local()


def _zstd() -> ModuleType:
    try:
        import zstandard
    except ImportError as err:
        raise CodecMissingError("zstd") from err
    return zstandard


def check(codec: str | None, level: int | None) -> None:
    """ValueError naming the bad setting, or CodecMissingError if the library is missing."""
    if codec is None:
        if level is not None:
            raise ValueError("compression_level was given without compression")
        return
    if codec not in CODECS:
        raise ValueError(f"compression must be one of {CODECS} or None, not {codec!r}")
    if level is not None and (
        isinstance(level, bool)
        or not isinstance(level, int)
        or not limits.ZSTD_LEVEL_MIN <= level <= limits.ZSTD_LEVEL_MAX
    ):
        raise ValueError(
            f"compression_level must be an integer from {limits.ZSTD_LEVEL_MIN} to "
            f"{limits.ZSTD_LEVEL_MAX}, not {level!r}"
        )
    _zstd()


class Compressor:
    """Compresses payloads for one log (any thread)."""

    def __init__(self, level: int) -> None:
        self._zstd = _zstd()
        self.level = level
        self._local = threading.local()

    def compress(self, payload: bytes) -> bytes | None:
        """The compressed frame if it is smaller than ``payload``, else None (store it as is)."""
        out: bytes = self.function()(payload)
        return out if len(out) < len(payload) else None

    def function(self) -> Callable[[bytes], bytes]:
        """The calling thread's compress function (frames declare their content size)."""
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = self._zstd.ZstdCompressor(level=self.level, write_checksum=False)
        fn: Callable[[bytes], bytes] = c.compress
        return fn


def decompressor(size_max: int) -> Callable[[bytes], bytes]:
    """A function giving the payload of a compressed record's frame, for the calling thread.
    It raises ValueError if the frame is not a valid zstd frame declaring at most ``size_max``
    bytes of content (checked before anything is allocated: no decompression bombs), or if it does
    not decompress to exactly that many bytes."""
    zstd = _zstd()
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = zstd.ZstdDecompressor()
    content_size = zstd.frame_content_size
    unpack = d.decompress
    error = zstd.ZstdError

    def decompress(frame: bytes) -> bytes:
        try:
            size = content_size(frame)
            if not 0 <= size <= size_max:
                raise ValueError(f"zstd frame content size {size} is unknown or above the limit {size_max}")
            out: bytes = unpack(frame)
        except error as err:
            raise ValueError(f"not a valid zstd frame: {err}") from err
        if len(out) != size:
            raise ValueError(f"zstd frame gave {len(out)} bytes, its header says {size}")
        return out

    return decompress
