"""The ``logspool`` Spark source over a log the daemon serves: ``.option("server", "HOST:PORT")``.

Executors need only a network route to the daemon (``logspool serve``), as with Kafka: nothing
is read from or written to a shared file system. What the driver and the tasks do:

- **Batch reads.** The driver asks LOG_INFO for the log's segments (their first lsns and sizes)
  and cuts each segment's lsns into spans of about ``maxPartitionBytes`` each, by that segment's
  mean record size (the newest segment's by its records' written end, LOG_INFO's ``end``: its
  file holds preallocated zeros; a span never crosses a segment; a daemon older than the
  segments in LOG_INFO: by the log's mean record size, over lsns alone). Each task connects, reads its
  span with LOG_READ pages, several pages in flight at once (lsns are dense: page ``k`` starts at
  ``start + k * page``), and checks that every page starts where the last one ended.
- **Streams.** Offsets are ``{"lsn": N}`` as for a local log (a checkpoint may not move between
  the two: the lsns are the daemon's log's). The head is LOG_INFO's ``next_lsn``.
- **Writes.** Each task sends its rows with LOG_FORWARD as the producer
  ``spark:IDENTITY:PARTITION`` at source positions ``EPOCH << 32 | row``: the daemon keeps, per
  producer, the position below which it has every record, and drops what a retried task sends
  again. IDENTITY is a batch write's own id, or a streaming query's id; EPOCH is 0 for a batch
  write, the batch id for a stream. docs/SPARK.md says which guarantee this gives.

The segment and offset columns are null: LOG_READ's records carry lsn, timestamp and payload
only.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import ssl
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
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
from pyspark.sql.types import Row, StructType, TimestampType

from .. import _wire as wire
from ..errors import DataLossError, LogspoolError, RemoteError
from . import _partition as part

_logger = logging.getLogger("logspool.spark")
FORGET_PRODUCERS_MAX = 10_000  # producers a log.FORGET names at most (the daemon's bound)

if TYPE_CHECKING:  # the client (asyncio, the remote stores) is imported when a daemon is used
    from ..client import Client

# The options only a read or write through the daemon takes (in their documented spelling).
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SERVER_OPTIONS = ("server", "log", "token", "tokenFile", "tls", "tlsCaFile")
PAGE_COUNT_MAX = 10_000  # records per LOG_READ: the daemon's most (READ_LIMIT_MAX)
PAGE_BYTES = 4 * 1024 * 1024  # the daemon's default bytes_max of a LOG_READ page
PAGES_IN_FLIGHT = 4  # LOG_READ requests a task keeps sent ahead (pipelined on one connection)
FORWARD_BYTES = 4 * 1024 * 1024  # payload bytes per LOG_FORWARD (the frame's most is 16 MiB)
ROW_BITS = 32  # a producer's source position: epoch << ROW_BITS | row (rows per task < 2^32)
BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's MicroBatchExecution.BATCH_ID_KEY
TIMEOUT_S = 30.0  # connect and reply timeout of the tasks' and the driver's connections


def _option_error(message: str) -> Exception:
    from ._source import OptionError  # (imported here: _source imports this module)

    return OptionError(message)


# --- where the log is ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Remote:
    """The daemon and the log's name on it, as the driver read the options: pickled into every
    task (the token too, read once from ``tokenFile`` by the driver: executors may not have it)."""

    address: str
    name: str
    token: str | None
    tls: bool
    ca_file: str | None

    @property
    def where(self) -> str:
        """How errors name the log: ``HOST:PORT/NAME``."""
        return f"{self.address}/{self.name}"

    def connect(self, role: str) -> Client:
        """A connection to the daemon; ``role`` ("the driver", "partition 3") is in the error
        raised when the daemon cannot be reached, with the address and the reason."""
        context: ssl.SSLContext | None = None
        if self.tls:
            try:
                context = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as err:
                raise RemoteError(
                    self.address, "TLSError", f"{role}: tlsCaFile {self.ca_file}: {err}"
                ) from err
        from ..client import connect

        try:
            return connect(self.address, token=self.token, ssl_context=context, timeout=TIMEOUT_S,
                           reconnect=False)  # fmt: skip
        except OSError as err:  # refused, unreachable, no route, timed out, TLS handshake failed
            raise RemoteError(
                self.address,
                "Unreachable",
                f"{role} cannot reach the daemon serving the log {self.name!r} at {self.address}: {err} "
                "(every executor, not only the driver, needs a network route to the daemon)",
            ) from None


def remote(options: dict[str, str]) -> Remote:
    """The daemon and log the options name (``server``, ``log`` or the load/save argument,
    ``token`` or ``tokenFile``, ``tls``, ``tlsCaFile``); OptionError if they do not add up."""
    from ._source import _flag

    address = options["server"]
    try:
        from ..client import parse_address

        parse_address(address)
    except ValueError as err:
        raise _option_error(f"option server: {err}") from None
    name = options.get("log")
    path = options.get("path")
    if name and path and path != name:
        raise _option_error(
            f"give the log's name as option log or as load(NAME)/save(NAME), not both ({name!r}, {path!r})"
        )
    name = name or path
    if not name:
        raise _option_error("option server: name the log on the daemon: .option('log', NAME) or load(NAME)")
    if "token" in options and "tokenfile" in options:
        raise _option_error("give token or tokenFile, not both")
    token = options.get("token")
    if "tokenfile" in options:
        try:
            with open(options["tokenfile"], encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as err:
            raise _option_error(f"option tokenFile: {err}") from None
    ca_file = options.get("tlscafile")
    tls = _flag(options, "tls", ca_file is not None)
    if ca_file is not None and not tls:
        raise _option_error("option tlsCaFile is for tls=true")
    return Remote(address, name, token, tls, ca_file)


def refuse_local_only(options: dict[str, str]) -> None:
    """The local options that mean nothing with ``server``: OptionError naming why."""
    why = {
        "jvmmapbytes": "the JVM reader reads local files only; with server the Python reader reads",
        "subscriber": "the protocol has no subscriber commands: the query's checkpoint keeps its place",
    }
    for name, reason in why.items():
        if name in options:
            raise _option_error(f"option {name} does not apply with server: {reason}")
    if options.get("verifychecksums", "true").lower() == "false":
        raise _option_error(
            "option verifyChecksums=false does not apply with server: the daemon checks every record it reads"
        )


def _info(client: Client, remote: Remote) -> dict[str, Any]:
    return dict(client.log(remote.name).info())


def lsn_at(client: Client, remote: Remote, at: datetime) -> int:
    """The first lsn whose timestamp is at or after ``at`` (the head if none), by the daemon's
    time index (LOG_READ with ``since``). ``since`` travels as float seconds, about 240 ns
    coarse today: asked a microsecond early, and the records before ``at`` skipped here, so the
    answer is exact to the nanosecond, as the local read's."""
    at_ns = (at - _EPOCH) // timedelta(microseconds=1) * 1000
    log = client.log(remote.name)
    records, nxt = log.read_page("earliest", limit=100, since=(at_ns - 1000) / 1e9)
    for _ in range(1 << 20):  # bounded: each turn moves on by a page (few records lie in 1 µs)
        for r in records:
            if r.timestamp >= at_ns:
                return r.lsn
        if not records:
            return int(nxt)
        records, nxt = log.read_page(int(nxt), limit=100)
    raise AssertionError(f"{remote.where}: 2^20 pages within a microsecond of {at}")


