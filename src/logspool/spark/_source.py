"""The ``logspool`` Spark data source: batch and streaming reads, batch and streaming writes.

Longer than 600 lines: the Python Data Source API wants one source class with its readers and
writers, and they share the option checking (Kafka's spellings, refusals) and the planning; the
parsing into columns (``_partition``), the JVM reader (``_jvm``) and the served logs
(``_daemon``) are apart.

Reads: the driver plans lsn ranges (one segment each, big segments split at index entries) and
each task reads its range into Arrow record batches (``_partition``). Streaming offsets are
``{"lsn": N}``, the next lsn to read: one key, so Spark's comparison of offsets as JSON text is
exact.

Writes: each task stages its rows in a file under ``DIR/.spark-staging/`` (nothing is in the log
yet; an aborted job removes its files), taking them as Arrow batches and writing the payload
column's buffers as they are with each row's CRC-32, and the driver's ``commit`` frames them
with numpy (``_framing``) and appends them to the log under the writer lock, in partition
order, as one batch published at once (``Tail.append_framed``: the bytes ``append_batch`` would
write; readers see all of it or none, and a crash leaves it whole or absent). For a streaming
sink the batch id makes this exactly-once: before appending, the driver durably records an
intent (batch id, the head lsn, the staged files and their row count); a batch replayed after a
failure finds its intent and, unless the batch is in the log already, appends it from those
files, whatever rows the replay computed. The JVM writer (``_jvm_write``, ``jvm/LogSink.java``)
stages the same files from tasks on the JVM and calls this commit from the driver's JVM.

Options (case-insensitive) and their defaults are documented in docs/SPARK.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import struct
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .. import _format as fmt
from .. import _segment as seg
from .. import limits
from .._fs import REAL, replace_file
from ..errors import CorruptionError, DataLossError, LogspoolError, RecordTooLargeError
from ..log import Log
from ..log._directory import list_segments
from . import _daemon, _framing
from . import _partition as part

NAME = "logspool"
PYTHON_ONLY_NAME = "logspool-py"  # the Python source alone, where the jar has NAME (PythonOnlySource)
STAGING_DIR = ".spark-staging"
_DISCARDED = ".discarded-"  # (in the name of a job's staging directory renamed away: ``discard``)
SINKS_DIR = ".spark-sinks"
PARTITION_SIZE_DEFAULT = 32 * limits.MIB
DECODES = ("binary", "string", "json")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_STAGE_LEN = struct.Struct("<I")  # a row's size, in files staged before the blocks
# A staged file: this magic, then blocks of (row count, data size, block CRC) u32, the rows'
# sizes (u32), the CRC-32 of each row (u32), their bytes; the block CRC is the CRC-32 of the
# sizes, the row CRCs and the bytes, checked by the commit before it publishes anything framed
# from them (the records' CRCs come from the staged ones, not from the bytes read back).
# (``LSSTAGE2``, of a release before the CRCs: blocks of (row count, data size), the sizes, the
# bytes. A file of a release before the blocks has no magic: a u32 size, the row, and again; a
# size is below 2**28, and the magic read as one is above.)
_STAGE_MAGIC = b"LSSTAGE3"
_STAGE_MAGIC_V2 = b"LSSTAGE2"
_STAGE_BLOCK = struct.Struct("<II")  # LSSTAGE2: row count, data size
_STAGE_BLOCK_V3 = struct.Struct("<III")  # LSSTAGE3: row count, data size, CRC-32 of the rest
_STAGE_READ_SIZE = 4 * limits.MIB
# The framed bytes of a batch published at once: what one segment may hold (Tail.append_batch).
_BATCH_SIZE_MAX = limits.SEGMENT_SIZE_LIMIT - fmt.SEGMENT_HEADER_SIZE - fmt.RECORD_OVERHEAD


class OptionError(LogspoolError, ValueError):
    """A data source option is missing or wrong; the message names it."""


# --- options -------------------------------------------------------------------------------------
def _lower(options: Any) -> dict[str, str]:
    """Spark hands options case-insensitively; a plain dict with lowercase keys keeps that."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


# The options each use of the source takes (in their documented spelling; Spark hands them in
# lower case). Anything else is refused with the list, so a typo or another source's option
# never passes silently (issue 28).
_COMMON = ("path", "decode", "verifyChecksums", "maxPartitionBytes", *_daemon.SERVER_OPTIONS)
_KNOWN = {
    "batch read": (*_COMMON, "startingPosition", "endingPosition", "startingTimestamp", "endingTimestamp",
                   "failOnDataLoss", "jvmMapBytes"),
    "stream read": (*_COMMON, "startingPosition", "startingTimestamp", "maxRecordsPerTrigger",
                    "maxBytesPerTrigger", "failOnDataLoss", "subscriber"),
    "batch write": ("path", *_daemon.SERVER_OPTIONS),
    "stream write": ("path", "checkpointLocation", "queryName", *_daemon.SERVER_OPTIONS),
}  # fmt: skip
# Kafka's names for the same thing: taken as aliases, with Kafka's values where ours are the same.
_KAFKA_ALIASES = {
    "startingoffsets": "startingPosition",
    "endingoffsets": "endingPosition",
    "maxoffsetspertrigger": "maxRecordsPerTrigger",
}
# Kafka's options with no meaning here, and what to use instead.
_KAFKA_ONLY = {
    "minpartitions": "partitions follow segments and maxPartitionBytes (bytes one task reads)",
    "maxrecordsperpartition": "use maxPartitionBytes",
    "startingoffsetsbytimestamp": "a log has one lsn sequence: use startingTimestamp",
    "endingoffsetsbytimestamp": "a log has one lsn sequence: use endingTimestamp",
    "startingtimestamp.strategy": "startingTimestamp finds the first record at or after it",
    "subscribe": "the log is the directory given to load(DIR)",
    "subscribepattern": "the log is the directory given to load(DIR)",
    "assign": "the log is the directory given to load(DIR)",
    "topic": "the log is the directory given to save(DIR)",
    "kafka.bootstrap.servers": "the log is a directory: load(DIR)",
    "groupidprefix": "use subscriber to keep the query's position in the log",
    "kafka.group.id": "use subscriber to keep the query's position in the log",
    "includeheaders": "records have no headers",
}


