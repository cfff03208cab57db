"""The log: a directory of segments, written by many threads and processes, read without locks.

``Log`` (``_log``) is the facade; the parts it wires each own one responsibility, with their
state and invariants at the top of their file (docs/DESIGN.md has the map):

- ``_directory``: the meta file, the segments' and indexes' names, the listing;
- ``_handle``: whether the handle may write (closed, failed, read-only, forked);
- ``_sync``: ``DIR/sync``, the protocol shared by processes (mark, role, gates, hints),
  used by readers, ``verify`` and ``repair`` too;
- ``_active``: the active segment, its index, and the writer lock;
- ``_recovery``: recovery on open and the catch-up before each write;
- ``_writer``: appends, the threads' write queue, group commit, the flush thread.

Readers, subscribers, retention, verify and repair are ``logspool._reader``, ``_subscribers``,
``_retention``, ``_verify`` and ``_repair``. The names below are imported on first use
(PEP 562), as in ``logspool``: ``_reader`` imports ``_directory`` and ``_sync`` from here, and
``_log`` imports ``_reader``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._directory import LogInfo, SegmentInfo
    from ._log import Durability, Log, open
    from ._writer import Tail

_LAZY = {
    "Durability": "._log",
    "Log": "._log",
    "LogInfo": "._directory",
    "SegmentInfo": "._directory",
    "Tail": "._writer",
    "open": "._log",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = ["Durability", "Log", "LogInfo", "SegmentInfo", "Tail", "open"]
