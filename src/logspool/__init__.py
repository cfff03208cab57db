"""logspool: a durable, crash-safe, multi-process journal.

::

    import logspool
    with logspool.open("events") as log:          # durability="always": fsynced before return
        lsn = log.append(b"payload")
        for rec in log.read(start=0):
            print(rec.lsn, rec.timestamp, rec.payload)

See docs/FORMAT.md for the on-disk format and docs/DESIGN.md for the decisions behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from .errors import (
    AppendError,
    ClosedError,
    CodecMissingError,
    CorruptionError,
    DataLossError,
    FailedError,
    LockedError,
    LogspoolError,
    NotALogError,
    PositionError,
    ReadOnlyError,
    RecordTooLargeError,
    SubscriberExistsError,
    SubscriberNotFoundError,
    UnsupportedVersionError,
)

if TYPE_CHECKING:
    from ._format import FORMAT_VERSION, Gap, Record
    from ._reader import Reader
    from ._repair import RepairAction, RepairReport, repair
    from ._retention import Removal, Retention, RetentionReport
    from ._subscribers import Subscriber, SubscriberInfo
    from ._verify import VerifyReport, verify
    from .ckpt import CheckpointFile, RollbackReport
    from .log import Durability, Log, LogInfo, SegmentInfo, Tail, open

# The names above are imported on first use (PEP 562), so that `import logspool` and the CLI's
# start-up do not pay for modules a command never uses (issue 29: `logspool --help` under 100 ms).
_LAZY = {
    "CheckpointFile": ".ckpt",
    "RollbackReport": ".ckpt",
    "FORMAT_VERSION": "._format",
    "Gap": "._format",
    "Record": "._format",
    "Durability": ".log",
    "Log": ".log",
    "LogInfo": ".log",
    "SegmentInfo": ".log",
    "Tail": ".log",
    "open": ".log",
    "Reader": "._reader",
    "RepairAction": "._repair",
    "RepairReport": "._repair",
    "repair": "._repair",
    "Removal": "._retention",
    "Retention": "._retention",
    "RetentionReport": "._retention",
    "Subscriber": "._subscribers",
    "SubscriberInfo": "._subscribers",
    "VerifyReport": "._verify",
    "verify": "._verify",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "AppendError",
    "CheckpointFile",
    "ClosedError",
    "CodecMissingError",
    "CorruptionError",
    "DataLossError",
    "Durability",
    "FailedError",
    "Gap",
    "LockedError",
    "Log",
    "LogInfo",
    "LogspoolError",
    "NotALogError",
    "PositionError",
    "ReadOnlyError",
    "Reader",
    "Record",
    "RecordTooLargeError",
    "Removal",
    "RepairAction",
    "RepairReport",
    "Retention",
    "RetentionReport",
    "RollbackReport",
    "SegmentInfo",
    "Subscriber",
    "SubscriberExistsError",
    "SubscriberInfo",
    "SubscriberNotFoundError",
    "Tail",
    "UnsupportedVersionError",
    "VerifyReport",
    "__version__",
    "open",
    "repair",
    "verify",
]