def _options(raw: Any, use: str) -> dict[str, str]:
    """The options of one use of the source ("batch read", "stream write", ...), in lower case,
    with Kafka's aliases resolved; OptionError naming any option this use does not take."""
    options = _lower(raw)
    for alias, ours in _KAFKA_ALIASES.items():
        if alias in options:
            if ours.lower() in options:
                raise OptionError(f"give {ours} or its Kafka spelling {alias}, not both")
            value = options.pop(alias)
            if value.lstrip().startswith("{"):
                raise OptionError(
                    f"option {alias} ({ours}): a log has one lsn sequence, not Kafka's offsets by "
                    f"partition: give earliest, latest or an lsn, not {value!r}"
                )
            options[ours.lower()] = value
    known = _KNOWN[use]
    allowed = {k.lower() for k in known}
    for name in options:
        if name in _KAFKA_ONLY:
            raise OptionError(f"option {name} is the Kafka source's; here {_KAFKA_ONLY[name]}")
        if name not in allowed:
            raise OptionError(
                f"unknown option {name!r} for a {use} of a log; the options are: {', '.join(known)}"
            )
    if "server" not in options:
        for name in _daemon.SERVER_OPTIONS[1:]:
            if name.lower() in options:
                raise OptionError(
                    f"option {name} is for a log the daemon serves: give server too (HOST:PORT)"
                )
    return options