# --- reading -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Span(InputPartition):
    """lsns ``start`` (inclusive) to ``end`` (exclusive) of the log, read as pages of ``page``."""

    start: int
    end: int
    page: int


def plan(info: dict[str, Any], start: int, end: int, partition_size: int) -> list[Span]:
    """Cut lsns [start, end) into spans of about ``partition_size`` bytes each, along the log's
    segments (LOG_INFO's ``bases`` and ``sizes``): each segment's lsns by its own mean record
    size, the newest's (its file holds preallocated zeros) by its records' end (``end``), or,
    from a daemon before ``end``, by the mean of the others when there are others. Lsns outside
    every segment (removed by retention since: the task says so) and a daemon that names no
    segments: by the log's mean record size. Pages hold about 4 MiB each."""
    if start >= end:
        return []
    next_lsn = int(info["next_lsn"])
    mean = max(1, written_size(info) // max(1, next_lsn - int(info["first_lsn"])))
    bases = [int(b) for b in info.get("bases") or ()]
    sizes = [int(z) for z in info.get("sizes") or ()]
    if not bases or len(bases) != len(sizes):
        return _cut(start, end, mean, partition_size)
    stops = [*bases[1:], max(next_lsn, bases[-1])]
    sealed = sum(sizes[:-1]), bases[-1] - bases[0]
    # The newest segment by its own records where the daemon says where they end (``end``), not
    # by its file's size, which counts the zeros preallocated after them: a young log of one
    # segment planned by its file's size was cut in ten times the tasks its bytes make.
    known_end = _newest_end(info)
    if known_end is not None:
        sizes[-1] = known_end
    spans: list[Span] = []
    pos = start
    for base, stop, size in zip(bases, stops, sizes, strict=True):
        lo, hi = max(pos, base), min(end, stop)
        if lo >= hi:
            continue
        if lo > pos:  # (lsns below the oldest segment: gone)
            spans += _cut(pos, lo, mean, partition_size)
        newest = stop == stops[-1] and len(bases) > 1 and known_end is None
        record_size = sealed[0] // max(1, sealed[1]) if newest else size // max(1, stop - base)
        spans += _cut(lo, hi, max(1, record_size), partition_size)
        pos = hi
    if pos < end:
        spans += _cut(pos, end, mean, partition_size)
    return spans


def _newest_end(info: dict[str, Any]) -> int | None:
    """LOG_INFO's ``end``, the newest segment's written end, if the daemon sends it (newer than
    ``sizes``) and it is within that segment's file; else None."""
    sizes, end = info.get("sizes") or (), info.get("end")
    if sizes and isinstance(end, int) and not isinstance(end, bool) and 0 < end <= int(sizes[-1]):
        return end
    return None


def written_size(info: dict[str, Any]) -> int:
    """The log's bytes up to its records' end: LOG_INFO's ``size`` less the newest segment's
    preallocated zeros where the daemon says where its records end (``_newest_end``)."""
    size = int(info["size"])
    end = _newest_end(info)
    return size if end is None else size - int(info["sizes"][-1]) + end


def _cut(start: int, end: int, record_size: int, partition_size: int) -> list[Span]:
    """lsns [start, end) in spans of about ``partition_size`` bytes of records of ``record_size``."""
    per_span = max(1, partition_size // record_size)
    page = max(1, min(PAGE_COUNT_MAX, PAGE_BYTES // record_size))
    return [Span(a, min(a + per_span, end), page) for a in range(start, end, per_span)]


def read_span(
    client: Client, remote: Remote, span: Span, role: str
) -> Iterator[tuple[list[int], list[int], list[bytes]]]:
    """(lsns, timestamps in ns, payloads) of every record of ``span``, a page or more at a time.
    Raises DataLossError if the records are gone (retention removed them after the planning)."""
    pos = span.start
    for _ in range(span.end - span.start + 1):  # bounded: each turn moves on by a record or more
        if pos >= span.end:
            return
        starts = [s for s in range(pos, span.end, span.page)][:PAGES_IN_FLIGHT]
        calls = [(wire.LOG_READ, {"name": remote.name, "start": s, "limit": min(span.page, span.end - s),
                                  "packed": True}) for s in starts]  # fmt: skip
        for s, reply in zip(starts, client.pipeline(calls), strict=True):
            if isinstance(reply, Exception):
                if isinstance(reply, RemoteError) and reply.kind == "ConnectionLost":
                    raise RemoteError(remote.address, "ConnectionLost", f"{role}: {reply.message}") from reply
                raise reply
            if s != pos:
                break  # the page before was short (bytes_max): ask again from where it ended
            if "packed" in reply:  # (one bytes value: a daemon of this release)
                lsns, stamps, payloads = wire.unpack_records(reply["packed"])
            else:  # a daemon before packed pages: a list per record
                lsns = [r[0] for r in reply["records"]]
                stamps = [r[1] for r in reply["records"]]
                payloads = [r[2] for r in reply["records"]]
            if not lsns or lsns[0] != pos:
                # Records below the log's first lsn are gone (retention after the planning):
                # data loss. Above it, the lsns skipped are gap records a repair quarantined,
                # which every reader passes over, as a local read does.
                found = lsns[0] if lsns else int(reply["next"])
                first = int(_info(client, remote)["first_lsn"])
                if pos < first:
                    raise DataLossError(remote.where, None, pos, first)
                if found <= pos:
                    raise LogspoolError(
                        f"{remote.where}: {role}: lsn {pos} was planned and the daemon has none"
                    )
                if not lsns:
                    pos = found
                    break  # the next pages were asked from lsns that do not follow: ask again
            within = bisect.bisect_left(lsns, span.end)  # (lsns grow)
            if not within:
                return
            yield lsns[:within], stamps[:within], payloads[:within]
            pos = lsns[within - 1] + 1
    raise AssertionError(f"{remote.where}: span {span} read past its length")


def arrow_batch(schema: StructType, decode: str, lsns: list[int], stamps: list[int],
                payloads: list[bytes]) -> pa.RecordBatch:  # fmt: skip
    """The rows as the local read builds them, with segment and offset null."""
    from ._source import _TIMESTAMP_US

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    columns: dict[str, Any] = {
        "lsn": lsns,
        # nanoseconds to Spark's microseconds: truncation is the intent (safe=False)
        "timestamp": pa.array(stamps, pa.timestamp("ns", tz="UTC")).cast(_TIMESTAMP_US, safe=False),
        "segment": pa.nulls(len(lsns), pa.int64()),
        "offset": pa.nulls(len(lsns), pa.int64()),
    }
    if decode == "json":
        json_fields = [f.name for f in schema.fields if f.name not in part.META_COLUMNS]
        converters = {
            f.name: part.iso_to_datetime for f in schema.fields if isinstance(f.dataType, TimestampType)
        }
        columns.update(zip(json_fields, part.decode_json(payloads, json_fields, converters), strict=True))
    elif decode == "string":
        columns["payload"] = [p.decode("utf-8", "replace") for p in payloads]
    else:
        columns["payload"] = payloads
    arrays = [
        columns[f.name] if isinstance(columns[f.name], pa.Array) else pa.array(columns[f.name], f.type)
        for f in arrow_schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


class _RemoteScan:
    """What the batch and streaming readers over the daemon share."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        from ._source import DECODES, PARTITION_SIZE_DEFAULT, _positive

        refuse_local_only(options)
        self.remote = remote(options)
        self.schema = schema
        self.partition_size = _positive(options, "maxPartitionBytes") or PARTITION_SIZE_DEFAULT
        self.decode = options.get("decode", "binary")
        if self.decode not in DECODES:
            raise _option_error(f"option decode: expected one of {', '.join(DECODES)}, not {self.decode!r}")
        if self.decode != "json" and schema.names != ["lsn", "timestamp", "payload", "segment", "offset"]:
            raise _option_error(
                "a schema is only given with decode=json (the other decodes have a fixed schema)"
            )

    def info(self) -> dict[str, Any]:
        with self.remote.connect("the driver") as client:
            return _info(client, self.remote)

    def plan(self, start: int, end: int, info: dict[str, Any] | None = None) -> list[Span]:
        return plan(info if info is not None else self.info(), start, end, self.partition_size)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Span):
            return  # Spark plans one empty partition when partitions() returned none
        from pyspark import TaskContext

        ctx = TaskContext.get()
        role = f"partition {ctx.partitionId()}" if ctx is not None else "a task"
        lsns: list[int] = []
        stamps: list[int] = []
        payloads: list[bytes] = []
        with self.remote.connect(role) as client:
            for a, b, c in read_span(client, self.remote, partition, role):
                lsns += a
                stamps += b
                payloads += c
                if len(lsns) >= part.BATCH_ROWS:
                    yield arrow_batch(self.schema, self.decode, lsns, stamps, payloads)
                    lsns, stamps, payloads = [], [], []
        if lsns:
            yield arrow_batch(self.schema, self.decode, lsns, stamps, payloads)


class BatchReader(_RemoteScan, DataSourceReader):
    """A batch read of a log on the daemon: the local read's options and rules where they apply."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        from ._source import _flag, _position, _time

        super().__init__(options, schema)
        start = _position(options, "startingPosition", ("earliest", "latest"))
        end = _position(options, "endingPosition", ("latest",))
        start_ts = _time(options, "startingTimestamp")
        end_ts = _time(options, "endingTimestamp")
        if start is not None and start_ts is not None:
            raise _option_error("give startingPosition or startingTimestamp, not both")
        if end is not None and end_ts is not None:
            raise _option_error("give endingPosition or endingTimestamp, not both")
        with self.remote.connect("the driver") as client:
            self.log_info = _info(client, self.remote)
            first, head = int(self.log_info["first_lsn"]), int(self.log_info["next_lsn"])
            lo = first
            if start == "latest":
                lo = head
            elif isinstance(start, int):
                if start < first and _flag(options, "failOnDataLoss", True):
                    raise DataLossError(self.remote.where, "spark", start, first)
                lo = max(start, first)
            elif start_ts is not None:
                lo = lsn_at(client, self.remote, start_ts)
            hi = head
            if isinstance(end, int):
                hi = min(end, head)
            elif end_ts is not None:
                hi = lsn_at(client, self.remote, end_ts)
        self.start, self.end = lo, hi

    def partitions(self) -> Sequence[InputPartition]:
        return self.plan(self.start, self.end, self.log_info)


class StreamReader(_RemoteScan, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream of a log on the daemon: offsets ``{"lsn": N}``, the head from LOG_INFO's
    ``next_lsn``, the local stream's options and data-loss rules where they apply."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        from ._source import _flag, _position, _positive, _time

        super().__init__(options, schema)
        self.max_records = _positive(options, "maxRecordsPerTrigger")
        self.max_bytes = _positive(options, "maxBytesPerTrigger")
        self.fail_on_data_loss = _flag(options, "failOnDataLoss", True)
        self.target: int | None = None  # availableNow: the head when the query started
        start = _position(options, "startingPosition", ("earliest", "latest"))
        self.start_ts = _time(options, "startingTimestamp")
        if start is not None and self.start_ts is not None:
            raise _option_error("give startingPosition or startingTimestamp, not both")
        self.start = "latest" if start is None and self.start_ts is None else start

    def initialOffset(self) -> dict[str, int]:
        with self.remote.connect("the driver") as client:
            if self.start_ts is not None:
                return {"lsn": lsn_at(client, self.remote, self.start_ts)}
            info = _info(client, self.remote)
        if self.start == "earliest":
            return {"lsn": int(info["first_lsn"])}
        if isinstance(self.start, int):
            return {"lsn": self.start}
        return {"lsn": int(info["next_lsn"])}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_records is not None:
            return ReadMaxRows(self.max_records)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = int(self.info()["next_lsn"])

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        info = self.info()
        begin = self._checked_start(start["lsn"], int(info["first_lsn"]))
        head = int(info["next_lsn"]) if self.target is None else min(self.target, int(info["next_lsn"]))
        end = max(head, begin)
        if not isinstance(limit, ReadAllAvailable):
            if self.max_records is not None:
                end = min(end, begin + self.max_records)
            if self.max_bytes is not None:
                # By the log's mean record size (LOG_INFO): the daemon says no record's size
                # without sending it. At least one record, so a stream always moves.
                count = max(1, int(info["next_lsn"]) - int(info["first_lsn"]))
                record_size = max(1, written_size(info) // count)
                end = min(end, begin + max(1, self.max_bytes // record_size))
        return {"lsn": end}

    def reportLatestOffset(self) -> dict[str, int]:
        return {"lsn": int(self.info()["next_lsn"])}

    def _checked_start(self, lsn: int, first: int) -> int:
        """As the local stream: records below the first lsn are gone (retention); with
        failOnDataLoss (the default) the query fails saying which, else it goes on from the first."""
        if lsn >= first:
            return lsn
        if self.fail_on_data_loss:
            raise DataLossError(self.remote.where, "spark", lsn, first)
        return first

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        info = self.info()
        return self.plan(self._checked_start(start["lsn"], int(info["first_lsn"])), end["lsn"], info)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the query's checkpoint holds its place (no subscriber on the daemon)."""


# --- writing -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sent(WriterCommitMessage):
    """What a task sent: its partition and how many rows the daemon holds for it."""

    partition: int
    count: int


class _RemoteWriter:
    """The tasks' side of a write through the daemon: rows go out as LOG_FORWARD batches of the
    producer ``spark:IDENTITY:PARTITION`` at source positions ``epoch << ROW_BITS | row``.

    The daemon holds, per producer, the position below which it has every record (durably,
    with a pending entry that survives its own crash: PROTOCOL.md §4.1), and appends only what
    lies past it. A task sent again (a retry, a speculative copy, a batch Spark replays after the
    driver restarted) sends the same positions, and the daemon drops the rows it already has.
    The requests of one producer go one at a time: two in flight could be served out of order,
    and the later one would move the position past rows the earlier one then finds "had"."""

    def __init__(self, options: dict[str, str], schema: StructType, identity: str) -> None:
        from ._source import _payload_index

        self.remote = remote(options)
        self.column = _payload_index(schema)
        # Hashed: a checkpoint's path can be long, and a producer id holds at most 1,024 bytes.
        self.identity = hashlib.sha256(identity.encode()).hexdigest()[:32]
        with self.remote.connect("the driver") as client:
            _info(client, self.remote)  # reachable, the token is right, and the log exists

    def write(self, rows: Iterator[Row], epoch: int) -> Sent:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        role = f"partition {partition}"
        producer = f"spark:{self.identity}:{partition}"
        base = epoch << ROW_BITS
        count = 0
        chunk: list[bytes] = []
        size = 0
        with self.remote.connect(role) as client:
            for row in rows:
                value = row[self.column]
                if value is None:
                    raise _option_error(f"row {count + len(chunk)} of partition {partition}: payload is null")
                data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
                chunk.append(data)
                size += len(data) + 16  # the wire's per-record overhead, about
                if size >= FORWARD_BYTES:
                    count = self._send(client, producer, base, count, chunk, role)
                    chunk, size = [], 0
            if chunk:
                count = self._send(client, producer, base, count, chunk, role)
        return Sent(partition, count)

    def forget(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """In the driver, once a batch write is committed: the daemon forgets the producers of
        its partitions (one entry each, kept per log until then: PROTOCOL.md §4.1), which never
        send again (the next write has a new identity). A daemon before log.FORGET keeps them,
        as every daemon did: a warning, and the write stands."""
        producers = sorted({f"spark:{self.identity}:{m.partition}" for m in messages if isinstance(m, Sent)})
        if not producers:
            return
        try:
            with self.remote.connect("the driver") as client:
                for i in range(0, len(producers), FORGET_PRODUCERS_MAX):  # bounded by the partitions
                    client.log(self.remote.name).forget_producers(producers[i : i + FORGET_PRODUCERS_MAX])
        except (RemoteError, OSError, ValueError) as err:  # (ValueError: a daemon before log.FORGET)
            _logger.warning("%s: the daemon kept the %d producers of this write: %s",
                            self.remote.where, len(producers), err)  # fmt: skip

    def _send(
        self, client: Client, producer: str, base: int, count: int, payloads: list[bytes], role: str
    ) -> int:
        """Send rows ``count``... of the task; the count after them. Returns only once the
        daemon said it holds them (its reply follows its fsync)."""
        if count + len(payloads) >= 1 << ROW_BITS:
            raise LogspoolError(f"{role}: more than 2^{ROW_BITS} rows in one task: repartition the write")
        body = {"name": self.remote.name, "producer": producer, "first": base + count, "records": payloads}
        (reply,) = client.pipeline([(wire.LOG_FORWARD, body)])
        if isinstance(reply, Exception):
            if isinstance(reply, RemoteError) and reply.kind == "ConnectionLost":
                raise RemoteError(
                    self.remote.address, "ConnectionLost", f"{role}: {reply.message}"
                ) from reply
            raise reply
        end = base + count + len(payloads)
        if int(reply["next"]) < end:  # the daemon's contract says this cannot be: do not go on
            raise RemoteError(self.remote.address, "ForwardError",
                              f"{role}: the daemon holds rows below {reply['next']}, not {end}")  # fmt: skip
        return count + len(payloads)


class BatchWriter(DataSourceWriter):
    """``df.write`` through the daemon: every row once, even if a task runs again (see
    ``_RemoteWriter``); rows are visible as each task's batches land, not all at once."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.w = _RemoteWriter(options, schema, f"batch:{uuid.uuid4().hex}")

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return self.w.write(iterator, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Each task's rows are in the log when the task succeeds; the daemon forgets the
        write's producers (``_RemoteWriter.forget``): no task of this write runs again."""
        self.w.forget(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A log is append-only: the rows of the tasks that succeeded stay (docs/SPARK.md)."""


class StreamWriter(DataSourceStreamWriter):
    """The streaming sink through the daemon: the query's identity names the producers, the
    batch id is the epoch, so a batch Spark replays after a failure (or a task retried) lands
    each row position once."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        from ._source import _sink_identity

        identity, _ = _sink_identity(options)
        self.w = _RemoteWriter(options, schema, f"stream:{identity}")

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        """Runs in a task. PySpark hands a sink's tasks no batch id; the micro-batch engine sets
        it as the job's local property ``streaming.sql.batchId``, which tasks see."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if batch is None:
            raise LogspoolError(
                "a streaming write through the daemon needs the batch id (streaming.sql.batchId)"
            )
        return self.w.write(iterator, int(batch))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing is left to do: each task's rows are in the log when the task succeeds."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A log is append-only: the rows of the tasks that succeeded stay; a replay of the
        batch sends them again, and the daemon drops them."""
