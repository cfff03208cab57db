"""The sync mark read from outside a writer (verify, repair): what it proves fsynced.

The mark in ``DIR/sync`` (FORMAT.md §8.1) says every byte of every segment before it has been
fsynced. It is raised only after the fsync it claims, so whatever copy of it survives a crash
claims no more than what was fsynced; writers make it durable on a clean close, at each
rotation, and at most ``limits.SYNC_MARK_PERSIST_S`` after they raise it (so after a power
loss it lags the acknowledged records by at most that window). Records below it that are
damaged or missing were acknowledged: that is corruption, never a crash state to cut.
"""

from __future__ import annotations

import os

from . import _format as fmt
from ._fs import FileSystem

PROVEN_ALL = 1 << 62  # "every byte of the segment": the mark is in a later segment


def proven_offset(mark: tuple[int, int], base: int) -> int:
    """The offset in segment ``base`` below which ``mark`` proves every byte fsynced: the mark's
    offset in that segment, all of it if the mark is in a later segment, 0 if in an earlier one."""
    mark_base, offset = mark
    if mark_base == base:
        return offset
    return PROVEN_ALL if mark_base > base else 0


def read_mark(fs: FileSystem, root: str) -> tuple[tuple[int, int], bytes]:
    """The sync mark of the log at ``root``, read under the sync file's shared flock (so it is
    never a torn mix of two marks), and the boot the newest segment was last recovered in
    (b"": none known). ((0, 0), b""), "nothing known", if there is no sync file."""
    try:
        fd = fs.open(os.path.join(root, fmt.SYNC_NAME), os.O_RDONLY)
    except (FileNotFoundError, PermissionError):
        return (0, 0), b""
    try:
        fs.lock_shared(fd)
        try:
            raw = fs.pread(fd, fmt.SYNC_FILE_SIZE, 0)
        finally:
            fs.unlock(fd)
    finally:
        fs.close(fd)
    if len(raw) < fmt.SYNC_FILE_SIZE:
        return (0, 0), b""
    return fmt.read_sync_mark(raw), fmt.read_sync_boot(raw)