def _path(options: dict[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise OptionError("logspool data source: give the log directory: load(DIR) or save(DIR)")
    return os.path.abspath(path)


def _flag(options: dict[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise OptionError(f"option {name}: expected true or false, not {text!r}")


def _positive(options: dict[str, str], name: str) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"option {name}: expected a positive integer, not {text!r}")
    return value


def _time(options: dict[str, str], name: str) -> datetime | None:
    """RFC 3339 text, or milliseconds since the epoch (as Kafka's startingTimestamp), exactly."""
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        return _EPOCH + timedelta(milliseconds=int(text))
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            f"option {name}: expected RFC 3339 (2026-11-21T15:00:00Z) or epoch milliseconds, not {text!r}"
        ) from None
    if dt.tzinfo is None:
        raise OptionError(f"option {name}: {text!r} has no time zone (add Z or +00:00)")
    return dt


def _position(options: dict[str, str], name: str, allowed: tuple[str, ...]) -> str | int | None:
    text = options.get(name.lower())
    if text is None:
        return None
    if text in allowed:
        return text
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise OptionError(
            f"option {name}: expected {' or '.join(allowed)} or an lsn (0 or more), not {text!r}"
        )
    return value


def _first_lsn(log: Log) -> int:
    """``log.info().first_lsn`` (the oldest segment's base), without the parse of the newest
    segment that info() makes to find the head (see ``_head``)."""
    bases = list_segments(log._fs, log.path)
    return bases[0] if bases else 0


def _head(log: Log) -> int:
    """``log.info().next_lsn``: the lsn after the last whole record, as a reader opened at
    "latest" finds it (from the newest segment's last index entry that checks out, not by a parse
    of the whole segment). Damage before that entry is found by the reads that cover it."""
    reader = log.reader(start="latest")
    try:
        return reader.position
    finally:
        reader.close()


def _lsn_at(log: Log, at: datetime) -> int:
    """The first lsn whose timestamp is at or after ``at`` (the head if none)."""
    reader = log.reader(since=at)
    try:
        rec = reader.next(timeout=0)
        return rec.lsn if rec is not None else _head(log)
    finally:
        reader.close()


# --- the data source -----------------------------------------------------------------------------
class LogspoolDataSource(DataSource):
    """``spark.read.format("logspool").load(DIR)``, ``readStream``, ``write`` and ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        decode = _lower(self.options).get("decode", "binary")
        if decode not in DECODES:
            raise OptionError(f"option decode: expected one of {', '.join(DECODES)}, not {decode!r}")
        if decode == "json":
            raise OptionError(
                "option decode=json needs the payload's schema: spark.read.schema(...) with the JSON "
                "fields (and any of lsn, timestamp, segment, offset)"
            )
        served = "server" in _lower(self.options)  # the daemon's records name no segment or offset
        return StructType(
            [
                StructField("lsn", LongType(), False),
                StructField("timestamp", TimestampType(), False),
                StructField("payload", StringType() if decode == "string" else BinaryType(), False),
                StructField("segment", LongType(), served),
                StructField("offset", LongType(), served),
            ]
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        options = _options(self.options, "batch read")
        if "server" in options:
            return _daemon.BatchReader(options, schema)
        return _BatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = _options(self.options, "stream read")
        if "server" in options:
            return _daemon.StreamReader(options, schema)
        return _StreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("a log is append-only: use mode('append'), not overwrite")
        options = _options(self.options, "batch write")
        if "server" in options:
            return _daemon.BatchWriter(options, schema)
        return _BatchWriter(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = _options(self.options, "stream write")
        if "server" in options:
            return _daemon.StreamWriter(options, schema)
        return _StreamWriter(options, schema)


class PythonOnlySource(LogspoolDataSource):
    """The same source under the name ``logspool-py``, registered by the driver where the jar is
    loaded: there ``format("logspool")`` is the jar's (jvm/LogspoolSource.java), which hands
    everything to this source but may run a write's tasks on the JVM; this name never does
    (``logspool.spark.write(df, jvm=False)``), and it is what the jar hands to where a session
    could not register ``logspool`` beside it (``register``)."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_ONLY_NAME


@dataclass(frozen=True)
class _Partition(InputPartition):
    range: part.Range
    size: int = 0  # about how many bytes it holds, if planned with ``shares`` (``part.plan_sized``)


class _Scan:
    """What batch and streaming readers share: options, the row layout, and reading a range."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.path = _path(options)
        self.options = options
        self.schema = schema
        self.verify = _flag(options, "verifyChecksums", True)
        self.partition_size = _positive(options, "maxPartitionBytes") or PARTITION_SIZE_DEFAULT
        # Set by a planner in the driver, which knows the session (``logspool.spark.load``,
        # ``load_stream``: ``_jvm.plan_as_spark``): ranges cut as Spark cuts files. This source's
        # own planning runs in a Python worker, which does not know the cluster's cores.
        self.shares: part.Shares | None = None
        self.decode = options.get("decode", "binary")
        if self.decode not in DECODES:
            raise OptionError(f"option decode: expected one of {', '.join(DECODES)}, not {self.decode!r}")
        with self.open() as log:
            self.size_max = log.record_size_max
        if self.decode != "json" and [f.name for f in schema.fields] != [
            "lsn",
            "timestamp",
            "payload",
            "segment",
            "offset",
        ]:
            raise OptionError(
                "a schema is only given with decode=json (the other decodes have a fixed schema)"
            )

    def open(self) -> Log:
        if not os.path.isdir(self.path):
            raise OptionError(f"{self.path}: no such log directory")
        return Log(self.path, readonly=True)

    def plan(self, start: int, end: int) -> list[InputPartition]:
        with self.open() as log:
            if self.shares is not None:
                sized = part.plan_sized(log, start, end, self.partition_size, self.shares)
                return [_Partition(r, size) for r, size in sized]
            return [_Partition(r) for r in part.plan(log, start, end, self.partition_size)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, _Partition):
            return  # Spark plans one empty partition when partitions() returned none
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        json_fields = [f.name for f in self.schema.fields if f.name not in part.META_COLUMNS]
        converters = {
            f.name: part.iso_to_datetime for f in self.schema.fields if isinstance(f.dataType, TimestampType)
        }
        r = partition.range
        for lsns, stamps, payloads, offsets in part.read_range(r, self.size_max, self.verify):
            columns: dict[str, Any] = {
                "lsn": lsns,
                # nanoseconds to Spark's microseconds: truncation is the intent (safe=False)
                "timestamp": pa.array(stamps, pa.timestamp("ns", tz="UTC")).cast(_TIMESTAMP_US, safe=False),
                "segment": pa.repeat(pa.scalar(r.segment, pa.int64()), len(lsns)),
                "offset": offsets,
            }
            if self.decode == "json":
                columns.update(
                    zip(json_fields, part.decode_json(payloads, json_fields, converters), strict=True)
                )
            elif self.decode == "string":
                columns["payload"] = [p.decode("utf-8", "replace") for p in payloads]
            else:
                columns["payload"] = payloads
            arrays = [
                columns[field.name]
                if isinstance(columns[field.name], pa.Array)
                else pa.array(columns[field.name], field.type)
                for field in arrow_schema
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _bounds(log: Log, verify: bool) -> tuple[int, int]:
    """(first lsn, next lsn) of the log now. With checksums off, the head is still where every
    reader ends (``_head``): a batch being appended is written before the 4 bytes that publish it
    (FORMAT.md §7.1), and an unchecked parse would read its records, which may yet be cut. Only
    when damage at the newest segment's end stops that (CorruptionError) is the head found by
    the unchecked parse the tasks will use, so that a damaged record does not stop the
    planning."""
    if verify:
        return _first_lsn(log), _head(log)
    bases = list_segments(REAL, log.path)
    if not bases:
        return 0, 0
    try:
        return bases[0], _head(log)
    except CorruptionError:
        pass  # (damage proven past the end a reader finds: read on, unchecked, as asked)
    with open(os.path.join(log.path, fmt.segment_name(bases[-1])), "rb") as f:
        data = f.read()
    stop = seg.parse(
        data, fmt.SEGMENT_HEADER_SIZE, bases[-1], log.record_size_max, None, None, 0, None, False
    )
    return bases[0], stop.next_lsn if stop.kind == seg.SEAL else stop.lsn


class _BatchReader(_Scan, DataSourceReader):
    """A batch read. It takes no filters (no ``pushFilters``): PySpark fails every read of a source
    whose reader has one unless the session sets ``spark.sql.python.filterPushdown.enabled``
    (false by default), and PySpark 4.3 keeps the read it planned for a pushed query on the
    DataFrame and reuses it for the DataFrame's next query that pushes nothing: too few rows
    (tests/spark/test_pushdown.py keeps a canary). The JVM reader (``load``) pushes filters."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        with self.open() as log:
            first, head = _bounds(log, self.verify)
            start = _position(options, "startingPosition", ("earliest", "latest"))
            end = _position(options, "endingPosition", ("latest",))
            start_ts = _time(options, "startingTimestamp")
            end_ts = _time(options, "endingTimestamp")
            if start is not None and start_ts is not None:
                raise OptionError("give startingPosition or startingTimestamp, not both")
            if end is not None and end_ts is not None:
                raise OptionError("give endingPosition or endingTimestamp, not both")
            lo = first
            if start == "latest":
                lo = head
            elif isinstance(start, int):
                if start < first and _flag(options, "failOnDataLoss", True):
                    # As a stream does: records below the earliest are gone (retention), and a
                    # read that asked for them says so rather than start later in silence.
                    raise DataLossError(self.path, "spark", start, first)
                lo = max(start, first)
            elif start_ts is not None:
                lo = _lsn_at(log, start_ts)
            hi = head
            if isinstance(end, int):
                hi = min(end, head)
            elif end_ts is not None:
                hi = _lsn_at(log, end_ts)
        self.start, self.end = lo, hi

    def partitions(self) -> Sequence[InputPartition]:
        return self.plan(self.start, self.end)


class _StreamReader(_Scan, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        self.max_records = _positive(options, "maxRecordsPerTrigger")
        self.max_bytes = _positive(options, "maxBytesPerTrigger")
        self.fail_on_data_loss = _flag(options, "failOnDataLoss", True)
        self.subscriber = options.get("subscriber")
        self.target: int | None = None  # availableNow: the head when the query started
        start = _position(options, "startingPosition", ("earliest", "latest"))
        self.start_ts = _time(options, "startingTimestamp")
        self.start = "latest" if start is None and self.start_ts is None else start

    def initialOffset(self) -> dict[str, int]:
        """Where a new query starts: the subscriber's position if it exists; else the starting
        options. A new subscriber is created there at once, so that retention keeps everything
        the query has yet to read (its first commit comes only when the second batch is planned)."""
        with self.open() as log:
            if self.subscriber is not None:
                known = {s.name: s.lsn for s in log.subscribers()}
                if self.subscriber in known:
                    return {"lsn": known[self.subscriber]}
            if self.start_ts is not None:
                lsn = _lsn_at(log, self.start_ts)
            elif self.start == "earliest":
                lsn = _first_lsn(log)
            elif isinstance(self.start, int):
                lsn = self.start
            else:
                lsn = _head(log)
        if self.subscriber is not None:
            with Log(self.path) as writable:
                writable.add_subscriber(self.subscriber, lsn)
        return {"lsn": lsn}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_records is not None:
            return ReadMaxRows(self.max_records)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with self.open() as log:
            self.target = _head(log)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        with self.open() as log:
            if self.target is not None and start["lsn"] >= self.target:
                # availableNow has read up to its target: the end is the start (as below, where
                # min(target, head) <= start), found without looking for the head.
                return {"lsn": self._checked_start(start["lsn"], _first_lsn(log))}
            begin = self._checked_start(start["lsn"], _first_lsn(log))
            head = _head(log) if self.target is None else min(self.target, _head(log))
            end = max(head, begin)
            if not isinstance(limit, ReadAllAvailable):
                if self.max_records is not None:
                    end = min(end, begin + self.max_records)
                if self.max_bytes is not None:
                    end = _lsn_after_bytes(log, begin, end, self.max_bytes)
            return {"lsn": end}

    def reportLatestOffset(self) -> dict[str, int]:
        with self.open() as log:
            return {"lsn": _head(log)}

    def _checked_start(self, lsn: int, first: int) -> int:
        if lsn >= first:
            return lsn
        if self.fail_on_data_loss:
            raise DataLossError(self.path, self.subscriber or "spark", lsn, first)
        return first

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        with self.open() as log:
            first = _first_lsn(log)
        return self.plan(self._checked_start(start["lsn"], first), end["lsn"])

    def commit(self, end: dict[str, int]) -> None:
        """Spark is done with everything before ``end`` (it says so one batch late). With the
        ``subscriber`` option, that subscriber moves there, so retention keeps the rest."""
        if self.subscriber is None:
            return
        with Log(self.path) as log:
            if self.subscriber in {s.name for s in log.subscribers()}:
                log.rewind_subscriber(self.subscriber, end["lsn"])
            else:
                log.add_subscriber(self.subscriber, end["lsn"])


def _lsn_after_bytes(log: Log, begin: int, end: int, size_max: int) -> int:
    """The last lsn such that records [begin, lsn) take at most ``size_max`` bytes (at least one
    record, so a stream always moves)."""
    total = 0
    for r in part.plan(log, begin, end, 1 << 62):
        spath = os.path.join(r.path, fmt.segment_name(r.segment))
        pos, lsn = part.start_point(r)
        with open(spath, "rb") as f:
            f.seek(pos)
            data = f.read(size_max + limits.READ_CHUNK_SIZE)
        infos: list[seg.RecordInfo] = []
        seg.parse(data, 0, lsn, log.record_size_max, None, infos, pos)
        for info in infos:
            if info.lsn < r.start:
                continue
            if info.lsn >= r.end:
                break
            total += info.size
            if total > size_max and info.lsn > begin:
                return info.lsn
    return end


# --- writing -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Staged(WriterCommitMessage):
    """A task's staged file: its rows, and (from the JVM writer, whose batch files are not
    fsynced) its size in bytes, which the commit checks before it appends anything."""

    partition: int
    path: str
    count: int
    size: int | None = None


def _count(messages: Sequence[WriterCommitMessage | None]) -> int:
    """The rows the tasks of a job staged."""
    return sum(m.count for m in messages if isinstance(m, _Staged))


def _payload_index(schema: StructType) -> int:
    names = [f.name for f in schema.fields]
    if "payload" not in names:
        raise OptionError(
            f"writing to a log needs a column named payload (binary or string); the columns are {names}"
        )
    field = schema.fields[names.index("payload")]
    if not isinstance(field.dataType, BinaryType | StringType):
        raise OptionError(f"column payload must be binary or string, not {field.dataType.simpleString()}")
    return names.index("payload")


class _Writer:
    """Staging (in tasks) and publishing (in the driver), shared by batch and streaming writes."""

    def __init__(self, options: dict[str, str], schema: StructType, job: str, *, durable: bool) -> None:
        """``durable``: the tasks fsync their staged files and the staging directory (a streaming
        sink, whose intent names them for a replay); a batch job's are not fsynced, since
        nothing reads them after a crash (a batch job is not replayed) and the commit checks
        each file's size and each block's CRC before it publishes anything."""
        self.path = _path(options)
        self.column = _payload_index(schema)
        self.job = job
        self.durable = durable
        self.staging = os.path.join(self.path, STAGING_DIR, job)
        with Log(self.path):  # create the log now, in the driver, with default settings
            pass
        # The staging directory too, in the driver: a task never makes it (``write``), so a task
        # still running after its job ended (``discard``) cannot leave a file behind.
        os.makedirs(self.staging, exist_ok=True)
        # Directories an earlier job's ``discard`` renamed away and could not remove (on NFS, a
        # file a late task still held open stays as .nfsXXXX until it is closed): gone by now.
        root = os.path.dirname(self.staging)
        for name in os.listdir(root):
            if _DISCARDED in name:
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)

    def write(self, batches: Iterator[pa.RecordBatch]) -> _Staged:
        """In a task: stage the payload column of ``batches`` (Arrow record batches, as Spark
        hands them to an Arrow writer) in a file of blocks, one a batch: its row count and data
        size, the rows' sizes, their CRC-32s (so the commit frames the records without reading
        a row: ``_framing``), then their bytes, copied from the Arrow buffers as they are.
        Fsynced, with its directory, before the task reports success if the writer is
        ``durable``; the size it reports is checked by the commit either way."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        path = os.path.join(self.staging, f"{partition:08d}.{attempt}.{uuid.uuid4().hex}")
        count = 0
        try:
            staged = open(path, "xb")  # noqa: SIM115 (closed by the with below)
        except FileNotFoundError:
            raise LogspoolError(
                f"{self.staging}: the staging directory of this write is gone: the write ended (a "
                "task failed, and Spark does not wait for the others), or this executor does not "
                "see the log's directory (it must be on a file system the driver and every "
                "executor mount at the same path)"
            ) from None
        with staged as f:
            f.write(_STAGE_MAGIC)
            for batch in batches:  # bounded by the task's rows
                column = batch.column(self.column)
                if column.null_count:
                    at = int(np.argmax(column.is_null().to_numpy(zero_copy_only=False)))
                    raise OptionError(f"row {count + at} of partition {partition}: payload is null")
                sizes, data = _arrow_payloads(column)
                head = sizes.tobytes() + _framing.payload_crcs(sizes, data).astype("<u4").tobytes()
                f.write(_STAGE_BLOCK_V3.pack(len(column), len(data), zlib.crc32(data, zlib.crc32(head))))
                f.write(head)
                f.write(data)
                count += len(column)
            f.flush()
            size = f.tell()
            if self.durable:
                os.fsync(f.fileno())  # crash before here: no intent names this file yet
        if self.durable:
            REAL.fsync_dir(self.staging)  # the file's name too: the batch's intent will name it
        return _Staged(partition, path, count, size)

    @staticmethod
    def staged_files(messages: Sequence[WriterCommitMessage | None]) -> list[str]:
        """The staged files of a job's tasks, in partition order. A file whose task reported its
        size must have that size (LogspoolError if not): the JVM writer's batch files are not
        fsynced, and a file a crash cut at a block's end would otherwise pass every block check."""
        staged = sorted((m for m in messages if isinstance(m, _Staged)), key=lambda m: m.partition)
        for m in staged:
            if m.size is not None:
                try:
                    found = os.path.getsize(m.path)
                except FileNotFoundError:
                    found = -1
                if found < 0:
                    _open_staged(m.path)  # raises, saying why a file can be missing
                if found != m.size:
                    raise LogspoolError(
                        f"{m.path}: a staged file has {found} bytes, its task wrote {m.size}: the staged "
                        "file changed after its task wrote it"
                    )
        return [m.path for m in staged]

    def payloads(self, files: Sequence[str]) -> list[bytes]:
        """The rows the staged ``files`` hold, in order."""
        return [p for chunk in _staged_chunks(files) for p in chunk]

    def discard(self) -> None:
        """Remove the staged files, once the write is committed or aborted. A batch job's
        directory goes with them, renamed away first: Spark fails a job when one task fails and
        cancels the others without waiting for them, so a task may still be staging; with the
        directory gone its open fails (``write``) and it leaves no file (a file opened before
        the rename is in the renamed directory, removed here). A stream's directory stays for
        its next batch (a file a cancelled task of an aborted batch left goes with the next
        commit's)."""
        if self.durable:  # (a stream's)
            with contextlib.suppress(FileNotFoundError):
                for name in os.listdir(self.staging):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.staging, name))
            return
        gone = f"{self.staging}{_DISCARDED}{uuid.uuid4().hex}"
        try:
            os.rename(self.staging, gone)
        except FileNotFoundError:
            return
        shutil.rmtree(gone, ignore_errors=True)


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.w = _Writer(options, schema, f"batch-{time.time_ns()}-{uuid.uuid4().hex[:8]}", durable=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self.w.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Append the staged rows as one batch that readers see at once (``_append``); durable
        on return."""
        with Log(self.w.path) as log:
            with log.exclusive(sync=False) as tail:
                _append(tail, self.w.staged_files(messages), _count(messages), size_max=log.record_size_max)
            log.sync()
        # (Removing the staged files while the batch is fsynced, in a thread, measured no faster
        # on this 2-core machine: 0.168 s against 0.163 s for the commit, benchmarks/RESULTS.md.)
        self.w.discard()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.w.discard()


class _StreamWriter(DataSourceStreamArrowWriter):
    """Exactly-once by batch id, for any query (see the module doc and docs/SPARK.md).

    The intent of a batch names its staged files. A replay after the driver died while
    appending finishes the batch from those files, the first attempt's rows, and throws away the
    rows the replay computed: a query whose rows differ on replay (a random or time column)
    still leaves exactly one copy of the batch, as Spark's file sink does with its manifest."""

    def __init__(self, options: dict[str, str], schema: StructType, query_id: str | None = None) -> None:
        """``query_id``: the query's id, as Spark hands it to a JVM sink (the id its checkpoint's
        ``metadata`` file holds, which ``_sink_identity`` reads: the same state either way)."""
        if query_id:
            self.identity = f"query:{query_id}"
            self.legacy = options.get("checkpointlocation") or options.get("queryname")
        else:
            self.identity, self.legacy = _sink_identity(options)
        self.sink = hashlib.sha256(self.identity.encode()).hexdigest()[:32]
        self.w = _Writer(options, schema, f"stream-{self.sink}", durable=True)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self.w.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sinks = os.path.join(self.w.path, SINKS_DIR)
        os.makedirs(sinks, exist_ok=True)
        state = self._state(sinks)
        with Log(self.w.path) as log, log.exclusive() as tail:
            if state.get("batch", -1) > batchId or (state.get("batch") == batchId and state.get("done")):
                pass  # this batch is in the log already: a replay after a failure
            elif state.get("batch") == batchId:  # the intent of a commit cut short: finish it
                if "files" in state:  # the first attempt's rows, whatever this attempt computed
                    staging = os.path.join(self.w.path, STAGING_DIR)
                    files = [os.path.join(staging, f) for f in state["files"]]
                else:  # an intent of a release before the files were named: this attempt's rows
                    files = self.w.staged_files(messages)
                # A batch is published at once, so it is there whole or not at all; a prefix is
                # only left by releases before issue 28, which appended ~4 MiB at a time.
                present = _matching_prefix(log, state["start"], self.w.payloads(files))
                count = state["count"] if "count" in state else _staged_count(files)
                self._append(log, tail, files, count, present, sinks, batchId)
            else:
                files = self.w.staged_files(messages)
                staging = os.path.join(self.w.path, STAGING_DIR)
                intent = {
                    "batch": batchId,
                    "start": tail.next_lsn,
                    "files": [os.path.relpath(f, staging) for f in files],
                    "count": _count(messages),
                    "query": self.identity,
                }
                replace_file(REAL, sinks, self.sink, json.dumps(intent).encode())
                self._append(log, tail, files, _count(messages), 0, sinks, batchId)
        self.w.discard()

    def _append(
        self, log: Log, tail: Any, files: list[str], count: int, skip: int, sinks: str, batch: int
    ) -> None:
        _append(tail, files, count, skip, size_max=log.record_size_max)
        log.sync()  # (under the writer lock: the done mark must not come before the fsync)
        done = {"batch": batch, "done": True, "query": self.identity}
        replace_file(REAL, sinks, self.sink, json.dumps(done).encode())

    def _state(self, sinks: str) -> dict[str, Any]:
        """This query's state; a release that keyed it by the checkpoint location's text left it
        under that name: taken over (once) so a batch it left cut short is still finished."""
        state = _read_state(os.path.join(sinks, self.sink))
        if not state and self.legacy:
            old = hashlib.sha256(self.legacy.encode()).hexdigest()[:32]
            state = _read_state(os.path.join(sinks, old))
        return state

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Spark gives up on this attempt of batch ``batchId`` (a task or the commit failed). If
        the batch's intent is recorded and the batch not done (the commit failed after the
        intent), the files the intent names stay: the replay appends them, or finds them in the
        log (before, they were removed, and every replay failed saying a staged file was
        missing). Every other staged file of the attempt is removed."""
        state = self._state(os.path.join(self.w.path, SINKS_DIR))
        if state.get("batch") == batchId and not state.get("done") and "files" in state:
            staging = os.path.join(self.w.path, STAGING_DIR)
            kept = {os.path.join(staging, f) for f in state["files"]}
            for m in messages:
                if isinstance(m, _Staged) and m.path not in kept:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(m.path)  # crash here: a file no intent names, removed later
            return
        self.w.discard()


def _sink_identity(options: dict[str, str]) -> tuple[str, str | None]:
    """What names a streaming query for its exactly-once state, and the name a release before
    this one used (the checkpoint location's text). The query's id from its checkpoint's
    ``metadata`` file (Spark writes it when the query starts, and keeps it across restarts);
    else the checkpoint location made absolute; else the query's name. Keyed by the text alone,
    two queries started in different directories with checkpointLocation="checkpoint" shared
    one state, and the second one's batches were skipped as if written."""
    where = options.get("checkpointlocation")
    if where:
        local = where[len("file:") :] if where.startswith("file:") else where
        if "://" in local:  # another file system (hdfs://...): its URL is absolute already
            return f"checkpoint:{where}", where
        local = os.path.abspath(local.replace("///", "/", 1) if local.startswith("///") else local)
        try:
            with open(os.path.join(local, "metadata"), "rb") as f:
                query_id = json.loads(f.readline())["id"]
            if isinstance(query_id, str) and query_id:
                return f"query:{query_id}", where
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return f"checkpoint:{local}", where
    name = options.get("queryname")
    if name:
        return f"query-name:{name}", name
    raise OptionError(
        "a streaming write to a log needs .option('checkpointLocation', DIR): the sink's exactly-once "
        "state is kept per query, and the checkpoint names the query"
    )


def _read_state(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read())
    except FileNotFoundError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _matching_prefix(log: Log, start: int, payloads: list[bytes]) -> int:
    """How many of ``payloads`` are in the log from ``start`` on, in order (a cut-short commit)."""
    n = 0
    for rec in log.read(start):
        if n >= len(payloads) or rec.payload != payloads[n]:
            break
        n += 1
    return n


def _arrow_payloads(column: pa.Array) -> tuple[np.ndarray, memoryview]:
    """A binary or string Arrow column's rows: their sizes (u32, little-endian) and their bytes,
    back to back (a view of the column's own buffer)."""
    large = pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)
    if not (large or pa.types.is_binary(column.type) or pa.types.is_string(column.type)):
        raise OptionError(f"column payload must be binary or string, not {column.type}")
    _validity, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int64 if large else np.int32)
    offsets = offsets[column.offset : column.offset + len(column) + 1]
    sizes = np.diff(offsets).astype("<u4")
    first, last = (int(offsets[0]), int(offsets[-1])) if len(offsets) else (0, 0)
    data = memoryview(data_buffer)[first:last] if data_buffer is not None else memoryview(b"")
    return sizes, data


