"""One segment file: parsing its records, and the recovery rule for a damaged tail.

A segment is ``header | record | record | ... [| seal]`` (docs/FORMAT.md §3-4). This module parses
records out of bytes already read; it does no I/O of its own, so readers, the writer's catch-up,
recovery and verify all share one parser. Judging damage (§9) needs the bytes from the damage to
the end of the file, which may be a 4 GiB unpublished batch: the caller passes a ``Read`` instead,
and the judgment reads them a chunk (``SCAN_CHUNK``) at a time, in memory for a few chunks.

The parser stops at the first thing that is not a complete, valid record and says why:

    END         the bytes ended exactly at a record boundary
    INCOMPLETE  a record starts but its bytes are not all there (being written, or torn)
    ZERO        an all-zero header: a zero-filled tail, which a crash can leave
    SEAL        a seal record: the segment is closed; ``next_lsn`` names the next segment
    TORN        a checksum mismatch: torn by a crash or corrupt, the recovery rule decides which
    BAD         a record whose checksum is right but which breaks an invariant (lsn, flags, size):
                never a crash state, always corruption

Two kinds of valid record are not plain (format version 2), and the parser goes on past them:
a compressed record (FLAG_ZSTD) is decompressed when its payload is wanted, and a gap record
(FLAG_GAP, written by repair in place of quarantined records) moves the expected lsn on and is
reported in ``gaps``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from . import _codec, limits
from ._format import (
    CRC_RESIDUE,
    FLAG_GAP,
    FLAG_SEAL,
    FLAG_ZSTD,
    FLAGS_KNOWN,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    RECORD_OVERHEAD,
    SEGMENT_HEADER_SIZE,
    Gap,
    Record,
    crc32,
    decode_gap,
    encode_index_entry,
    encode_index_header,
)
from .errors import CorruptionError

END = "end"
INCOMPLETE = "incomplete"
ZERO = "zero"
SEAL = "seal"
TORN = "torn"
BAD = "bad"
_GAP = "gap"  # internal to parse: a valid gap record

_ZERO_HEADER = bytes(RECORD_HEADER_SIZE)
_CRC = struct.Struct("<I")

# A segment file's bytes: read(offset, count) returns ``count`` bytes from ``offset`` (fewer at
# the end of the file). The functions that judge damage read through it a chunk at a time.
Read = Callable[[int, int], bytes]
# What judging damage reads at once (unless a record is longer): its memory is a few of these,
# whatever the size of the bytes after the damage (FORMAT.md §9: "in chunks").
SCAN_CHUNK = 1 << 20
# The search (FORMAT.md §9.3) examines at most this many offsets of each lsn it looks for.
_TRIES_MAX = 1024


class Stop(NamedTuple):
    """Where and why a parse stopped. ``pos`` is the offset of the record not taken."""

    kind: str
    pos: int
    lsn: int  # the lsn the next record should carry
    reason: str = ""
    next_lsn: int = -1  # for SEAL: the base lsn of the next segment
    need: int = 0  # for INCOMPLETE: bytes the record needs in all, when its header was read


class RecordInfo(NamedTuple):
    """What recovery, catch-up and verify need to know of each record."""

    offset: int
    lsn: int
    timestamp: int
    durable_lsn: int
    size: int  # bytes on disk, overhead included


def parse(
    buf: bytes,
    pos: int,
    lsn: int,
    size_max: int,
    out: list[Record] | None,
    infos: list[RecordInfo] | None = None,
    base: int = 0,
    gaps: list[Gap] | None = None,
    check: bool = True,
) -> Stop:
    """Parse records from ``buf[pos:]``, expecting the first to carry ``lsn``.

    Appends a Record per valid record to ``out`` and, if given, a RecordInfo to ``infos``
    (offsets there are ``base + position in buf``, so a chunk can stand for a file region), and
    a Gap per gap record to ``gaps``. ``check=False`` skips the checksums of plain records (only
    for a caller that asked to trust the bytes: the Spark source's ``verifyChecksums=false``).
    ``size_max`` bounds the payload size believed from a length
    field, and the size of a decompressed payload.

    This loop is the hot path of every reader. A plain record passes one test: the checksum
    residue (see ``_format.CRC_RESIDUE``) and the header fields, checked together; anything else
    goes to ``_stop_at``, which says what it is. Each record costs one unpack, one CRC over one
    slice, one payload slice and one tuple.
    """
    unpack_header = RECORD_HEADER.unpack_from
    make = tuple.__new__
    unzstd = None
    end = len(buf)
    last = end - RECORD_HEADER_SIZE
    while pos <= last:  # bounded: each turn consumes a record of at least RECORD_OVERHEAD bytes
        length, flags, rlsn, ts, durable = unpack_header(buf, pos)
        rec_end = pos + RECORD_OVERHEAD + length
        if (
            length <= size_max
            and rec_end <= end
            and rlsn == lsn
            and (not check or crc32(buf[pos:rec_end]) == CRC_RESIDUE)
            and (not flags or flags == FLAG_ZSTD)
        ):
            if out is not None:
                payload = buf[pos + RECORD_HEADER_SIZE : rec_end - 4]
                if flags:  # a compressed record (format version 2)
                    if unzstd is None:
                        unzstd = _codec.decompressor(size_max)
                    try:
                        payload = unzstd(payload)
                    except ValueError as err:
                        return Stop(BAD, base + pos, lsn, f"compressed record at lsn {lsn}: {err}")
                out.append(make(Record, (rlsn, ts, payload)))
            if infos is not None:
                infos.append(RecordInfo(base + pos, rlsn, ts, durable, rec_end - pos))
            lsn += 1
            pos = rec_end
            continue
        stop = _stop_at(buf, pos, lsn, size_max, base)
        if stop.kind == _GAP:
            if gaps is not None:
                gaps.append(Gap(lsn, stop.next_lsn, stop.reason))
            lsn = stop.next_lsn
            pos = rec_end
            continue
        return stop
    if pos == end:
        return Stop(END, base + pos, lsn)
    if not any(memoryview(buf)[pos:end]):
        return Stop(ZERO, base + pos, lsn)
    return Stop(INCOMPLETE, base + pos, lsn)


def _stop_at(buf: bytes, pos: int, lsn: int, size_max: int, base: int) -> Stop:
    """Why the record at ``pos`` (a whole header is there) is not a plain valid record."""
    length, flags, rlsn, _ts, _durable = RECORD_HEADER.unpack_from(buf, pos)
    rec_end = pos + RECORD_OVERHEAD + length
    zero_header = buf[pos : pos + RECORD_HEADER_SIZE] == _ZERO_HEADER
    if length > size_max:
        if zero_header:
            return Stop(ZERO, base + pos, lsn)
        return Stop(TORN, base + pos, lsn, f"record length {length} exceeds the limit {size_max}")
    if rec_end > len(buf):
        if length == 0 and zero_header:
            return Stop(ZERO, base + pos, lsn)
        return Stop(INCOMPLETE, base + pos, lsn, need=RECORD_OVERHEAD + length)
    crc_at = rec_end - 4
    (found,) = _CRC.unpack_from(buf, crc_at)
    expected = crc32(buf[pos:crc_at])
    if found != expected:
        if zero_header:
            return Stop(ZERO, base + pos, lsn)
        return Stop(
            TORN,
            base + pos,
            lsn,
            f"checksum mismatch (expected 0x{expected:08x}, found 0x{found:08x})",
        )
    if rlsn != lsn:
        return Stop(BAD, base + pos, lsn, f"record has lsn {rlsn}, expected {lsn}")
    if flags & ~FLAGS_KNOWN:  # (a valid compressed record never gets here: parse takes it)
        return Stop(BAD, base + pos, lsn, f"unknown record flags 0x{flags:08x}")
    if flags == FLAG_SEAL:
        if length:
            return Stop(BAD, base + pos, lsn, "seal record with a payload")
        return Stop(SEAL, base + pos, lsn, next_lsn=rlsn)
    if flags == FLAG_GAP:
        next_lsn, note = decode_gap(rlsn, buf[pos + RECORD_HEADER_SIZE : crc_at])
        if next_lsn <= rlsn:
            return Stop(BAD, base + pos, lsn, f"gap record from lsn {rlsn} to {next_lsn} goes back")
        why = f"quarantined by repair ({note})" if note else "quarantined by repair"
        return Stop(_GAP, base + pos, lsn, why, next_lsn=next_lsn)
    return Stop(BAD, base + pos, lsn, f"record flags 0x{flags:08x} combine exclusive flags")
    raise AssertionError(f"record at {base + pos} is valid but was not taken")


def zeros_from(buf: bytes, pos: int) -> bool:
    """Whether every byte of ``buf`` from ``pos`` on is zero: after the records of an active
    segment, the space its writer preallocated (or a zero-filled tail a crash left; either way
    no record, and nothing to cut)."""
    return buf.count(0, pos) == len(buf) - pos


def index_bytes(data: bytes, end: int, base: int, size_max: int, interval: int) -> bytes:
    """The index file a segment's records imply (docs/FORMAT.md §5.2), byte for byte: ``data`` holds
    the segment from offset 0, and its records up to ``end`` are indexed."""
    infos: list[RecordInfo] = []
    parse(data[:end], SEGMENT_HEADER_SIZE, base, size_max, None, infos)
    return index_bytes_of(infos, base, interval)


def index_bytes_of(infos: list[RecordInfo], base: int, interval: int) -> bytes:
    """The index file of a segment whose records are ``infos`` (in order, from its first)."""
    out = bytearray(encode_index_header(base, interval))
    due = 0
    for info in infos:
        if info.offset >= due:
            out += encode_index_entry(info.lsn, info.timestamp, info.offset)
            due = (info.offset // interval + 1) * interval
    return bytes(out)


def find_resume(data: bytes, pos: int, lsn: int, size_max: int, lsns_max: int) -> tuple[int, int] | None:
    """The first valid record (or seal, or gap) after damage at ``pos`` where lsn ``lsn`` was
    expected: (its offset, its lsn), looking for lsns lsn+1 .. lsn+lsns_max by the 8 bytes each
    must carry at offset 8 of its header. None if there is none.

    Lsns grow along a segment, so the first lsn found is also the earliest record; a record is
    taken only if it parses whole and valid, so a payload that happens to hold the bytes of an
    lsn does not fool it.
    """
    for later in range(lsn + 1, lsn + 1 + lsns_max):
        needle = later.to_bytes(8, "little")
        at = data.find(needle, pos + RECORD_OVERHEAD + 8)
        while at >= 0:  # bounded: each turn moves past one occurrence
            start = at - 8
            infos: list[RecordInfo] = []
            gaps: list[Gap] = []
            stop = parse(data, start, later, size_max, None, infos, 0, gaps)
            if infos or gaps or stop.kind == SEAL:
                return start, later
            at = data.find(needle, at + 1)
    return None


def durable_proof_after(buf: bytes, pos: int, lsn: int, size_max: int) -> int:
    """``durable_proof_in`` over bytes already read: ``buf`` holds the file from offset 0."""
    return durable_proof_in(_reader_of(buf, 0), len(buf), pos, lsn, size_max)


def durable_proof_in(
    read: Read, size: int, pos: int, lsn: int, size_max: int, chunk: int = SCAN_CHUNK
) -> int:
    """The highest durable_lsn carried by valid records found after a damaged record at ``pos``
    of a file of ``size`` bytes, read through ``read`` (docs/FORMAT.md §9.3, the search).

    The record at ``pos`` (which should carry ``lsn``) is damaged and its length cannot be trusted,
    so we look for the next records by the lsn they must carry: lsn+1, lsn+2, ... (at most
    RECOVERY_RESYNC_LSNS), whose 8 bytes stand at offset 8 of a record header: for each lsn, its
    first 1024 occurrences after ``pos`` in file order. From the first candidate that parses as a
    valid record (or a seal) we parse on to the first record that is not valid. Returns -1 if
    nothing valid follows (else at least 0).

    Memory: two chunks (or a record, if longer) and at most 1024 offsets for each lsn looked
    for, whatever the size of the file after ``pos``: a 4 GiB unpublished batch is judged in
    reads of ``chunk`` bytes (before issue 28's review it was read whole, three times its size
    in memory). One pass over the file finds the occurrences of every lsn; the first lsn's
    candidates are tried as they are found, so the usual case, a valid record right after the
    damage, reads little more than the records it parses.
    """
    needles = [m.to_bytes(8, "little") for m in range(lsn + 1, lsn + 1 + limits.RECOVERY_RESYNC_LSNS)]
    hits: list[list[int]] = [[] for _ in needles]  # offsets of each needle, in file order
    tried = 0  # how many of the first lsn's hits were tried
    for window in range(pos + 1, size, chunk):  # bounded by the size
        data = read(window, min(chunk + 7, size - window))  # (7: a needle across the boundary)
        limit = window + chunk  # a needle starting there or later is the next window's
        for needle, found in zip(needles, hits, strict=True):
            at = data.find(needle)
            while at >= 0 and window + at < limit and len(found) < _TRIES_MAX:  # bounded
                found.append(window + at)
                at = data.find(needle, at + 1)
        del data
        for at in hits[0][tried:]:
            tried += 1
            proof = _proof_from(read, size, pos, at - 8, lsn + 1, size_max, chunk)
            if proof >= 0:
                return proof
    for k in range(1, len(needles)):
        for at in hits[k]:
            proof = _proof_from(read, size, pos, at - 8, lsn + 1 + k, size_max, chunk)
            if proof >= 0:
                return proof
    return -1


def _proof_from(read: Read, size: int, pos: int, start: int, lsn: int, size_max: int, chunk: int) -> int:
    """A candidate of the search at ``start`` for ``lsn``: the highest durable_lsn of the valid
    records parsed from there (0 if none but a seal is there), or -1 if it is not accepted."""
    if start <= pos:
        return -1  # (the needle lies in the damaged record's own header: not a candidate)
    found, durable, stop = parse_in(read, size, start, lsn, size_max, chunk)
    return durable if found or stop.kind == SEAL else -1


def parse_in(
    read: Read, size: int, pos: int, lsn: int, size_max: int, chunk: int = SCAN_CHUNK
) -> tuple[bool, int, Stop]:
    """``parse`` over the file's bytes from ``pos`` to ``size``, as if they were one buffer, in
    reads of ``chunk`` bytes (or a record's length, if longer). Returns whether a plain or
    compressed record was valid, the largest durable_lsn among them (0 if none), and the stop.

    A stop decided by bytes past the end of a read (the end of the read itself, a record that
    runs past it) is parsed again from there with the bytes that follow: ``parse`` is a walk
    from record to record, so the result is the one-buffer result exactly."""
    found, durable = False, 0
    want = chunk
    infos: list[RecordInfo] = []
    for _ in range(2 * (size - pos) + 2):  # bounded: a record parsed, or a longer read, per turn
        asked = min(want, size - pos)
        data = read(pos, asked)
        stop = parse(data, 0, lsn, size_max, None, infos, pos)
        if infos:
            found = True
            durable = max(durable, max(info.durable_lsn for info in infos))
            infos.clear()
        need = _bytes_needed(data, stop.pos - pos, size_max)
        if len(data) < asked or pos + len(data) >= size or not need:
            return found, durable, stop
        want = max(chunk, need)
        pos, lsn = stop.pos, stop.lsn
    raise AssertionError(f"parse from offset {pos} did not end")


def _bytes_needed(data: bytes, at: int, size_max: int) -> int:
    """0 if what ``parse`` decided at ``data[at:]`` depends on those bytes only; else how many
    bytes from ``at`` it needs: a record header, or the whole record its length field names."""
    if at + RECORD_HEADER_SIZE > len(data):
        return RECORD_HEADER_SIZE
    length = int.from_bytes(data[at : at + 4], "little")
    if length > size_max:
        return 0  # (TORN whatever follows)
    need = RECORD_OVERHEAD + length
    return need if at + need > len(data) else 0


def _reader_of(buf: bytes, base: int) -> Read:
    """A ``Read`` over ``buf``, which holds a file's bytes from offset ``base``."""
    return lambda offset, size: buf[offset - base : offset - base + size]


def unpublished_batch_head(buf: bytes, pos: int, lsn: int, size_max: int) -> bool:
    """Whether ``buf[pos:]`` starts with the first record of a batch that its writer had not
    published (docs/FORMAT.md §7.1): the record is whole, carries ``lsn``, is plain or
    compressed, and each byte of its stored CRC is either the right one or its complement, not
    all of them right. A writer stores the complement, writes the rest of the batch, fsyncs,
    and then writes the right CRC; a publish torn across a page boundary leaves a mix of the
    two. (Damage that makes exactly such a CRC has odds near 2^-28.)"""
    if pos < 0 or pos + RECORD_HEADER_SIZE > len(buf):
        return False
    length, flags, rlsn, _ts, _durable = RECORD_HEADER.unpack_from(buf, pos)
    crc_at = pos + RECORD_HEADER_SIZE + length
    if length > size_max or crc_at + 4 > len(buf) or rlsn != lsn or flags not in (0, FLAG_ZSTD):
        return False
    right = _CRC.pack(crc32(buf[pos:crc_at]))
    stored = buf[crc_at : crc_at + 4]
    if stored == right:
        return False
    return all(s == r or s == r ^ 0xFF for s, r in zip(stored, right, strict=True))


def unpublished_batch_head_in(read: Read, size: int, pos: int, lsn: int, size_max: int) -> bool:
    """``unpublished_batch_head`` for the record at ``pos`` of a file of ``size`` bytes: reads
    the record only (its header, then as much as its length says, at most ``size_max``)."""
    head = read(pos, min(RECORD_HEADER_SIZE, size - pos))
    if len(head) < RECORD_HEADER_SIZE:
        return False
    length = int.from_bytes(head[:4], "little")
    if length > size_max:
        return False
    return unpublished_batch_head(read(pos, min(RECORD_OVERHEAD + length, size - pos)), 0, lsn, size_max)


def judge_damage(
    path: str,
    buf: bytes,
    stop: Stop,
    durable_known: int,
    size_max: int,
    base: int,
    *,
    proven_end: int = 0,
    same_boot: bool = False,
) -> int:
    """``judge_damage_in`` over bytes already read: ``buf`` holds the segment's bytes from file
    offset ``base`` to its end (repair and verify, which hold the segment whole)."""
    return judge_damage_in(
        path,
        _reader_of(buf, base),
        base + len(buf),
        stop,
        durable_known,
        size_max,
        proven_end=proven_end,
        same_boot=same_boot,
    )


def judge_damage_in(
    path: str,
    read: Read,
    size: int,
    stop: Stop,
    durable_known: int,
    size_max: int,
    *,
    proven_end: int = 0,
    same_boot: bool = False,
    chunk: int = SCAN_CHUNK,
) -> int:
    """Decide whether the damage at ``stop`` is a crash state to cut, or corruption to report.

    Returns the offset to truncate the segment at; raises CorruptionError for corruption.
    ``read(offset, count)`` returns the segment's bytes there, and ``size`` is its size: the
    bytes from the damage to the end are read ``chunk`` bytes at a time (or a record, if longer),
    so the memory it takes does not grow with them (a 4 GiB unpublished batch included).
    ``durable_known`` is the highest durable_lsn known from the records before the damage (and
    from this process's own fsyncs). ``proven_end``: the offset below which the sync mark proves
    every byte fsynced (0: none). ``same_boot``: the bytes were written in the running boot of
    the machine (a process crash, not a power loss, is all that can have happened to them).

    The rule (docs/FORMAT.md §9): a record is proven acknowledged if it lies below the sync
    mark, or below a durable_lsn carried by a valid record before or after it; no crash may lose
    it, so damage to it is corruption. Within the boot that wrote them, the page cache keeps
    every byte written: a crash of a process leaves at most one torn write at the end, never a
    damaged record followed by valid ones, so that too is corruption. Anything else was never
    proven durable, and a crash may leave it torn, zero-filled or half-written: cut it, with
    everything after it (the caller keeps a copy of any non-zero bytes it cuts). The first record
    of a batch its writer had not published (``unpublished_batch_head``) is cut whatever valid
    records follow it: they are that batch's, written before it was to be made valid.
    """
    if stop.kind == BAD:
        raise CorruptionError(path, stop.pos, stop.reason)
    if stop.kind in (END, SEAL):
        raise AssertionError(f"judge_damage called on a clean stop {stop.kind}")
    why = stop.reason or stop.kind
    if stop.pos < proven_end:
        raise CorruptionError(
            path,
            stop.pos,
            f"{why} at lsn {stop.lsn}, below offset {min(proven_end, size)} that the "
            "sync mark proves fsynced: an acknowledged record is damaged",
        )
    if durable_known > stop.lsn:
        raise CorruptionError(path, stop.pos, f"{why} in a record fsynced before (lsn {stop.lsn})")
    later = durable_proof_in(read, size, stop.pos, stop.lsn, size_max, chunk)
    if later > stop.lsn:
        raise CorruptionError(
            path, stop.pos, f"{why} at lsn {stop.lsn}, and a later record proves it was fsynced"
        )
    if unpublished_batch_head_in(read, size, stop.pos, stop.lsn, size_max):
        # A batch its writer had not published yet (docs/FORMAT.md §7.1): the whole batch was
        # written after this record, which was to be made valid last. Never acknowledged and
        # never readable: a crash state, whatever follows it, in this boot or after a reboot.
        return stop.pos
    if same_boot and later >= 0:
        raise CorruptionError(
            path,
            stop.pos,
            f"{why} at lsn {stop.lsn}, followed by valid records: no crash within a boot leaves "
            "that, so the record was damaged after it was written",
        )
    return stop.pos
