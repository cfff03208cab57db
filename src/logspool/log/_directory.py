"""The log's directory: its meta file, the names of its segments and indexes, and its listing.

Layout (FORMAT.md §2): ``DIR/meta`` (settings, fixed at creation), ``DIR/lock`` (the writer
lock), ``DIR/sync`` (``_sync``), ``DIR/<base lsn>.seg`` and ``.idx`` (segments and their
indexes), ``DIR/quarantine/``, and the subscribers' and retention's files.

Invariants:

- The meta is written once, at creation: to a temporary name, fsynced, then *linked* (not
  renamed) into place, so a racing creator's meta is never replaced and both processes use the
  one linked first. The meta and lock names, and the directory itself, are durable (directory
  fsyncs) before any segment is created.
- Settings are fixed at creation: an open that asks for other values fails with ValueError and
  changes nothing.
- A directory without a meta is taken for a log (and created over) only if it holds nothing but
  what a failed creation leaves: ``.meta.*`` temporary files and the lock file.
- A listing trusts nothing about the files it names: retention may remove a segment between the
  listing and its open, and a rotation may create one.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from .. import _format as fmt
from .. import limits
from .._fs import FileSystem
from ..errors import ClosedError, CorruptionError, NotALogError, ReadOnlyError


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_lsn: int
    path: str
    size: int


@dataclass(frozen=True, slots=True)
class LogInfo:
    """What ``Log.info()`` reports."""

    path: str
    first_lsn: int
    next_lsn: int
    size: int
    segments: tuple[SegmentInfo, ...]
    meta: fmt.Meta
    # The offset just past the newest segment's last whole record: its file's size less the zeros
    # preallocated after the records of a log open for writing (0: no segment). ``size`` counts
    # those zeros (the disk they hold); a plan of reads by bytes wants this.
    end: int = 0

    @property
    def written(self) -> int:
        """Bytes of the segments up to their records' end: ``size`` less the newest segment's
        preallocated zeros."""
        if not self.segments or self.end <= 0:  # (no segment; or an end not known: the files')
            return self.size
        return self.size - self.segments[-1].size + min(self.end, self.segments[-1].size)

    @property
    def record_count(self) -> int:
        return self.next_lsn - self.first_lsn


def segment_path(root: str, base: int) -> str:
    return os.path.join(root, fmt.segment_name(base))


def index_path(root: str, base: int) -> str:
    return os.path.join(root, fmt.index_name(base))


def list_segments(fs: FileSystem, path: str) -> list[int]:
    """The base lsns of the segments in ``path``, ascending."""
    try:
        names = fs.listdir(path)
    except FileNotFoundError as err:
        raise ClosedError(path, "the log directory is gone") from err
    bases = [b for b in (fmt.parse_segment_name(n) for n in names) if b is not None]
    bases.sort()
    return bases


def segment_infos(root: str, bases: list[int]) -> list[SegmentInfo]:
    """Each listed segment with its size now (one that was removed meanwhile is left out)."""
    segments = []
    for base in bases:
        path = segment_path(root, base)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            continue  # removed while we listed
        segments.append(SegmentInfo(base, path, size))
    return segments


def to_ns(since: datetime | float | int) -> int:
    """Nanoseconds since the epoch of a datetime (naive is UTC) or of seconds since the epoch
    (what a position by time, a record's timestamp, is given as)."""
    if isinstance(since, datetime):
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        delta = since - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    if isinstance(since, bool) or not isinstance(since, int | float):
        raise TypeError(f"since must be a datetime or seconds since the epoch, not {type(since).__name__}")
    return int(since * 1_000_000_000)


def open_meta(
    fs: FileSystem,
    path: str,
    *,
    create: bool,
    segment_size_max: int | None,
    index_interval: int | None,
    record_size_max: int | None,
    compression: str | None,
    compression_level: int | None,
) -> fmt.Meta:
    """The meta of the log at ``path``, creating the log first if it does not exist and
    ``create`` (durable on return: directory, lock file and meta). Settings given must be those
    the log was created with (ValueError); None takes the log's (or, creating, the default)."""
    meta_path = os.path.join(path, fmt.META_NAME)
    asked = {
        "segment_size_max": segment_size_max,
        "index_interval": index_interval,
        "record_size_max": record_size_max,
    }
    _check_settings(asked)
    if not fs.exists(meta_path):
        if os.path.exists(path) and not os.path.isdir(path):
            raise NotALogError(path, "it is a file, not a directory")
        if os.path.isdir(path):
            # A creation that failed part-way (an I/O error before the meta was linked) may
            # leave its temporary meta and the lock file: ours, and safe to create over.
            strays = [n for n in fs.listdir(path) if not n.startswith(".meta.") and n != fmt.LOCK_NAME]
            if strays:
                raise NotALogError(path, f"no meta file, and it holds {sorted(strays)[:3]}")
        if not create:
            raise NotALogError(path, "no meta file (the log does not exist)")
        _create(fs, path, asked, compression, compression_level)
    try:
        raw = fs.read_file(meta_path, limits.META_SIZE_MAX + 64)
    except ValueError as err:
        raise CorruptionError(meta_path, 0, str(err)) from err
    meta = fmt.decode_meta(raw, meta_path)
    for name, value in asked.items():
        if value is not None and getattr(meta, name) != value:
            raise ValueError(
                f"{path}: the log was created with {name}={getattr(meta, name)}, "
                f"not {value}; settings are fixed at creation"
            )
    if compression is not None and (
        meta.compression != compression or compression_level not in (None, meta.compression_level)
    ):
        raise ValueError(
            f"{path}: the log was created with compression={meta.compression!r} "
            f"(level {meta.compression_level}), not {compression!r}; settings are fixed at creation"
        )
    return meta


def _create(
    fs: FileSystem,
    path: str,
    asked: dict[str, int | None],
    compression: str | None,
    compression_level: int | None,
) -> None:
    """Create the directory, its lock file and its meta file, safely against a racing creator."""
    try:
        fs.mkdir(path)
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise ReadOnlyError(path, f"cannot create the log directory: {err}") from err
    meta = fmt.Meta(
        version=fmt.VERSION_1 if compression is None else fmt.VERSION_2,
        created_ns=time.time_ns(),
        segment_size_max=asked["segment_size_max"] or limits.SEGMENT_SIZE_MAX_DEFAULT,
        index_interval=asked["index_interval"] or limits.INDEX_INTERVAL_DEFAULT,
        record_size_max=asked["record_size_max"] or limits.RECORD_SIZE_MAX_DEFAULT,
        log_id=uuid.uuid4().hex,
        extra={},
        compression=compression,
        compression_level=None
        if compression is None
        else (limits.ZSTD_LEVEL_DEFAULT if compression_level is None else compression_level),
    )
    tmp = os.path.join(path, f".meta.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        fs.write(fd, fmt.encode_meta(meta))
        fs.fsync(fd)  # crash before here: only a stray .meta.* temp file, ignored
    finally:
        fs.close(fd)
    lock_path = os.path.join(path, fmt.LOCK_NAME)
    fs.close(fs.open(lock_path, os.O_RDWR | os.O_CREAT))
    try:
        # link, not rename: it fails if a racing process created the meta first, and then
        # both processes use that one. Crash here: no meta, the directory is re-created.
        fs.link(tmp, os.path.join(path, fmt.META_NAME))
    except FileExistsError:
        pass
    finally:
        fs.unlink(tmp)
    fs.fsync_dir(path)  # the meta and lock names are durable before any segment
    parent = os.path.dirname(os.path.abspath(path))
    fs.fsync_dir(parent)  # and so is the log directory itself


def _check_settings(asked: dict[str, int | None]) -> None:
    for name, value in asked.items():
        if value is not None:
            fmt.checked_int(name, value, *fmt.META_INT_BOUNDS[name], " bytes")