def _open_staged(path: str) -> Any:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise LogspoolError(
            f"{path}: a staged file of this write is missing (the log's directory must be on a "
            "file system the driver and every executor mount at the same path)"
        ) from None


def _staged_form(files: Sequence[str]) -> set[bytes]:
    """The magics of the staged ``files`` (b"" for a file of a release before the blocks)."""
    forms = set()
    for path in files:
        with _open_staged(path) as f:
            head = f.read(len(_STAGE_MAGIC))
        forms.add(head if head in (_STAGE_MAGIC, _STAGE_MAGIC_V2) else b"")
    return forms


def _staged_arrays(files: Sequence[str]) -> Iterator[tuple[np.ndarray, np.ndarray, memoryview]]:
    """The blocks of staged ``files`` (all with a magic), in order: the rows' sizes, their
    CRC-32s (computed here for a file of a release before they were staged) and their bytes.
    Each block's CRC is checked (LogspoolError naming the file if it fails; ~0.3 ms a MiB).
    Sizes read from a file are checked against what the file holds before anything is
    allocated."""
    for path in files:
        with _open_staged(path) as f:
            magic = f.read(len(_STAGE_MAGIC))
            assert magic in (_STAGE_MAGIC, _STAGE_MAGIC_V2)
            v3 = magic == _STAGE_MAGIC
            block = _STAGE_BLOCK_V3 if v3 else _STAGE_BLOCK
            left = os.fstat(f.fileno()).st_size - len(magic)
            for _ in range(1 << 40):  # bounded by the file's size: each turn reads a block or ends
                head = f.read(block.size)
                if not head:
                    break
                if len(head) < block.size:
                    raise LogspoolError(f"{path}: staged file cut short")
                count, size, *crc = block.unpack(head)
                left -= block.size + (8 if v3 else 4) * count + size
                if left < 0:
                    raise LogspoolError(f"{path}: staged file cut short")
                sizes = np.empty(count, "<u4")
                crcs = np.empty(count if v3 else 0, "<u4")
                data = bytearray(size)
                if (
                    f.readinto(sizes) != sizes.nbytes
                    or f.readinto(crcs) != crcs.nbytes
                    or f.readinto(data) != size
                ):
                    raise LogspoolError(f"{path}: staged file cut short")
                if v3:
                    _check_block(path, sizes, crcs, data, crc[0])
                if int(sizes.sum(dtype=np.int64)) != size:
                    raise LogspoolError(f"{path}: a staged block's sizes do not add up to its data")
                if not v3:
                    crcs = _framing.payload_crcs(sizes, memoryview(data))
                yield sizes, crcs, memoryview(data)


