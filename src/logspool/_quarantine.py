"""Quarantine: bytes that recovery or repair takes out of a segment, kept for an operator.

Invariant: no byte that was ever a whole record is removed from a segment without a copy here
first (docs/DURABILITY.md). A file is ``DIR/quarantine/<segment file name>.<offset>.bad``
holding the bytes exactly as found at that offset (FORMAT.md §9.1). Each is written to a
temporary name, fsynced, renamed and the directory fsynced before the bytes it saves are
overwritten or cut. A file of that name that exists already is kept as it is: a repair (or a
recovery) interrupted after saving it may have changed the region since, and the file holds
the original bytes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from . import _format as fmt
from ._fs import FileSystem, replace_file

QUARANTINE_DIR = "quarantine"


def quarantine_dir(fs: FileSystem, root: str) -> str:
    """``root/quarantine``, created (and its name made durable) if missing."""
    qdir = os.path.join(root, QUARANTINE_DIR)
    if not fs.exists(qdir):
        with contextlib.suppress(FileExistsError):
            fs.mkdir(qdir)
        fs.fsync_dir(root)  # without this the directory's name can be lost, and the copy with it
    return qdir


def save(
    fs: FileSystem, root: str, base: int, offset: int, data: bytes | Iterable[bytes], *, dry: bool = False
) -> str:
    """Save ``data``, found at ``offset`` of segment ``base``, durably, before it is overwritten
    or cut. Returns the file's name relative to ``root``. ``dry``: only the name. ``data`` may
    be pieces, written in turn and read only if the file does not exist yet (a writer's recovery
    streams a tail, which may be a 4 GiB unpublished batch, a chunk at a time)."""
    name = f"{fmt.segment_name(base)}.{offset}.bad"
    if not dry:
        qdir = quarantine_dir(fs, root)
        if not fs.exists(os.path.join(qdir, name)):
            replace_file(fs, qdir, name, data)
    return f"{QUARANTINE_DIR}/{name}"
