"""Logspool logs as Redis Streams: the stream commands' mechanism (XADD, XTRIM, XLEN, XRANGE,
XREVRANGE, XREAD), the reads by lsn the consumer groups make (``_resp_groups.py``), and the
wake-up of blocked XREADs and XREADGROUPs. docs/RESP.md is the user's view.

A little over 600 lines: the stream commands' mechanism and the wake-ups of blocked readers share
the readers kept per log and their bounds; the commands' parsing is ``_resp_stream_commands.py``.

**Names.** A stream key is the name of a log in ``DATA/logs/``: it must match the daemon's store
name pattern (``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``: no ``/``, no ``..``), so no key can name a
path outside the data directory. Reading commands never create a log; XADD does.

**Ids.** An entry's id is ``<ms>-<lsn>``: the record's timestamp in milliseconds since the epoch
and its lsn. Both are stored in the record (FORMAT.md), so ids are the same after a restart and
for every process; lsns grow by one per record and timestamps never decrease along a log, so ids
order exactly as the log does, and a time alone (``XRANGE key 1700000000000 +``) selects by time
as in Redis. The log assigns the lsn, so XADD takes ``*``, or an id the log would give the
entry anyway (``MS-*`` or ``MS-<next lsn>``, MS not below the last entry's): see ``Streams.add``.

**Trimming.** A log loses records only a whole sealed segment at a time, from the front
(``_retention.py``). XTRIM and XADD's MAXLEN/MINID with ``~`` (Redis's "about") remove the
segments that the threshold lets go entirely (``Streams.trim``); an exact trim (``=``) is refused.

**Fields.** A record is one payload. XADD with the single field ``payload`` stores the value's
bytes as they are (so records appended by ``Log.append`` or the native protocol read back as
``payload <bytes>``); any other fields are encoded: ``FIELDS_MAGIC``, then a big-endian u32
count of pairs, then for each field and each value a big-endian u32 size and its bytes. A
payload that starts with the magic but does not decode exactly is read as a raw payload.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import _format as fmt
from .._fs import REAL
from .._reader import Reader
from .._retention import Retention, _segment_end_ns
from .._watch import _IN_CLOEXEC, _IN_NONBLOCK, _MASK, _libc
from ..errors import PositionError
from ..log import Log, Tail
from ..log._directory import list_segments, segment_infos
from . import _resp_wire as w
from ._resp_group_state import MS_MAX
from ._resp_kv import RedisError

FIELDS_MAGIC = b"LSXF\x00\x01"
_U32 = struct.Struct(">I")
ID_MAX = (1 << 64) - 1
# Entries one XREAD or XRANGE reply holds at most (XREAD continues from its last id; an XRANGE
# without COUNT over more entries is answered with an error that says to give COUNT).
STREAM_REPLY_COUNT_MAX = 10_000
# Payload bytes of one reply of a stream (XRANGE, XREAD) or of a consumer group reply over its
# streams (XREADGROUP, XCLAIM, XAUTOCLAIM): an entry that would pass it waits for the next call
# (but a reply holds at least one), so that a reply stays under the connection's 64 MiB output
# bound (RespOptions.output_size_max: a reply past it closes the connection, and with
# XREADGROUP '>' the entries stay pending for a consumer that never saw them). 32 MiB + a
# 16 MiB record + framing is below it.
STREAM_REPLY_BYTES_MAX = 32 * 1024 * 1024
SEALED_LAST_MAX = 4096  # sealed segments whose last id MINID trimming remembers
# Blocked XREADs on a log that has no inotify watch (no inotify, or the log does not exist yet)
# look again this often.
POLL_S = 0.05
# An inotify watch outlives its last waiter this long: setting one up costs milliseconds.
WATCH_LINGER_S = 5.0

Id = tuple[int, int]
Entry = tuple[bytes, list[bytes]]  # the id's text, then field, value, field, value...
Record = tuple[int, int, bytes]  # (lsn, ms, payload) of a log record


def encode_fields(fields: list[bytes]) -> bytes:
    """The record payload of XADD's field/value pairs (see the module docstring)."""
    if len(fields) == 2 and fields[0] == b"payload" and not fields[1].startswith(FIELDS_MAGIC):
        return fields[1]
    parts = [FIELDS_MAGIC, _U32.pack(len(fields) // 2)]
    for item in fields:
        parts += [_U32.pack(len(item)), item]
    return b"".join(parts)


def fields_bound(args: list[bytes]) -> int:
    """At least the bytes of the record an XADD of ``args`` (the whole command) appends
    (``encode_fields`` of a part of them, and the record's framing)."""
    return sum(map(len, args)) + 4 * len(args) + len(FIELDS_MAGIC) + 4 + fmt.RECORD_OVERHEAD


def decode_fields(payload: bytes) -> list[bytes]:
    if payload.startswith(FIELDS_MAGIC) and len(payload) >= len(FIELDS_MAGIC) + 4:
        pos = len(FIELDS_MAGIC)
        (pairs,) = _U32.unpack_from(payload, pos)
        pos += 4
        out: list[bytes] = []
        if pairs <= len(payload):  # each pair takes at least 8 bytes: a bound before the loop
            for _ in range(2 * pairs):
                if pos + 4 > len(payload):
                    break
                (size,) = _U32.unpack_from(payload, pos)
                pos += 4
                if pos + size > len(payload):
                    break
                out.append(payload[pos : pos + size])
                pos += size
            else:
                if pos == len(payload):
                    return out
    return [b"payload", payload]


def format_id(timestamp_ns: int, lsn: int) -> bytes:
    return b"%d-%d" % (timestamp_ns // 1_000_000, lsn)


def parse_id(raw: bytes, *, end: bool = False) -> tuple[Id, bool]:
    """A range bound: ``-``, ``+``, ``MS`` (``MS-0`` as a start, ``MS-max`` as an end) or ``MS-SEQ``;
    with a leading ``(`` exclusive. Returns the id and whether it is exclusive."""
    exclusive = raw.startswith(b"(")
    text = raw[1:] if exclusive else raw
    if text == b"-":
        return (0, 0), exclusive
    if text == b"+":
        return (ID_MAX, ID_MAX), exclusive
    ms_text, dash, seq_text = text.partition(b"-")
    try:
        if not ms_text.isdigit() or (dash and not seq_text.isdigit()):
            raise ValueError
        ms, seq = int(ms_text), (int(seq_text) if dash else (ID_MAX if end else 0))
    except ValueError:
        raise RedisError("ERR Invalid stream ID specified as stream command argument") from None
    if ms > ID_MAX or seq > ID_MAX:
        raise RedisError("ERR Invalid stream ID specified as stream command argument")
    return (ms, seq), exclusive


def strict_id(raw: bytes, *, seq_auto: bool = False) -> tuple[int, int | None]:
    """An exact id: ``MS-SEQ`` or ``MS`` (``MS-0``); with ``seq_auto``, ``MS-*`` too (seq None)."""
    ms_text, dash, seq_text = raw.partition(b"-")
    if ms_text.isdigit() and (not dash or seq_text.isdigit() or (seq_auto and seq_text == b"*")):
        ms = int(ms_text)
        seq = None if seq_text == b"*" else int(seq_text) if dash else 0
        if ms <= ID_MAX and (seq is None or seq <= ID_MAX):
            return ms, seq
    raise RedisError("ERR Invalid stream ID specified as stream command argument")


def entries_reply(entries: list[Entry]) -> bytes:
    return w.array([w.array([w.bulk(eid), w.bulks(fields)]) for eid, fields in entries])


@dataclass
class Cursor:
    """Where an XREAD of one stream reads from: records with lsn >= ``lsn`` (``$``), or with an id
    greater than ``after``."""

    name: str
    lsn: int | None = None
    after: Id | None = None


class _Held:
    """One log's writer lock held by a round, and the entries appended under it not yet written."""

    __slots__ = ("pending", "stack", "stamp", "tail")

    def __init__(self, stack: contextlib.ExitStack, tail: Tail) -> None:
        self.stack = stack
        self.tail = tail
        self.pending: list[bytes] = []
        self.stamp = 0  # the timestamp the pending entries share (their ids' ms)


class HeldTails:
    """The writer locks of the logs a commit round appended to, held until the round's end
    (``close``, before its fsync), so that its XADDs to one stream take the lock once, not once
    an entry (20% of the committer's time under XADD x16, benchmarks/RESULTS.md), and are
    written as one batch (one pwrite a stream a round): an entry's id is known before it is
    written, as nobody else appends while the lock is held (its lsn is the tail's next plus the
    entries before it; its time the batch's). Nothing is acknowledged before ``close`` wrote
    them and the round fsynced them; if a write fails the round fails, every reply an error.
    The lock is not reentrant: a command that takes it itself (a trim) has the log's written
    and released first (``release``). Used by the committer's thread only."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def take_now(self, log: Log, need: int = 0) -> bool:
        """Take ``log``'s writer lock for the round if it is free now (no wait: a commit round
        on the event loop takes its streams' locks so, before any command runs) and its active
        segment has room for ``need`` more bytes of records (``Tail.room``: a rotation would
        wait for the sync file's lock, which another process holds through its fsyncs); False,
        nothing held, if another handle holds the lock, the log cannot be written, or the
        round might rotate its segment."""
        if log.path in self._held:
            return True
        stack = contextlib.ExitStack()
        try:
            tail = stack.enter_context(log.exclusive(timeout_s=0, sync=False))
        except Exception:  # (LockedError; any other failure: the thread's round answers it)
            return False
        if tail.room() < need:
            stack.close()
            return False
        self._held[log.path] = _Held(stack, tail)
        return True

    def tail_of(self, log: Log) -> Tail | None:
        """The ``Tail`` of ``log`` if its lock is held here (``take_now``), else None."""
        held = self._held.get(log.path)
        return None if held is None else held.tail

    def add(
        self,
        log: Log,
        payload: bytes,
        wanted: tuple[int, int | None] | None,
        append_now: Callable[[Tail, bytes, tuple[int, int | None] | None], bytes],
    ) -> bytes:
        """Append ``payload`` to ``log`` under its held lock; the entry's id. An explicit id
        (``wanted``) is appended at once, after the pending ones (``append_now``: its checks
        need the tail as it is)."""
        held = self._held.get(log.path)
        if held is None:
            stack = contextlib.ExitStack()
            tail = stack.enter_context(log.exclusive(sync=False))
            held = self._held[log.path] = _Held(stack, tail)
        tail = held.tail
        tail.check([payload])  # (too large: this XADD's error, not the round's)
        if wanted is not None:
            self._write(held)
            return append_now(tail, payload, wanted)
        if not held.pending:
            now = time.time_ns()
            held.stamp = now if now > tail.timestamp else tail.timestamp  # (never decreasing)
        held.pending.append(payload)
        return format_id(held.stamp, tail.next_lsn + len(held.pending) - 1)

    @staticmethod
    def _write(held: _Held) -> None:
        if held.pending:
            payloads, held.pending = held.pending, []
            first = held.tail.next_lsn
            lsns = held.tail.append_many(payloads, timestamp=held.stamp)
            assert lsns[0] == first, (lsns[0], first)  # (ids were given from it)

    def release(self, log: Log) -> None:
        """Write ``log``'s pending entries and give its lock back."""
        held = self._held.pop(log.path, None)
        if held is not None:
            with held.stack:
                self._write(held)

    def close(self) -> None:
        """Write every log's pending entries and give every lock back (each one, even if a
        write fails; the first error is raised). The round fsyncs them after."""
        held, self._held = self._held, {}
        first: BaseException | None = None
        for one in held.values():
            try:
                with one.stack:
                    self._write(one)
            except BaseException as err:
                first = first or err
        if first is not None:
            raise first


class Streams:
    """The stream commands on the daemon's logs (``stores``: the server's ``Stores``). Used from
    pool threads; every method is safe to call from several at once."""

    def __init__(self, stores: object, data: str) -> None:
        self.stores = stores
        self.data = data
        from ._resp_groups import Groups  # (here: it reads logs with this module's functions)

        self.groups = Groups(data, stores.durability, stores.make_dir, stores.adopt, stores.fs)  # type: ignore[attr-defined]
        self._sealed_last: dict[tuple[str, int], Id] = {}  # (log, next base): a sealed segment's last id
        self._sealed_lock = threading.Lock()

    def close(self) -> None:
        """Close the consumer groups' stores (each op is durable already)."""
        self.groups.close()

    def path(self, name: str) -> str:
        return os.path.join(self.data, "logs", name)

    def exists(self, name: str) -> bool:
        return os.path.isdir(self.path(name))

    def log(self, name: str, create: bool) -> Log | None:
        found = self.stores.opened("logs", name)  # type: ignore[attr-defined]  # (open: no lock, no disk)
        if found is not None:
            return found  # type: ignore[no-any-return]
        if not create and not self.exists(name):
            return None
        return self.stores.get("logs", name)  # type: ignore[attr-defined,no-any-return]

    # --- writing ------------------------------------------------------------------------------
    def add(
        self,
        log: Log,
        fields: list[bytes],
        wanted: tuple[int, int | None] | None = None,
        held: HeldTails | None = None,
    ) -> bytes:
        """Append one entry; its id. Not yet durable: the caller syncs the log before replying.
        ``held``: a commit round's writer locks (``HeldTails``): the entry is written with the
        round's others to that log when the round closes them (before its fsync); else the lock
        is taken for this entry and it is written at once.

        ``wanted``: an explicit id (``strict_id``). An id is ``<ms>-<lsn>`` and the log gives the
        lsn, so the only ids it can honour are those it would give: the sequence is the next lsn
        (or ``*``) and the time is not below the last entry's (timestamps never decrease); the
        record's timestamp is then that millisecond. Any other id is refused with Redis's error
        where Redis would refuse it too (not above the last id), else with one naming why."""
        payload = encode_fields(fields)
        if held is not None:
            return held.add(log, payload, wanted, self._append)
        with log.exclusive(sync=False) as tail:
            return self._append(tail, payload, wanted)

    def _append(self, tail: Tail, payload: bytes, wanted: tuple[int, int | None] | None) -> bytes:
        stamp = max(time.time_ns(), tail.timestamp)
        if wanted is not None:
            stamp = self._wanted_stamp(wanted, tail.next_lsn, tail.timestamp)
        [lsn] = tail.append_many([payload], timestamp=stamp)
        return format_id(stamp, lsn)

    @staticmethod
    def _wanted_stamp(wanted: tuple[int, int | None], next_lsn: int, last_ns: int) -> int:
        ms, seq = wanted
        if (ms, seq) == (0, 0):
            raise RedisError("ERR The ID specified in XADD must be greater than 0-0")
        last_ms = last_ns // 1_000_000
        rule = (f"(logspool assigns ids <ms>-<lsn>: give '*' only, or the id it would assign: "
                f"<ms>-{next_lsn} or <ms>-* with ms >= {last_ms})")  # fmt: skip
        last = (last_ms, next_lsn - 1) if next_lsn else (0, 0)
        if (ms, next_lsn if seq is None else seq) <= last:
            raise RedisError(
                f"ERR The ID specified in XADD is equal or smaller than the target stream top item {rule}"
            )
        if seq is not None and seq != next_lsn:
            raise RedisError(f"ERR the sequence of this stream's next id is its next lsn, {next_lsn} {rule}")
        if ms < last_ms:  # (an empty log: its newest segment's start, which no record may precede)
            raise RedisError(f"ERR logspool cannot stamp an entry before this log's newest time {rule}")
        if ms >= MS_MAX:
            raise RedisError(
                f"ERR logspool keeps times in ns since the epoch: an id's ms must be below {MS_MAX}"
            )
        return max(ms * 1_000_000, last_ns)

    def trim(self, log: Log, *, maxlen: int | None, minid: Id | None, limit: int) -> int:
        """Remove the sealed segments at the front of the log whose every entry the threshold
        lets go: with ``maxlen``, at least that many entries stay; with ``minid``, no entry with
        an id at or above it goes. ``limit`` > 0: remove at most that many entries. Returns the
        entries removed. Durable on return (retention fsyncs the directory).

        Done by retention itself: under the writer lock (no append can change the sizes), a
        one-off ``Retention(size_max=...)`` of exactly the size of the segments kept, so that
        the same code removes segments as for every other policy."""
        with log.exclusive(sync=False) as tail:
            # (cheap when nothing goes, as on most XADDs with MAXLEN: one listing, no reads)
            bases = list_segments(REAL, log.path)
            drop = 0
            for i in range(len(bases) - 1):  # never the active (last) segment
                next_base = bases[i + 1]
                if limit and next_base - bases[0] > limit:
                    break
                if maxlen is not None and tail.next_lsn - next_base < maxlen:
                    break
                if minid is not None and not self._all_below(log, next_base, minid):
                    break
                drop = i + 1
            if not drop:
                return 0
            kept = sum(seg.size for seg in segment_infos(log.path, bases[drop:]))
            log.enforce_retention(Retention(size_max=kept))
        after = list_segments(REAL, log.path)
        return (after[0] if after else bases[0]) - bases[0]

    def _all_below(self, log: Log, next_base: int, minid: Id) -> bool:
        """Whether every entry of the sealed segment before ``next_base`` has an id below
        ``minid``: from the next segment's header (its creation time is at least the newest
        timestamp before it: one pread), else from the segment's last record, read once and
        remembered (a sealed segment's last record never changes), so that an XADD with MINID
        that trims nothing costs a pread or a dict lookup."""
        end_ns = _segment_end_ns(REAL, log.path, next_base)
        if end_ns is not None and end_ns // 1_000_000 < minid[0]:
            return True
        key = (log.path, next_base)
        last = self._sealed_last.get(key)
        if last is None:
            try:
                reader = log.reader(next_base - 1)
            except PositionError:
                return False
            try:
                rec = reader.next(timeout=0)
            finally:
                reader.close()
            if rec is None:
                return False
            last = (rec.timestamp // 1_000_000, rec.lsn)
            with self._sealed_lock:  # (XADD's committer and XTRIM's pool threads share it)
                self._sealed_last[key] = last
                while len(self._sealed_last) > SEALED_LAST_MAX:
                    del self._sealed_last[next(iter(self._sealed_last))]
        return last < minid

    # --- reading ------------------------------------------------------------------------------
    def length(self, log: Log) -> int:
        info = log.info()
        return info.next_lsn - info.first_lsn

    def _reader_from(self, log: Log, start: Id) -> object:
        """A reader at or before the first record whose id is >= ``start``."""
        ms = start[0]
        if ms == 0:
            return log.reader("earliest")
        # One millisecond early: a float of seconds is not exact at this magnitude; the caller
        # filters by id anyway.
        return log.reader(since=max(ms - 1, 0) / 1000)

    def forward(
        self,
        log: Log,
        start: Id,
        start_excl: bool,
        end: Id,
        end_excl: bool,
        count: int,
        bytes_max: int = STREAM_REPLY_BYTES_MAX,
    ) -> list[Entry]:
        """Entries with ids from ``start`` to ``end`` in order, at most ``count``, with at most
        ``bytes_max`` bytes of payloads (one entry at least)."""
        out: list[Entry] = []
        size = 0
        reader = self._reader_from(log, start)
        try:
            for rec in reader:  # type: ignore[attr-defined]
                rid = (rec.timestamp // 1_000_000, rec.lsn)
                if rid < start or (start_excl and rid == start):
                    continue
                if rid > end or (end_excl and rid == end):
                    break
                size += len(rec.payload)
                if out and size > bytes_max:
                    break  # (the client goes on from the last id)
                out.append((format_id(rec.timestamp, rec.lsn), decode_fields(rec.payload)))
                if len(out) >= count:
                    break
        finally:
            reader.close()  # type: ignore[attr-defined]
        return out

    def backward(
        self, log: Log, end: Id, end_excl: bool, start: Id, start_excl: bool, count: int
    ) -> list[Entry]:
        """Entries with ids from ``end`` down to ``start``, newest first, at most ``count``: read
        forward in windows of lsns that go back from the end, each twice the last."""
        info = log.info()
        hi = info.next_lsn - 1
        if end[0] != ID_MAX:  # the last lsn at or before the end's millisecond
            probe = log.reader(since=(end[0] + 1) / 1000)
            try:
                first = next(iter(probe), None)
                # (a float's error here only moves the window: the records are filtered by id)
                hi = min(hi, first.lsn if first is not None else hi)
            finally:
                probe.close()
        out: list[Entry] = []
        out_size = 0  # payload bytes in ``out``
        window = max(count, 16)
        for _ in range(64):  # bounded: the window doubles each turn
            lo = max(info.first_lsn, hi - window + 1)
            if hi < lo:
                break
            # The chunk keeps its newest entries only: as many as the reply still takes, and no
            # more payload bytes than it still takes (one entry at least), so memory stays bounded.
            chunk: collections.deque[tuple[Entry, int]] = collections.deque()
            chunk_size = 0
            done = False
            try:
                reader = log.reader(lo)
            except PositionError:
                break  # retention removed it meanwhile
            try:
                for rec in reader:
                    if rec.lsn > hi:
                        break
                    rid = (rec.timestamp // 1_000_000, rec.lsn)
                    if rid > end or (end_excl and rid == end):
                        continue
                    if rid < start or (start_excl and rid == start):
                        done = True
                        continue
                    chunk.append(
                        ((format_id(rec.timestamp, rec.lsn), decode_fields(rec.payload)), len(rec.payload))
                    )
                    chunk_size += len(rec.payload)
                    while len(chunk) > 1 and (
                        len(out) + len(chunk) > count or out_size + chunk_size > STREAM_REPLY_BYTES_MAX
                    ):
                        chunk_size -= chunk.popleft()[1]
                        done = True  # (what it dropped is older than what it keeps: the reply ends here)
            finally:
                reader.close()
            if out and out_size + chunk_size > STREAM_REPLY_BYTES_MAX:
                break
            out += [entry for entry, _ in reversed(chunk)]
            out_size += chunk_size
            if len(out) >= count or done or lo <= info.first_lsn:
                break
            hi = lo - 1
            window *= 2
        return out[:count]

    def read_cursor(self, cursor: Cursor, count: int, bytes_max: int = STREAM_REPLY_BYTES_MAX) -> list[Entry]:
        """XREAD of one stream, not waiting: the entries after the cursor (at most ``count``, and
        at most ``bytes_max`` bytes of payloads, one entry at least)."""
        log = self.log(cursor.name, create=False)
        if log is None:
            return []
        if cursor.lsn is not None:
            try:
                reader = log.reader(cursor.lsn)
            except PositionError as err:
                if cursor.lsn < err.first_lsn:  # retention removed them: from the earliest
                    reader = log.reader("earliest")
                else:
                    return []
            out: list[Entry] = []
            size = 0
            try:
                for rec in reader:
                    size += len(rec.payload)
                    if out and size > bytes_max:
                        break  # (the client goes on from the last id)
                    out.append((format_id(rec.timestamp, rec.lsn), decode_fields(rec.payload)))
                    if len(out) >= count:
                        break
            finally:
                reader.close()
            return out
        assert cursor.after is not None
        return self.forward(log, cursor.after, True, (ID_MAX, ID_MAX), False, count, bytes_max)

    def last_lsn_cursor(self, name: str) -> Cursor:
        """``$``: the entries appended from now on."""
        log = self.log(name, create=False)
        return Cursor(name, lsn=0 if log is None else log.info().next_lsn)


# --- reading records by lsn (the consumer groups' reads) ---------------------------------------------
def read_after(reader: Reader, count: int, size_max: int) -> list[Record]:
    """Up to ``count`` records from the reader's position on, not waiting, with at most
    ``size_max`` bytes of payloads (but at least one record). The reader may be left past the
    last record returned (the caller seeks it)."""
    out: list[Record] = []
    size = 0
    for _ in range(count):
        rec = reader.next(timeout=0)
        if rec is None:
            break
        size += len(rec.payload)
        if out and size > size_max:
            break
        out.append((rec.lsn, rec.timestamp // 1_000_000, rec.payload))
    return out


def reader_at(log: Log, lsn: int, reader: Reader | None) -> Reader:
    """A reader at ``lsn`` (at the earliest record if retention removed it): ``reader`` moved
    there (closed if it cannot be), or a new one."""
    if reader is not None:
        try:
            if reader.position != lsn:
                reader.seek(lsn)
            return reader
        except PositionError:
            reader.close()
    try:
        return log.reader(lsn)
    except PositionError as err:
        if lsn >= err.first_lsn:
            raise
        return log.reader("earliest")


def read_lsns(log: Log, lsns: list[int]) -> dict[int, tuple[int, bytes]]:
    """The records at these lsns that the log still holds: lsn -> (ms, payload)."""
    return read_lsns_upto(log, lsns, None)[0]


def read_lsns_upto(
    log: Log, lsns: list[int], size_max: int | None
) -> tuple[dict[int, tuple[int, bytes]], int | None]:
    """As ``read_lsns``, in lsn order, stopping before the payloads read would pass ``size_max``
    bytes (after one at least). Also returns the first lsn not looked at (None: none was left)."""
    out: dict[int, tuple[int, bytes]] = {}
    reader = None
    size = 0
    try:
        for lsn in sorted(set(lsns)):
            try:
                if reader is None:
                    reader = log.reader(lsn)
                elif reader.position != lsn:
                    reader.seek(lsn)
            except PositionError:
                continue  # removed by retention (or past the end)
            rec = reader.next(timeout=0)
            if rec is not None and rec.lsn == lsn:
                size += len(rec.payload)
                if size_max is not None and out and size > size_max:
                    return out, lsn
                out[lsn] = (rec.timestamp // 1_000_000, rec.payload)
    finally:
        if reader is not None:
            reader.close()
    return out, None


def last_id(log: Log) -> tuple[Id, int]:
    """The id of the log's last record ((0, 0) if it holds none) and its next lsn."""
    next_lsn = log.info().next_lsn
    if next_lsn == 0:
        return (0, 0), 0
    found = read_lsns(log, [next_lsn - 1]).get(next_lsn - 1)
    return ((found[0], next_lsn - 1) if found is not None else (0, next_lsn - 1)), next_lsn


def lsn_after(log: Log, after: Id) -> int:
    """The lsn of the first record whose id is greater than ``after`` (ids order as lsns do), or
    the log's next lsn if there is none."""
    ms, seq = after
    if seq < (1 << 63):
        found = read_lsns(log, [seq]).get(seq)
        if found is not None and found[0] == ms:  # a record's own id: the one after it
            return seq + 1
    reader = log.reader("earliest") if ms == 0 else log.reader(since=max(ms - 1, 0) / 1000)
    try:
        for rec in reader:  # bounded by the log's end; stops at the first id past ``after``
            if (rec.timestamp // 1_000_000, rec.lsn) > after:
                return rec.lsn
        return reader.position
    finally:
        reader.close()


class _Watch:
    """What wakes the waiters of one directory (a log's, an op log's): an inotify watch on it, read
    by the event loop (no thread), or a timer where that cannot be had (or while it does not
    exist yet)."""

    def __init__(self, tails: Tails, name: str) -> None:
        self.fd = -1
        self.timer: asyncio.TimerHandle | None = None
        self.linger: asyncio.TimerHandle | None = None
        loop = tails.loop
        libc = _libc()
        path = os.path.join(tails.data, name)
        if libc is not None and os.path.isdir(path):
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(path), _MASK) >= 0:
                self.fd = fd
                loop.add_reader(fd, self._readable, tails, name)
            elif fd >= 0:
                os.close(fd)
        if self.fd < 0:
            self._poll(tails, name)

    def _readable(self, tails: Tails, name: str) -> None:
        for _ in range(64):  # bounded: drain what is queued
            try:
                if not os.read(self.fd, 65536):
                    break
            except (BlockingIOError, OSError):
                break
        tails.wake(name)

    def _poll(self, tails: Tails, name: str) -> None:
        tails.wake(name)
        self.timer = tails.loop.call_later(POLL_S, self._poll, tails, name)

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.fd >= 0:
            loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        if self.timer is not None:
            self.timer.cancel()
        if self.linger is not None:
            self.linger.cancel()


class Tails:
    """Blocked commands (XREAD BLOCK, GETJOB), by the directory they wait on (relative to the data
    directory: ``logs/NAME``, ``jobs/NAME/ops``). A waiter registers a future before it looks (so an append
    after the look wakes it: no race), then awaits it. Appends through this daemon wake at once
    (``wake_threadsafe``); appends by other processes through one inotify watch per log that has
    waiters. No thread is held by a waiter. Used on the event loop only (but ``wake_threadsafe``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, data: str) -> None:
        self.loop = loop
        self.data = data
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._watches: dict[str, _Watch] = {}

    def register(self, names: list[str]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self.loop.create_future()
        for name in names:
            self._waiters.setdefault(name, set()).add(fut)
            watch = self._watches.get(name)
            if watch is None:
                self._watches[name] = _Watch(self, name)
            elif watch.linger is not None:
                watch.linger.cancel()
                watch.linger = None
        return fut

    def unregister(self, names: list[str], fut: asyncio.Future[None]) -> None:
        for name in names:
            waiting = self._waiters.get(name)
            if waiting is None:
                continue
            waiting.discard(fut)
            if not waiting:
                del self._waiters[name]
                watch = self._watches.get(name)
                if watch is not None and watch.linger is None:
                    watch.linger = self.loop.call_later(WATCH_LINGER_S, self._drop, name)

    def _drop(self, name: str) -> None:
        if name in self._waiters:
            return
        watch = self._watches.pop(name, None)
        if watch is not None:
            watch.linger = None
            watch.close(self.loop)

    def wake(self, name: str) -> None:
        for fut in self._waiters.get(name, ()):
            if not fut.done():
                fut.set_result(None)

    def wake_threadsafe(self, names: set[str]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed (shutdown)
            for name in names:
                self.loop.call_soon_threadsafe(self.wake, name)

    def close(self) -> None:
        for watch in self._watches.values():
            watch.close(self.loop)
        self._watches.clear()
        for waiting in self._waiters.values():
            for fut in waiting:
                if not fut.done():
                    fut.cancel()
        self._waiters.clear()