def _check_block(path: str, sizes: np.ndarray, crcs: np.ndarray, data: bytearray, expected: int) -> None:
    """A staged block read back is what its task wrote (its CRC-32); LogspoolError if not."""
    found = zlib.crc32(data, zlib.crc32(crcs.data, zlib.crc32(sizes.data)))
    if found != expected:
        raise LogspoolError(
            f"{path}: a staged block's checksum does not match (expected 0x{expected:08x}, found "
            f"0x{found:08x}): the staged file changed after its task wrote it"
        )


def _staged_chunks(files: Sequence[str], skip: int = 0) -> Iterator[list[bytes]]:
    """The rows of the staged ``files``, in order, past the first ``skip``: a list a block (the
    rows of one Arrow batch of a task), or of about 4 MiB of a file staged by a release before
    the blocks (a streaming batch whose first attempt such a release made)."""
    for path in files:
        with _open_staged(path) as f:
            if f.read(len(_STAGE_MAGIC)) in (_STAGE_MAGIC, _STAGE_MAGIC_V2):
                for sizes, _crcs, data in _staged_arrays([path]):
                    if skip >= len(sizes):
                        skip -= len(sizes)
                        continue
                    ends = np.cumsum(sizes, dtype=np.int64).tolist()
                    starts = [0, *ends[:-1]]
                    chunk = [bytes(data[i:j]) for i, j in zip(starts[skip:], ends[skip:], strict=True)]
                    skip = 0
                    yield chunk
                continue
            f.seek(0)
            rest = b""
            for _ in range(1 << 40):  # bounded by the file's size: each turn reads a block
                block = f.read(_STAGE_READ_SIZE)
                if not block:
                    break
                data = rest + block if rest else block
                pos = 0
                out: list[bytes] = []
                while pos + 4 <= len(data):  # bounded by the bytes read
                    (size,) = _STAGE_LEN.unpack_from(data, pos)
                    if pos + 4 + size > len(data):
                        break
                    if skip:
                        skip -= 1
                    else:
                        out.append(data[pos + 4 : pos + 4 + size])
                    pos += 4 + size
                rest = data[pos:]
                if out:
                    yield out
            if rest:
                raise LogspoolError(f"{path}: staged file cut short")


