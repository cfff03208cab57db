"""The one exception tree of logspool.

::

    LogspoolError
     ├── CorruptionError          bytes on disk fail a check (checksum, lsn, magic); names path and offset
     ├── NotALogError             a directory that is not a log (and is not empty)
     ├── UnsupportedVersionError  a format version newer than this code reads
     ├── LockedError              the writer lock could not be taken within the deadline
     ├── ClosedError              the handle was closed
     │    └── FailedError         the handle failed stop after an fsync or write error
     ├── AppendError              an append failed (disk full, I/O error) and left nothing behind
     ├── PositionError            also a ValueError: an lsn the log does not hold (any more)
     │    └── DataLossError       records a reader or subscriber had not read were removed
     ├── SubscriberNotFoundError  also a KeyError: no durable subscriber of that name
     ├── SubscriberExistsError    also a ValueError: a durable subscriber of that name exists
     ├── ReadOnlyError            a write was asked of a log opened read-only (or on a read-only dir)
     ├── RecordTooLargeError      also a ValueError: a payload over the log's record_size_max
     ├── CodecMissingError        the log is compressed and the codec's library is not installed
     ├── LeaseExpiredError        a job's lease was lost: taken again by another worker, or gone
     ├── JobNotFoundError         also a KeyError: no such job (or dead letter) in the journal
     ├── KeyNotFoundError         also a KeyError: no such key in the key-value store
     ├── KeyExistsError           also a ValueError: the key exists and the call would not overwrite it
     ├── KeyLockedError           the key is locked by another owner
     ├── ValueTypeError           also a TypeError: the operation does not apply to the value's type
     └── RemoteError              a server's error this client has no class for, or a broken connection

Every error carries its context as attributes as well as in the message, and pickles (errors cross
processes and Spark executors), which is why each class stores its constructor arguments in ``args``.
Operating-system errors are never swallowed: they are wrapped with ``raise ... from err``.
"""

from __future__ import annotations

__all__ = [
    "AppendError",
    "ClosedError",
    "CodecMissingError",
    "CorruptionError",
    "DataLossError",
    "FailedError",
    "JobNotFoundError",
    "KeyExistsError",
    "KeyLockedError",
    "KeyNotFoundError",
    "LeaseExpiredError",
    "LockedError",
    "LogspoolError",
    "NotALogError",
    "PositionError",
    "ReadOnlyError",
    "RecordTooLargeError",
    "RemoteError",
    "SubscriberExistsError",
    "SubscriberNotFoundError",
    "UnsupportedVersionError",
    "ValueTypeError",
]


class LogspoolError(Exception):
    """Base of every error logspool raises on purpose."""


class CorruptionError(LogspoolError):
    """Bytes on disk failed a check. ``path`` and ``offset`` say where; ``reason`` says which check."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(path, offset, reason)
        self.path = path
        self.offset = offset
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: offset {self.offset}: {self.reason}"


class NotALogError(LogspoolError):
    """``path`` exists and is not a logspool log (no meta file, and not empty)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: not a logspool log: {self.reason}"


class UnsupportedVersionError(LogspoolError):
    """A file declares a format ``version`` newer than ``supported``."""

    def __init__(self, path: str, version: int, supported: int) -> None:
        super().__init__(path, version, supported)
        self.path = path
        self.version = version
        self.supported = supported

    def __str__(self) -> str:
        return (
            f"{self.path}: format version {self.version} is newer than this logspool reads "
            f"(up to {self.supported}); upgrade logspool"
        )


class LockedError(LogspoolError):
    """The writer lock of ``path`` was not taken within ``timeout_s`` seconds."""

    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__(path, timeout_s)
        self.path = path
        self.timeout_s = timeout_s

    def __str__(self) -> str:
        return f"{self.path}: writer lock not acquired within {self.timeout_s} s"


class ClosedError(LogspoolError):
    """The handle on ``path`` is closed."""

    def __init__(self, path: str, reason: str = "log is closed") -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class FailedError(ClosedError):
    """The handle stopped after a write or fsync error; nothing it had not acknowledged is promised.

    After an fsync error the kernel may have dropped the dirty pages and cleared the error, so a
    retry could "succeed" without the data ever reaching the disk (PostgreSQL's fsyncgate). The
    only safe course is to stop, reopen, and let recovery decide what is on disk.
    """


class ReadOnlyError(LogspoolError):
    """A write was asked of ``path``, which is open read-only or not writable."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: read-only: {self.reason}"


class RecordTooLargeError(LogspoolError, ValueError):
    """A payload of ``size`` bytes exceeds the log's ``size_max``."""

    def __init__(self, size: int, size_max: int) -> None:
        super().__init__(size, size_max)
        self.size = size
        self.size_max = size_max

    def __str__(self) -> str:
        return f"record of {self.size} bytes exceeds record_size_max of {self.size_max} bytes"


