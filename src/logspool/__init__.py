"""logspool: a durable, crash-safe, multi-process journal.

::

    import logspool
    with logspool.open("events") as log:          # durability="always": fsynced before return
        lsn = log.append(b"payload")
        for rec in log.read(start=0):
            print(rec.lsn, rec.timestamp, rec.payload)

See docs/FORMAT.md for the on-disk format and docs/DESIGN.md for the decisions behind it.
"""

from ._checkpoint_file import CheckpointFile, RollbackReport
from ._format import FORMAT_VERSION, Gap, Record
from ._log import Durability, Log, LogInfo, SegmentInfo, Tail, open
from ._reader import Reader
from ._repair import RepairAction, RepairReport, repair
from ._retention import Removal, Retention, RetentionReport
from ._subscribers import Subscriber, SubscriberInfo
from ._verify import VerifyReport, verify
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