def _staged_count(files: Sequence[str]) -> int:
    """How many rows the staged ``files`` hold (for an intent that did not say)."""
    return sum(len(chunk) for chunk in _staged_chunks(files))


def _append(
    tail: Any, files: list[str], count: int, skip: int = 0, timestamp: int | None = None, *, size_max: int
) -> None:
    """Append the ``count`` rows of the staged ``files``, past the first ``skip``, as one batch
    published at once (every reader sees all of it or none of it, and a crash leaves it whole
    or absent: FORMAT.md §7.1), read from the files a block at a time. A batch of more than
    ``_BATCH_SIZE_MAX`` bytes framed (what one segment may hold) is appended in parts of at most
    that, each published at once.

    The records are framed a block at a time with numpy (``_framing``: the CRCs the tasks staged,
    carried over each record's header by the CRC's linearity), and the log writes the framed
    blocks as they are (``Tail.append_framed``): the bytes ``Tail.append_batch`` writes, without
    a Python step per record. A compressed log, or files staged by a release before the blocks,
    take ``append_batch``. ``timestamp``: the records', as ``append_batch``'s (default now).
    ``size_max``: the log's ``record_size_max``; a row larger raises ``RecordTooLargeError``
    before anything is published (``append_batch`` checks it; the framed path must too, or it
    would publish a record every reader takes for damage)."""
    forms = _staged_form(files)
    size = _staged_size(files, count, forms)
    if not tail.compressed and b"" not in forms:
        _append_framed(tail, files, size, skip, timestamp, size_max)
    else:
        _append_rows(tail, files, size, skip, timestamp)