class AppendError(LogspoolError):
    """An append failed (for instance the disk is full) and left nothing behind in the log.

    The log stays usable: once the cause is gone (space freed), appends work again.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: append failed, nothing was written: {self.reason}"


class PositionError(LogspoolError, ValueError):
    """A reader was asked to start at an lsn the log does not hold (any more)."""

    def __init__(self, path: str, lsn: int, first_lsn: int, next_lsn: int) -> None:
        super().__init__(path, lsn, first_lsn, next_lsn)
        self.path = path
        self.lsn = lsn
        self.first_lsn = first_lsn
        self.next_lsn = next_lsn

    def __str__(self) -> str:
        return (
            f"{self.path}: lsn {self.lsn} is not in the log, which holds lsns "
            f"{self.first_lsn} to {self.next_lsn - 1}"
        )


class DataLossError(PositionError):
    """Records a reader had not read yet were removed (by retention) before it got to them.

    ``lost_from`` .. ``lost_to - 1`` are the lsns gone; ``subscriber`` names the subscriber, if
    the reader is one. Open the subscriber with ``on_data_loss="skip"`` to go on from the
    earliest record instead (the gap is then reported in ``reader.gaps``).
    """

    def __init__(self, path: str, subscriber: str | None, lost_from: int, lost_to: int) -> None:
        LogspoolError.__init__(self, path, subscriber, lost_from, lost_to)
        self.path = path
        self.subscriber = subscriber
        self.lsn = self.lost_from = lost_from
        self.first_lsn = self.lost_to = lost_to
        self.next_lsn = lost_to

    def __str__(self) -> str:
        who = f"subscriber {self.subscriber!r}" if self.subscriber is not None else "the reader"
        return (
            f"{self.path}: {who} was at lsn {self.lost_from}, but lsns {self.lost_from} to "
            f"{self.lost_to - 1} were removed by retention before it read them; the earliest "
            f"record now is lsn {self.lost_to}"
        )


class SubscriberNotFoundError(LogspoolError, KeyError):
    """No durable subscriber of that name exists in the log."""

    def __init__(self, path: str, name: str) -> None:
        super().__init__(path, name)
        self.path = path
        self.name = name

    def __str__(self) -> str:
        return f"{self.path}: no subscriber named {self.name!r}"


class SubscriberExistsError(LogspoolError, ValueError):
    """A durable subscriber of that name exists already."""

    def __init__(self, path: str, name: str) -> None:
        super().__init__(path, name)
        self.path = path
        self.name = name

    def __str__(self) -> str:
        return f"{self.path}: a subscriber named {self.name!r} exists already"


class CodecMissingError(LogspoolError):
    """The log uses a compression codec whose library is not installed."""

    def __init__(self, codec: str) -> None:
        super().__init__(codec)
        self.codec = codec

    def __str__(self) -> str:
        return (
            f"this log uses {self.codec} compression, and the 'zstandard' package is not installed; "
            "install it with: pip install 'logspool[zstd]'"
        )


class LeaseExpiredError(LogspoolError):
    """A worker acted on a job whose lease it no longer holds (fencing).

    ``token`` is the worker's lease token; ``current_token`` the lease now on the job (0 when the
    job is no longer leased, or None when it is gone: acked, dead, expired or superseded).
    """

    def __init__(self, path: str, job_id: int, token: int, current_token: int | None, reason: str) -> None:
        super().__init__(path, job_id, token, current_token, reason)
        self.path = path
        self.job_id = job_id
        self.token = token
        self.current_token = current_token
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: job {self.job_id}: lease token {self.token} no longer valid: {self.reason}"


class JobNotFoundError(LogspoolError, KeyError):
    """No job (or dead letter) with this id or key in the journal."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(path, what)
        self.path = path
        self.what = what

    def __str__(self) -> str:
        return f"{self.path}: no {self.what}"


class KeyNotFoundError(LogspoolError, KeyError):
    """No (live) value under this key in the key-value store."""

    def __init__(self, path: str, key: str) -> None:
        super().__init__(path, key)
        self.path = path
        self.key = key

    def __str__(self) -> str:
        return f"{self.path}: no key {self.key!r}"


class KeyExistsError(LogspoolError, ValueError):
    """The key holds a value and the call was told not to overwrite it."""

    def __init__(self, path: str, key: str) -> None:
        super().__init__(path, key)
        self.path = path
        self.key = key

    def __str__(self) -> str:
        return f"{self.path}: key {self.key!r} exists (and overwrite is off)"


class KeyLockedError(LogspoolError):
    """The key is locked by another owner until ``until`` (seconds since the epoch)."""

    def __init__(self, path: str, key: str, owner: str, until: float) -> None:
        super().__init__(path, key, owner, until)
        self.path = path
        self.key = key
        self.owner = owner
        self.until = until

    def __str__(self) -> str:
        return f"{self.path}: key {self.key!r} is locked by {self.owner!r} until {self.until:.3f}"


class ValueTypeError(LogspoolError, TypeError):
    """The operation does not apply to the type of the value the key holds."""

    def __init__(self, path: str, key: str, operation: str, value_type: str) -> None:
        super().__init__(path, key, operation, value_type)
        self.path = path
        self.key = key
        self.operation = operation
        self.value_type = value_type

    def __str__(self) -> str:
        return f"{self.path}: {self.operation} does not apply to key {self.key!r}, a {self.value_type} value"


class RemoteError(LogspoolError):
    """The server replied with an error ``kind`` this client has no class for (or refused the
    connection: ``AuthError``, ``TooManyConnections``, ``ProtocolError``, ``ConnectionLost``)."""

    def __init__(self, address: str, kind: str, message: str) -> None:
        super().__init__(address, kind, message)
        self.address = address
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.address}: {self.kind}: {self.message}"
