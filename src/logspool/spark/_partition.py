"""Reading one lsn range of one segment as Arrow record batches: what a Spark task runs.

Pure logspool and pyarrow (no Spark import), so it runs in Spark's Python workers and is tested
without a JVM. The driver plans ranges (``plan``); each task reads its range with one pass of the
segment parser from the nearest index entry, and builds columns, never per-row Python objects
beyond the parser's own.
"""

from __future__ import annotations

import bisect
import itertools
import json
import operator
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import _format as fmt
from .. import _segment as seg
from .. import limits
from ..errors import CorruptionError, LogspoolError
from ..log import Log
from ..log._directory import list_segments

BATCH_ROWS = 65_536  # rows per Arrow record batch handed to Spark (fewer handoffs to the JVM)
META_COLUMNS = ("lsn", "timestamp", "segment", "offset")


@dataclass(frozen=True, slots=True)
class Range:
    """lsns ``start`` (inclusive) to ``end`` (exclusive), all in segment ``segment``."""

    path: str
    segment: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Shares:
    """How Spark splits files into tasks (``FilePartition.maxSplitBytes``), for a planner that
    knows the session: a span is cut into one share of its bytes a core (``parallelism``), each
    at least ``floor`` bytes (``spark.sql.files.openCostInBytes``: a task's own cost, counted
    once a segment in the bytes shared, as Spark counts it once a file) and at most the
    partition size; a range never crosses a segment, and the JVM reader packs small ranges into a
    task as Spark packs small files (``plan_sized``). A backlog of 139 MB in three segments (the
    last small) on 2 cores: 2 tasks rather than 7 of 32 MiB (benchmarks/RESULTS.md)."""

    parallelism: int
    floor: int

    def size(self, total: int, partition_size: int) -> int:
        """The bytes one task reads for spans of ``total`` bytes (their open costs included)."""
        return min(partition_size, max(self.floor, -(-total // max(1, self.parallelism))))


def plan(log: Log, start: int, end: int, partition_size: int, shares: Shares | None = None) -> list[Range]:
    """Split lsns [start, end) into ranges of one segment each, and segments larger than
    ``partition_size`` bytes further at index entries (each about ``partition_size`` bytes), or
    than one share a core of the span's bytes if ``shares`` is given (``Shares``)."""
    return [r for r, _ in _cut(log, start, end, partition_size, shares)[0]]


def plan_sized(
    log: Log, start: int, end: int, partition_size: int, shares: Shares
) -> list[tuple[Range, int]]:
    """``plan``'s ranges with about how many bytes each holds, for a planner that packs small
    ranges into one task as Spark packs small files (the JVM reader: ``Ranges.pack``, after it
    cut the ranges to the filters Spark pushed)."""
    return _cut(log, start, end, partition_size, shares)[0]


def _cut(
    log: Log, start: int, end: int, partition_size: int, shares: Shares | None
) -> tuple[list[tuple[Range, int]], int]:
    """``plan``'s ranges, each with about how many bytes it holds (0 without ``shares``), and
    the bytes a task reads (``partition_size``, or one share of the span's if ``shares``)."""
    if start >= end:
        return [], partition_size
    bases = list_segments(log._fs, log.path)
    spans: list[tuple[int, int, int, Entries, _Offsets | None]] = []  # (segment, lo, hi, index, offsets)
    total = 0
    for n, base in enumerate(bases):
        seg_end = bases[n + 1] if n + 1 < len(bases) else end
        lo, hi = max(start, base), min(end, seg_end)
        if lo < hi:
            entries = _index_entries(log.path, base)
            offsets = None
            if shares is not None:
                sealed_end = seg_end if n + 1 < len(bases) else None  # (its file ends with its records)
                offsets = _Offsets(log.path, base, entries, sealed_end)
                total += shares.floor + offsets.between(lo, hi)
            spans.append((base, lo, hi, entries, offsets))
    if shares is not None:
        partition_size = shares.size(total, partition_size)
    out: list[tuple[Range, int]] = []
    for base, lo, hi, entries, offsets in spans:
        cuts = [lo]
        last_offset = 0
        for entry in entries:
            if entry.lsn <= lo or entry.lsn >= hi:
                if entry.lsn <= lo:
                    last_offset = entry.offset
                continue
            if entry.offset - last_offset >= partition_size:
                cuts.append(entry.lsn)
                last_offset = entry.offset
        cuts.append(hi)
        out += [
            (Range(log.path, base, a, b), 0 if offsets is None else offsets.between(a, b))
            for a, b in itertools.pairwise(cuts)
            if a < b
        ]
    return out, partition_size


class _Offsets:
    """Where the records of segment ``base`` lie, about: each lsn's offset placed between the
    known points around it (the segment's first record, its index entries, and the end of a
    sealed segment, lsn ``sealed_end`` at its file's size), as if the records between two
    points were of one size; past the last point, of the size of the records before it (a
    segment without an entry: of the least a record takes)."""

    def __init__(self, path: str, base: int, entries: Entries, sealed_end: int | None) -> None:
        self.lsns = [base] + [e.lsn for e in entries if e.lsn > base]
        self.offsets = [fmt.SEGMENT_HEADER_SIZE] + [e.offset for e in entries if e.lsn > base]
        if sealed_end is not None and sealed_end > self.lsns[-1]:
            try:
                size = os.path.getsize(os.path.join(path, fmt.segment_name(base)))
            except OSError:
                size = 0
            if size > self.offsets[-1]:
                self.lsns.append(sealed_end)
                self.offsets.append(size)

    def at(self, lsn: int) -> float:
        lsns, offsets = self.lsns, self.offsets
        i = bisect.bisect_right(lsns, lsn) - 1  # the last point at or before it (lsn >= base)
        if i + 1 < len(lsns):  # between it and the next
            a, b = i, i + 1
        elif i > 0:  # past the last: as the records before it
            a, b = i - 1, i
        else:
            return offsets[0] + (lsn - lsns[0]) * fmt.RECORD_OVERHEAD
        return offsets[i] + (lsn - lsns[i]) * (offsets[b] - offsets[a]) / (lsns[b] - lsns[a])

    def between(self, lo: int, hi: int) -> int:
        """About how many bytes lsns [lo, hi) hold."""
        return max(0, int(self.at(hi) - self.at(lo)))


Entries = tuple[fmt.IndexEntry, ...]
# The index entries last decoded from each segment's index file, with the file's bytes then:
# (path, segment) -> (bytes, entries). A plan reads each index twice (its cuts, then where each
# range starts) and a stream's every micro-batch again; decoding them (a checksum and an object
# an entry) was most of a micro-batch's planning: 11 of 14 ms for 1,000,000 records, where
# comparing the bytes takes microseconds. Bounded by the index bytes kept (the oldest forgotten
# first; an entry's objects take about five times its 32 bytes: ~24 MiB in all at most). The
# planner's Py4J callbacks may run on several threads at once: under ``_DECODED_LOCK``.
_DECODED: dict[tuple[str, int], tuple[bytes, Entries]] = {}
_DECODED_BYTES_MAX = 4 * limits.MIB
_DECODED_LOCK = threading.Lock()
_decoded_bytes = 0  # the index bytes ``_DECODED`` holds (under the lock)


def _index_entries(path: str, base: int) -> Entries:
    """The segment's index entries, or none if the index is missing or damaged (derived data).
    The same bytes as last time: the entries decoded then."""
    global _decoded_bytes
    key = (path, base)
    try:
        with open(os.path.join(path, fmt.index_name(base)), "rb") as f:
            raw = f.read(limits.SEGMENT_SIZE_LIMIT)
        with _DECODED_LOCK:
            known = _DECODED.get(key)
        if known is not None and known[0] == raw:
            return known[1]
        if fmt.decode_index_header(raw, fmt.index_name(base))[0] != base:
            return ()
        entries = tuple(fmt.decode_index_entries(raw))
    except (OSError, ValueError, CorruptionError):
        return ()
    if len(raw) <= _DECODED_BYTES_MAX:
        with _DECODED_LOCK:
            old = _DECODED.pop(key, None)
            if old is not None:
                _decoded_bytes -= len(old[0])
            while _DECODED and _decoded_bytes + len(raw) > _DECODED_BYTES_MAX:  # bounded: one a turn
                _decoded_bytes -= len(_DECODED.pop(next(iter(_DECODED)))[0])
            _DECODED[key] = (raw, entries)
            _decoded_bytes += len(raw)
    return entries


def start_point(r: Range) -> tuple[int, int]:
    """(offset, lsn): where to start parsing to reach ``r.start``: the last index entry at or
    before it, or the segment's first record."""
    return _start_in(_index_entries(r.path, r.segment), r)


def start_points(ranges: list[Range]) -> list[tuple[int, int]]:
    """``start_point`` of each range, each segment's index read once (the driver's plan of a
    large segment holds several ranges of it: its index read again for each was most of a
    micro-batch's planning)."""
    read: dict[tuple[str, int], Entries] = {}
    out = []
    for r in ranges:
        entries = read.get((r.path, r.segment))
        if entries is None:
            entries = read[(r.path, r.segment)] = _index_entries(r.path, r.segment)
        out.append(_start_in(entries, r))
    return out


def _start_in(entries: Entries, r: Range) -> tuple[int, int]:
    # (entries by lsn: the last at or before r.start, found by bisection)
    at = bisect.bisect_right(entries, r.start, key=_LSN_OF) - 1
    if at >= 0:
        return entries[at].offset, entries[at].lsn
    return fmt.SEGMENT_HEADER_SIZE, r.segment


_LSN_OF = operator.attrgetter("lsn")


def read_range(r: Range, size_max: int, verify_checksums: bool) -> Iterator[tuple[list[Any], ...]]:
    """Yield column lists (lsn, timestamp_ns, payload, offset) of up to BATCH_ROWS rows each, for
    every record of ``r``. Raises CorruptionError (file and offset) if the range cannot be read
    whole: records the driver saw when it planned do not vanish, except by damage or repair."""
    spath = os.path.join(r.path, fmt.segment_name(r.segment))
    pos, lsn = start_point(r)
    lsns: list[int] = []
    stamps: list[int] = []
    payloads: list[bytes] = []
    offsets: list[int] = []
    need = 0
    try:
        f = open(spath, "rb", buffering=0)  # noqa: SIM115 (closed by the with below)
    except FileNotFoundError:
        if os.path.exists(os.path.join(r.path, fmt.META_NAME)):  # the log is here: the segment went
            raise LogspoolError(
                f"{spath}: the segment was removed (retention) after the read was planned"
            ) from None
        raise LogspoolError(
            f"{spath}: this task cannot see the log the driver planned the read of: the log must be on "
            "a file system the driver and every executor mount at the same path"
        ) from None
    with f:
        for _ in range(1 << 30):  # bounded: each turn moves on by a chunk, or ends
            if lsn >= r.end:
                break
            f.seek(pos)
            data = f.read(max(limits.READ_CHUNK_SIZE, need))
            out: list[fmt.Record] = []
            infos: list[seg.RecordInfo] = []
            stop = seg.parse(data, 0, lsn, size_max, out, infos, pos, None, verify_checksums)
            for rec, info in zip(out, infos, strict=True):
                if r.start <= rec.lsn < r.end:
                    lsns.append(rec.lsn)
                    stamps.append(rec.timestamp)
                    payloads.append(rec.payload)
                    offsets.append(info.offset)
            if len(lsns) >= BATCH_ROWS:
                yield lsns, stamps, payloads, offsets
                lsns, stamps, payloads, offsets = [], [], [], []
            need = 0
            if stop.pos > pos or stop.lsn > lsn:
                pos, lsn = stop.pos, stop.lsn
                continue
            if stop.kind == seg.INCOMPLETE and stop.need > len(data):
                need = stop.need  # a record larger than one chunk
                continue
            if stop.kind in (seg.TORN, seg.BAD) or lsn < r.end:
                raise CorruptionError(
                    spath, stop.pos, stop.reason or f"lsn {lsn} expected before lsn {r.end} ({stop.kind})"
                )
        else:
            raise AssertionError(f"{spath}: 2^30 chunks read and the range goes on")
    if lsns:
        yield lsns, stamps, payloads, offsets


def decode_json(payloads: list[bytes], fields: list[str], converters: dict[str, Any]) -> list[list[Any]]:
    """One list per field: each payload's value for it (null when missing or not an object)."""
    columns: list[list[Any]] = [[] for _ in fields]
    for raw in payloads:
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            obj = {}
        for column, name in zip(columns, fields, strict=True):
            value = obj.get(name)
            convert = converters.get(name)
            column.append(convert(value) if convert is not None and value is not None else value)
    return columns


def iso_to_datetime(value: Any) -> datetime | None:
    """A JSON timestamp (RFC 3339 text, or epoch seconds) as an aware datetime, or None."""
    from datetime import UTC

    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return None