def _staged_size(files: Sequence[str], count: int, forms: set[bytes]) -> int:
    """At most how many bytes the ``count`` rows of the staged ``files`` take framed: the files'
    bytes, with what they stage per row (a size, and a CRC if every file has them) replaced by
    a record's overhead (the files' magics and block heads count too: at most, not exactly)."""
    per_row = _STAGE_LEN.size + (4 if forms == {_STAGE_MAGIC} else 0)
    return sum(os.path.getsize(p) for p in files) + count * (fmt.RECORD_OVERHEAD - per_row)


def _append_rows(tail: Any, files: list[str], size: int, skip: int, timestamp: int | None) -> None:
    """``_append`` through ``Tail.append_batch`` (payloads as Python bytes, framed by the log);
    ``size``: at most the framed bytes."""
    chunks = _staged_chunks(files, skip)
    if size <= _BATCH_SIZE_MAX:
        tail.append_batch(chunks, size=size, timestamp=timestamp)
        return
    leftover: list[bytes] = []
    for _ in range(1 << 40):  # bounded: each turn appends a part of the rows, or ends

        def part() -> Iterator[list[bytes]]:
            nonlocal leftover
            taken = 0
            for chunk in itertools.chain([leftover] if leftover else [], chunks):
                leftover = []
                fit = 0
                while fit < len(chunk) and taken + len(chunk[fit]) + fmt.RECORD_OVERHEAD <= _BATCH_SIZE_MAX:
                    taken += len(chunk[fit]) + fmt.RECORD_OVERHEAD
                    fit += 1
                if fit:
                    yield chunk[:fit]
                if fit < len(chunk):
                    leftover = chunk[fit:]
                    return

        if not tail.append_batch(part(), size=_BATCH_SIZE_MAX, timestamp=timestamp) or not leftover:
            return
    raise AssertionError("unreachable")


_Block = tuple[np.ndarray, np.ndarray, memoryview]


def _rows(block: _Block, begin: int, end: int) -> _Block:
    """Rows ``begin`` to ``end`` of a staged block."""
    sizes, crcs, data = block
    at = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
    return sizes[begin:end], crcs[begin:end], data[int(at[begin]) : int(at[end])]


def _append_framed(
    tail: Any, files: list[str], size: int, skip: int, timestamp: int | None, size_max: int
) -> None:
    """``_append`` of staged blocks framed with numpy (``Tail.append_framed``); ``size``: at
    most the framed bytes. Each staged block's CRC is checked as it is read, before it is
    framed: the records' CRCs come from the CRCs the tasks staged, so a staged file changed
    since its task wrote it must fail the commit (nothing appended), never give records whose
    CRCs fail."""
    blocks: Iterator[_Block] = _staged_arrays(files)
    leftover: _Block | None = None
    for _ in range(1 << 40):  # bounded: each turn appends a part of the rows, or ends

        def frame(start: Any) -> Iterator[_framing.Framed]:
            nonlocal leftover, skip
            lsn, offset, due, taken = start.lsn, start.offset, start.index_due, 0
            for block in itertools.chain([leftover] if leftover is not None else [], blocks):
                leftover = None
                if skip:
                    if skip >= len(block[0]):
                        skip -= len(block[0])
                        continue
                    block, skip = _rows(block, skip, len(block[0])), 0
                if not len(block[0]):
                    continue
                largest = int(block[0].max())
                if largest > size_max:  # raised under the lock, before the batch is published
                    raise RecordTooLargeError(largest, size_max)
                framed_ends = taken + np.cumsum(block[0].astype(np.int64) + fmt.RECORD_OVERHEAD)
                fit = int(np.searchsorted(framed_ends, _BATCH_SIZE_MAX, side="right"))
                assert fit or taken, "a record larger than a batch may be"
                if fit < len(block[0]):  # the rest goes in the next part
                    leftover = _rows(block, fit, len(block[0]))
                    block = _rows(block, 0, fit)
                if fit:
                    framed = _framing.frame(
                        block[0],
                        block[2],
                        block[1],
                        lsn=lsn,
                        timestamp=start.timestamp,
                        durable_lsn=start.durable_lsn,
                        offset=offset,
                        due=due,
                        interval=start.index_interval,
                    )
                    yield framed
                    lsn, offset, due = lsn + framed.count, offset + len(framed.data), framed.due
                    taken += len(framed.data)
                if leftover is not None:
                    return

        # (Each part announces what a part may hold, as _append_rows does: the same rotations.)
        appended = tail.append_framed(frame, size=min(size, _BATCH_SIZE_MAX), timestamp=timestamp)
        if not appended or leftover is None:
            return
    raise AssertionError("unreachable")
