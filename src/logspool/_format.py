"""Byte layouts of every on-disk structure, with encode and decode. Pure: no I/O.

docs/FORMAT.md is the specification; this module is its implementation and must agree with it
byte for byte (tests/golden decodes the document's test vectors with this code).

Longer than 600 lines on purpose: every layout of the document (segment header, record, seal,
gap, index, meta, checkpoint, sync file, undo log) sits here side by side, read against the one
document and sharing its pieces (the CRC, the record header); split by file kind, a change to a
shared piece would be made in several places.

Invariants (checked at import, below):
- Every integer is little-endian, unsigned, at a fixed offset. Nothing is a native struct dump.
- A record is ``length | flags | lsn | timestamp | durable_lsn | payload | crc``: a length prefix,
  so plain sequential code can walk a segment, and a trailing CRC-32 over every byte before it, so
  a torn write (which loses the end first) fails the check.
- An all-zero record header is never a valid record: a zero-filled tail is a legal crash state
  (the file system extended the file but never wrote the data) and must read as "no record".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import limits
from .errors import CorruptionError, UnsupportedVersionError

# The format version this code implements: it reads every file of this version or older.
# Version 2 added record compression (FLAG_ZSTD; the meta keys "compression" and
# "compression_level") and gap records left by repair (FLAG_GAP). Each file carries the lowest
# version that can hold what it holds, so a log that uses nothing new stays readable by version-1
# code (docs/FORMAT.md §11): segments and meta of a compressed log are version 2, a segment repair
# wrote a gap into becomes version 2, and everything else stays version 1.
FORMAT_VERSION = 2
VERSION_1 = 1
VERSION_2 = 2

crc32 = zlib.crc32  # CRC-32/ISO-HDLC (poly 0x04C11DB7 reflected, init/xorout 0xFFFFFFFF)
CRC_CHECK_VALUE = 0xCBF43926  # crc32(b"123456789"), the catalogue check value

# --- record -------------------------------------------------------------------------------------
RECORD_HEADER = struct.Struct("<IIQQQ")  # length, flags, lsn, timestamp_ns, durable_lsn
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 32
RECORD_TRAILER = struct.Struct("<I")  # crc32 of header and payload
# The CRC-32 of any bytes followed by their own CRC-32 (little-endian) is this constant, so a
# reader checks a whole record, trailer included, with one crc32 call (docs/FORMAT.md §4).
CRC_RESIDUE = 0x2144DF1C
RECORD_TRAILER_SIZE = RECORD_TRAILER.size  # 4
RECORD_OVERHEAD = RECORD_HEADER_SIZE + RECORD_TRAILER_SIZE  # 36

FLAG_SEAL = 0x1  # the segment ends here; lsn is the base lsn of the next segment; no payload
FLAG_GAP = 0x2  # (v2) records lsn .. next_lsn-1 were quarantined by repair; payload: GAP_PAYLOAD
FLAG_ZSTD = 0x4  # (v2) the payload is one zstd frame holding the appended bytes
FLAGS_KNOWN = FLAG_SEAL | FLAG_GAP | FLAG_ZSTD
GAP_PAYLOAD = struct.Struct("<Q")  # next_lsn; then the quarantine file's name (UTF-8), then zeros
GAP_RECORD_SIZE_MIN = RECORD_HEADER_SIZE + 4  # a gap payload under 8 bytes means next_lsn = lsn + 1

# --- segment header -----------------------------------------------------------------------------
SEGMENT_MAGIC = b"LOGSPSEG"
SEGMENT_HEADER = struct.Struct("<8sHHIQQI")  # magic, version, header_size, flags, base, created, 0
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size + 4  # + crc32 = 40
SEGMENT_SUFFIX = ".seg"

# --- index --------------------------------------------------------------------------------------
INDEX_MAGIC = b"LOGSPIDX"
INDEX_HEADER = struct.Struct("<8sHHIQI")  # magic, version, header_size, interval, base, reserved
INDEX_HEADER_SIZE = INDEX_HEADER.size + 4  # + crc32 = 32
INDEX_ENTRY = struct.Struct("<QQQI")  # lsn, timestamp_ns, offset, reserved
INDEX_ENTRY_SIZE = INDEX_ENTRY.size + 4  # + crc32 = 32
INDEX_SUFFIX = ".idx"

# --- meta ---------------------------------------------------------------------------------------
META_MAGIC = b"LOGSPOOL"
META_HEADER = struct.Struct("<8sHHI")  # magic, version, reserved, body_size
META_HEADER_SIZE = META_HEADER.size  # 16
META_NAME = "meta"
LOCK_NAME = "lock"

# --- the sync mark (shared state of the writers, not durable data) -------------------------------
SYNC_NAME = "sync"
# "2": marks count whole records only, never a segment's size (which counts the zeros a writer
# preallocated). A mark with the first magic, LOGSPSYN, written by an earlier release that raised
# it to the size, reads as "nothing known" (docs/FORMAT.md §8.1).
SYNC_MAGIC = b"LOGSPSY2"
SYNC_MARK = struct.Struct("<8sQQ")  # magic, segment base lsn, offset
SYNC_FILE_SIZE = 64  # the file is at least this long; the mark is its first 24 bytes
SYNC_BOOT_OFFSET = 24  # then the boot in which a writer last recovered the log (16 bytes)
SYNC_BOOT_SIZE = 16
# Then the gathering hint (advisory, §8.1): the lsn after the records the last group commit's
# fsync covered, the lsn the next one should wait for (0: none), and the fsyncs' epoch.
SYNC_GATHER = struct.Struct("<QQQ")
SYNC_GATHER_OFFSET = 40
# Then the tail hint (advisory, §8.1), read and written under the writer lock: where the last
# record a writer wrote is (segment base lsn, offset, lsn) and where it ends. It lets a writer
# adopt what others appended without parsing it all; checked against that record before use.
SYNC_TAIL = struct.Struct("<QQQQ")
SYNC_TAIL_OFFSET = 64
SYNC_FILE_SIZE_TAIL = 128  # writers of this release make the file this long (earlier ones: 64)
# Then the writer-wanted flag (advisory, §8.1): one byte, set to 1 by a writer that found the
# writer lock taken and is about to wait for it; a writer that keeps the lock between its writes
# gives it back when it sees the flag, and clears it first.
SYNC_WANTED_OFFSET = 96

LSN_MAX = (1 << 63) - 1  # lsns are stored in 64 bits; we keep them within a signed int64 for Spark
NAME_DIGITS = 20  # segment names: the base lsn in 20 decimal digits, so names sort as numbers


class Record(NamedTuple):
    """One record as a reader returns it.

    ``lsn`` is its sequence number (0, 1, 2... contiguous across segments and processes);
    ``timestamp`` is nanoseconds since the Unix epoch, never decreasing along the log;
    ``payload`` is the bytes appended. A NamedTuple, not a dataclass: building one costs a third
    as much, and readers build one per record (see docs/DESIGN.md).
    """

    lsn: int
    timestamp: int
    payload: bytes


class Gap(NamedTuple):
    """lsns a reader skipped: ``first_lsn`` .. ``next_lsn - 1``, and why."""

    first_lsn: int
    next_lsn: int
    reason: str


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    version: int
    base_lsn: int
    created_ns: int


@dataclass(frozen=True, slots=True)
class IndexEntry:
    lsn: int
    timestamp: int
    offset: int


def segment_name(base_lsn: int) -> str:
    return f"{base_lsn:0{NAME_DIGITS}d}{SEGMENT_SUFFIX}"


def index_name(base_lsn: int) -> str:
    return f"{base_lsn:0{NAME_DIGITS}d}{INDEX_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base lsn a segment file name carries, or None if the name is not a segment's."""
    stem, dot, suffix = name.partition(".")
    if dot and "." + suffix == SEGMENT_SUFFIX and len(stem) == NAME_DIGITS and stem.isdigit():
        return int(stem)
    return None


# --- records ------------------------------------------------------------------------------------
def encode_record(lsn: int, timestamp: int, durable_lsn: int, payload: bytes, flags: int = 0) -> bytes:
    """The bytes of one record. The caller has checked the payload size against its limit."""
    body = RECORD_HEADER.pack(len(payload), flags, lsn, timestamp, durable_lsn) + payload
    return body + RECORD_TRAILER.pack(crc32(body))


def encode_gap(lsn: int, next_lsn: int, timestamp: int, note: str, size: int) -> bytes:
    """A gap record of exactly ``size`` bytes (at least GAP_RECORD_SIZE_MIN), saying records
    ``lsn .. next_lsn-1`` were quarantined (to the file ``note`` names, if it fits)."""
    payload_size = size - RECORD_OVERHEAD
    if payload_size < 0:
        raise ValueError(f"a gap record needs at least {RECORD_OVERHEAD} bytes, not {size}")
    if payload_size < GAP_PAYLOAD.size:
        if next_lsn != lsn + 1:
            raise ValueError("a gap record under 44 bytes stands for exactly one lsn")
        payload = bytes(payload_size)
    else:
        text = note.encode()
        if len(text) > payload_size - GAP_PAYLOAD.size:
            text = b""  # a name cut short would mislead: the repair report names the file
        payload = GAP_PAYLOAD.pack(next_lsn) + text + bytes(payload_size - GAP_PAYLOAD.size - len(text))
    return encode_record(lsn, timestamp, 0, payload, FLAG_GAP)


def decode_gap(lsn: int, payload: bytes) -> tuple[int, str]:
    """(next_lsn, note) of a gap record's payload."""
    if len(payload) < GAP_PAYLOAD.size:
        return lsn + 1, ""
    (next_lsn,) = GAP_PAYLOAD.unpack_from(payload, 0)
    note = payload[GAP_PAYLOAD.size :].rstrip(b"\0").decode(errors="replace")
    return int(next_lsn), note


def record_crc(buf: bytes | memoryview, offset: int, payload_size: int) -> int:
    """The checksum a record at ``offset`` of ``buf`` should carry."""
    return crc32(buf[offset : offset + RECORD_HEADER_SIZE + payload_size])


# --- segment header -----------------------------------------------------------------------------
def encode_segment_header(base_lsn: int, created_ns: int, version: int = VERSION_1) -> bytes:
    body = SEGMENT_HEADER.pack(SEGMENT_MAGIC, version, SEGMENT_HEADER_SIZE, 0, base_lsn, created_ns, 0)
    return body + struct.pack("<I", crc32(body))


def decode_segment_header(buf: bytes, path: str) -> SegmentHeader:
    """Decode and check a segment header; CorruptionError or UnsupportedVersionError if bad."""
    if len(buf) < SEGMENT_HEADER_SIZE:
        raise CorruptionError(path, 0, f"segment header is {len(buf)} bytes, expected {SEGMENT_HEADER_SIZE}")
    magic, version, header_size, _flags, base, created, _r = SEGMENT_HEADER.unpack_from(buf, 0)
    if magic != SEGMENT_MAGIC:
        raise CorruptionError(path, 0, f"bad segment magic {magic!r}")
    (found,) = struct.unpack_from("<I", buf, SEGMENT_HEADER.size)
    expected = crc32(buf[: SEGMENT_HEADER.size])
    if found != expected:
        raise CorruptionError(
            path,
            0,
            f"segment header checksum mismatch (expected 0x{expected:08x}, found 0x{found:08x})",
        )
    if version > FORMAT_VERSION:
        raise UnsupportedVersionError(path, version, FORMAT_VERSION)
    if header_size != SEGMENT_HEADER_SIZE:
        raise CorruptionError(path, 0, f"segment header size {header_size}, expected {SEGMENT_HEADER_SIZE}")
    return SegmentHeader(version=version, base_lsn=base, created_ns=created)


# --- index --------------------------------------------------------------------------------------
def encode_index_header(base_lsn: int, interval: int) -> bytes:
    body = INDEX_HEADER.pack(INDEX_MAGIC, VERSION_1, INDEX_HEADER_SIZE, interval, base_lsn, 0)
    return body + struct.pack("<I", crc32(body))


def decode_index_header(buf: bytes, path: str) -> tuple[int, int]:
    """(base_lsn, interval) of an index header; CorruptionError if it is not a valid one."""
    if len(buf) < INDEX_HEADER_SIZE:
        raise CorruptionError(path, 0, "index header truncated")
    magic, version, size, interval, base, _r = INDEX_HEADER.unpack_from(buf, 0)
    (found,) = struct.unpack_from("<I", buf, INDEX_HEADER.size)
    if magic != INDEX_MAGIC or size != INDEX_HEADER_SIZE or found != crc32(buf[: INDEX_HEADER.size]):
        raise CorruptionError(path, 0, "bad index header")
    if version > FORMAT_VERSION:
        raise UnsupportedVersionError(path, version, FORMAT_VERSION)
    return base, interval


def encode_index_entry(lsn: int, timestamp: int, offset: int) -> bytes:
    body = INDEX_ENTRY.pack(lsn, timestamp, offset, 0)
    return body + struct.pack("<I", crc32(body))


def decode_index_entries(buf: bytes) -> list[IndexEntry]:
    """The valid entries of an index file body, stopping at the first invalid or partial one.

    The index is derived data, never trusted blindly: a reader that uses an entry checks the record
    it points to. Entries must also increase in lsn and offset; a decrease ends the list.
    """
    entries: list[IndexEntry] = []
    body = INDEX_ENTRY.size
    last_lsn = -1
    last_offset = -1
    for pos in range(INDEX_HEADER_SIZE, len(buf) - INDEX_ENTRY_SIZE + 1, INDEX_ENTRY_SIZE):
        (found,) = struct.unpack_from("<I", buf, pos + body)
        if found != crc32(buf[pos : pos + body]):
            break
        lsn, ts, offset, _r = INDEX_ENTRY.unpack_from(buf, pos)
        if lsn <= last_lsn or offset <= last_offset:
            break
        entries.append(IndexEntry(lsn, ts, offset))
        last_lsn, last_offset = lsn, offset
    return entries


# --- meta ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Meta:
    """The settings a log was created with (the meta file)."""

    version: int
    created_ns: int
    segment_size_max: int
    index_interval: int
    record_size_max: int
    log_id: str
    extra: dict[str, Any]
    compression: str | None = None  # (v2) "zstd", or None
    compression_level: int | None = None  # (v2) the zstd level, with compression

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = dict(self.extra)
        body.update(
            created_ns=self.created_ns,
            segment_size_max=self.segment_size_max,
            index_interval=self.index_interval,
            record_size_max=self.record_size_max,
            log_id=self.log_id,
        )
        if self.compression is not None:
            body.update(compression=self.compression, compression_level=self.compression_level)
        return body


_META_KEYS = (
    "created_ns",
    "segment_size_max",
    "index_interval",
    "record_size_max",
    "log_id",
    "compression",
    "compression_level",
)


def encode_meta(meta: Meta) -> bytes:
    return encode_json_file(META_MAGIC, meta.version, meta.to_json())


# The meta's integer settings and the ranges a log may be created with and a reader accepts
# (FORMAT.md §6.1): a value outside them is damage, never a log that fails on its first append
# (an index_interval of 0 once made appends raise ZeroDivisionError).
META_INT_BOUNDS = {
    "segment_size_max": (limits.SEGMENT_SIZE_MAX_MIN, limits.SEGMENT_SIZE_LIMIT),
    "index_interval": (limits.INDEX_INTERVAL_MIN, limits.SEGMENT_SIZE_LIMIT),
    "record_size_max": (0, limits.PAYLOAD_SIZE_LIMIT),
}


def checked_int(name: str, value: object, low: int, high: int, unit: str = "") -> int:
    """``value`` if it is an integer (a JSON integer: not a bool, a float or a string) from
    ``low`` to ``high``; ValueError naming ``name`` otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}{unit}, not {value!r}")
    return value


def decode_meta(buf: bytes, path: str) -> Meta:
    """The meta file, checked as FORMAT.md §6.1 says: the required keys, JSON integers in range,
    a string log_id, a known compression with its level, and version 2 for a compressed log."""
    version, body = decode_json_file(META_MAGIC, buf, path, "meta")
    try:
        missing = [k for k in ("created_ns", *META_INT_BOUNDS, "log_id") if k not in body]
        if missing:
            raise ValueError(f"required keys missing: {', '.join(missing)}")
        ints = {k: checked_int(k, body[k], low, high) for k, (low, high) in META_INT_BOUNDS.items()}
        if not isinstance(body["log_id"], str):
            raise ValueError(f"log_id must be a string, not {body['log_id']!r}")
        compression = _meta_compression(body)
        level = None
        if compression is not None:
            if version < VERSION_2:
                raise ValueError(f"compression {compression!r} in a version {version} meta file (needs 2)")
            level = checked_int(
                "compression_level",
                body.get("compression_level"),
                limits.ZSTD_LEVEL_MIN,
                limits.ZSTD_LEVEL_MAX,
            )
        return Meta(
            version=version,
            created_ns=checked_int("created_ns", body["created_ns"], 0, LSN_MAX),
            log_id=body["log_id"],
            extra={k: v for k, v in body.items() if k not in _META_KEYS},
            compression=compression,
            compression_level=level,
            **ints,
        )
    except ValueError as err:
        raise CorruptionError(path, META_HEADER_SIZE, f"meta body is not valid: {err}") from err


def _meta_compression(body: dict[str, Any]) -> str | None:
    codec = body.get("compression")
    if codec is not None and codec != "zstd":
        raise ValueError(f"unknown compression {codec!r}")
    return codec


# --- files of a JSON object: meta, retention --------------------------------------------------------
def encode_json_file(magic: bytes, version: int, body_obj: dict[str, Any]) -> bytes:
    """``magic | version u16 | reserved u16 | body size u32 | JSON body | crc32`` (§6)."""
    body = json.dumps(body_obj, sort_keys=True, separators=(",", ":")).encode()
    head = META_HEADER.pack(magic, version, 0, len(body))
    return head + body + struct.pack("<I", crc32(body, crc32(head)))


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"key {key!r} given twice")
        obj[key] = value
    return obj


def decode_json_file(magic: bytes, buf: bytes, path: str, what: str) -> tuple[int, dict[str, Any]]:
    """The version and JSON object of a file framed by ``encode_json_file``, all checked."""
    if len(buf) < META_HEADER_SIZE + 4:
        raise CorruptionError(path, 0, f"{what} file is {len(buf)} bytes, too short")
    found_magic, version, _r, body_size = META_HEADER.unpack_from(buf, 0)
    if found_magic != magic:
        raise CorruptionError(path, 0, f"bad {what} magic {found_magic!r}")
    if body_size > limits.META_SIZE_MAX or META_HEADER_SIZE + body_size + 4 != len(buf):
        raise CorruptionError(path, 8, f"{what} body size {body_size} does not match file size {len(buf)}")
    end = META_HEADER_SIZE + body_size
    (found,) = struct.unpack_from("<I", buf, end)
    expected = crc32(buf[:end])
    if found != expected:
        raise CorruptionError(
            path, end, f"{what} checksum mismatch (expected 0x{expected:08x}, found 0x{found:08x})"
        )
    if version > FORMAT_VERSION:
        raise UnsupportedVersionError(path, version, FORMAT_VERSION)
    try:
        # UTF-8 only (json.loads of bytes would take UTF-16 and UTF-32 too); a key given twice is
        # damage, not "the last one wins" (FORMAT.md §6.1).
        body = json.loads(buf[META_HEADER_SIZE:end].decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except ValueError as err:
        raise CorruptionError(path, META_HEADER_SIZE, f"{what} body is not JSON: {err}") from err
    if not isinstance(body, dict):
        raise CorruptionError(path, META_HEADER_SIZE, f"{what} body is not a JSON object")
    return version, body


# --- checkpoint (a durable subscriber's position) ------------------------------------------------
CHECKPOINT_MAGIC = b"LOGSPCKP"
# Version 1 (read only): the whole file is one record: magic, version, reserved, name size, lsn,
# committed_ns, created_ns; then the name, then crc32.
CHECKPOINT_HEADER = struct.Struct("<8sHHIQQQ")
# Version 2: the file holds two slots, each a record with a generation: magic, version, reserved,
# name size, generation, lsn, committed_ns, created_ns; then the name, then crc32. A commit
# overwrites the slot the newest generation is not in (docs/FORMAT.md §6.2).
CHECKPOINT_SLOT_HEADER = struct.Struct("<8sHHIQQQQ")
CHECKPOINT_SLOT_ALIGN = 512
CHECKPOINT_PREFIX = "cp."


@dataclass(frozen=True, slots=True)
class Checkpoint:
    name: str
    lsn: int  # the next lsn the subscriber reads: every lsn below it is consumed
    committed_ns: int
    created_ns: int
    generation: int = 0  # counts commits (version 2); 0 in a version-1 file


def checkpoint_name(subscriber: str) -> str:
    """The file name of a subscriber's checkpoint: ``cp.`` and the SHA-256 of its UTF-8 name.

    A hash, so that no name (``../x``, NUL, 10 KB, any case or unicode form) can escape the
    directory, be too long for the file system, or collide with another name; the name itself
    is stored inside the file and checked on read."""
    return CHECKPOINT_PREFIX + hashlib.sha256(subscriber.encode()).hexdigest()


def is_checkpoint_name(name: str) -> bool:
    hexpart = name[len(CHECKPOINT_PREFIX) :]
    return (
        name.startswith(CHECKPOINT_PREFIX)
        and len(hexpart) == 64
        and all(c in "0123456789abcdef" for c in hexpart)
    )


def checkpoint_slot_size(name: str) -> int:
    """Bytes per slot of a version-2 checkpoint file of ``name``: its record rounded up to 512."""
    record = CHECKPOINT_SLOT_HEADER.size + len(name.encode()) + 4
    return -(-record // CHECKPOINT_SLOT_ALIGN) * CHECKPOINT_SLOT_ALIGN


def encode_checkpoint_slot(cp: Checkpoint) -> bytes:
    """The record of ``cp`` (generation >= 1) as it is written into a slot."""
    if cp.generation < 1:
        raise ValueError(f"a checkpoint generation is >= 1, not {cp.generation}")
    name = cp.name.encode()
    head = CHECKPOINT_SLOT_HEADER.pack(
        CHECKPOINT_MAGIC, VERSION_2, 0, len(name), cp.generation, cp.lsn, cp.committed_ns, cp.created_ns
    )
    return head + name + struct.pack("<I", crc32(name, crc32(head)))


def encode_checkpoint(cp: Checkpoint) -> bytes:
    """A whole version-2 checkpoint file: ``cp`` in slot 0 (generation 1 if it has none), zeros
    in slot 1."""
    if cp.generation < 1:
        cp = dataclasses.replace(cp, generation=1)
    record = encode_checkpoint_slot(cp)
    return record + bytes(2 * checkpoint_slot_size(cp.name) - len(record))


def _decode_checkpoint_v1(buf: bytes, path: str) -> Checkpoint:
    size = CHECKPOINT_HEADER.size
    if len(buf) < size + 4:
        raise CorruptionError(path, 0, f"checkpoint file is {len(buf)} bytes, too short")
    _magic, _version, _r, name_size, lsn, committed, created = CHECKPOINT_HEADER.unpack_from(buf, 0)
    if size + name_size + 4 != len(buf):
        raise CorruptionError(path, 12, f"checkpoint name size {name_size} does not match file size")
    (found,) = struct.unpack_from("<I", buf, size + name_size)
    expected = crc32(buf[: size + name_size])
    if found != expected:
        raise CorruptionError(
            path,
            size + name_size,
            f"checkpoint checksum mismatch (expected 0x{expected:08x}, found 0x{found:08x})",
        )
    try:
        name = buf[size : size + name_size].decode()
    except UnicodeDecodeError as err:
        raise CorruptionError(path, size, f"checkpoint name is not UTF-8: {err}") from err
    return Checkpoint(name, lsn, committed, created)


def _decode_checkpoint_slot(buf: bytes, offset: int, slot_size: int, path: str) -> Checkpoint | str:
    """The checkpoint in the slot at ``offset``, or why it holds none (never written, torn)."""
    size = CHECKPOINT_SLOT_HEADER.size
    head = buf[offset : offset + size]
    if head[:8] != CHECKPOINT_MAGIC:
        return "empty" if not any(head) else f"bad magic {head[:8]!r}"
    _m, version, _r, name_size, gen, lsn, committed, created = CHECKPOINT_SLOT_HEADER.unpack(head)
    if size + name_size + 4 > slot_size:
        return f"name size {name_size} does not fit the {slot_size}-byte slot"
    end = offset + size + name_size
    (found,) = struct.unpack_from("<I", buf, end)
    if found != crc32(buf[offset:end]):
        return "checksum mismatch"  # torn by a crash during a commit, or damaged
    if version > FORMAT_VERSION:  # whole, and written by a newer logspool
        raise UnsupportedVersionError(path, version, FORMAT_VERSION)
    if version != VERSION_2:
        return f"version {version} in a two-slot file"
    try:
        name = buf[offset + size : end].decode()
    except UnicodeDecodeError:
        return "name is not UTF-8"
    if gen < 1:
        return f"generation {gen}"
    return Checkpoint(name, lsn, committed, created, gen)


def decode_checkpoint(buf: bytes, path: str) -> Checkpoint:
    """The position a checkpoint file holds: for version 2, the valid slot of the newest
    generation (the other may be torn by a crash during a commit). CorruptionError if none."""
    if len(buf) >= 10 and buf[:8] == CHECKPOINT_MAGIC and buf[8:10] == VERSION_1.to_bytes(2, "little"):
        return _decode_checkpoint_v1(buf, path)
    slot = len(buf) // 2
    if len(buf) < 2 * CHECKPOINT_SLOT_ALIGN or len(buf) % (2 * CHECKPOINT_SLOT_ALIGN):
        if len(buf) >= 10 and buf[:8] == CHECKPOINT_MAGIC:
            (version,) = struct.unpack_from("<H", buf, 8)
            if version > FORMAT_VERSION:
                raise UnsupportedVersionError(path, version, FORMAT_VERSION)
        raise CorruptionError(path, 0, f"checkpoint file is {len(buf)} bytes: not two 512-byte-aligned slots")
    found = [_decode_checkpoint_slot(buf, k * slot, slot, path) for k in (0, 1)]
    valid = [cp for cp in found if isinstance(cp, Checkpoint)]
    if not valid:
        raise CorruptionError(path, 0, f"no valid checkpoint slot (slot 0: {found[0]}; slot 1: {found[1]})")
    if len(valid) == 2 and valid[0].name != valid[1].name:
        raise CorruptionError(
            path, 0, f"the slots name two subscribers: {valid[0].name!r}, {valid[1].name!r}"
        )
    return max(valid, key=lambda cp: cp.generation)


def checkpoint_slots(buf: bytes, path: str) -> list[Checkpoint | None]:
    """What each slot of a version-2 checkpoint file holds (None: nothing valid)."""
    slot = len(buf) // 2
    return [
        cp if isinstance(cp := _decode_checkpoint_slot(buf, k * slot, slot, path), Checkpoint) else None
        for k in (0, 1)
    ]


# --- retention policy file -------------------------------------------------------------------------
RETENTION_MAGIC = b"LOGSPRET"
RETENTION_NAME = "retention"


# --- sync mark ----------------------------------------------------------------------------------
def read_sync_mark(buf: mmap.mmap | bytes) -> tuple[int, int]:
    """The (segment base lsn, offset) the sync file says is durable; (0, 0), "nothing known",
    if it does not start with the magic (new, or rebuilt by the next fsync)."""
    magic, base, offset = SYNC_MARK.unpack_from(buf, 0)
    if magic != SYNC_MAGIC:
        return (0, 0)
    return (base, offset)


def write_sync_mark(buf: mmap.mmap, base_lsn: int, offset: int) -> None:
    SYNC_MARK.pack_into(buf, 0, SYNC_MAGIC, base_lsn, offset)


def read_sync_boot(buf: mmap.mmap | bytes) -> bytes:
    """The boot id of the sync file (§8.1): the boot in which a writer last recovered the log
    whole; b"" if none is known (no magic, or all zeros)."""
    if SYNC_MARK.unpack_from(buf, 0)[0] != SYNC_MAGIC:
        return b""
    boot = bytes(buf[SYNC_BOOT_OFFSET : SYNC_BOOT_OFFSET + SYNC_BOOT_SIZE])
    return b"" if not any(boot) else boot


def write_sync_boot(buf: mmap.mmap, boot: bytes) -> None:
    """Set the boot id (16 bytes, or b"" to forget it: the next opening writer recovers the
    newest segment whole). The mark must carry the magic already."""
    buf[SYNC_BOOT_OFFSET : SYNC_BOOT_OFFSET + SYNC_BOOT_SIZE] = boot.ljust(SYNC_BOOT_SIZE, b"\0")


def read_sync_gather(buf: mmap.mmap | bytes) -> tuple[int, int, int]:
    """The gathering hint (§8.1): (lsn after the records the last fsync covered, lsn to wait
    for, epoch). Advisory: any value is safe; it only decides who fsyncs and how long one waits
    (at most the capped gathering time)."""
    covered, target, epoch = SYNC_GATHER.unpack_from(buf, SYNC_GATHER_OFFSET)
    return covered, target, epoch


def write_sync_gather(buf: mmap.mmap, covered: int, target: int, epoch: int) -> None:
    SYNC_GATHER.pack_into(buf, SYNC_GATHER_OFFSET, covered, target, epoch & (2**64 - 1))


class TailHint(NamedTuple):
    """Where the last record a writer wrote is (§8.1). Advisory: a writer checks the record is
    there before it believes it, so any value is safe (zeros, torn fields, a stale hint)."""

    base_lsn: int  # the segment's
    offset: int  # the record's, in that segment
    lsn: int  # the record's
    end: int  # the offset after it


def read_sync_tail(buf: mmap.mmap | bytes) -> TailHint:
    """The tail hint; all zeros (which name no record) if the file is too short to hold one."""
    if len(buf) < SYNC_TAIL_OFFSET + SYNC_TAIL.size:
        return TailHint(0, 0, 0, 0)
    return TailHint(*SYNC_TAIL.unpack_from(buf, SYNC_TAIL_OFFSET))


def write_sync_tail(buf: mmap.mmap, base_lsn: int, offset: int, lsn: int, end: int) -> None:
    SYNC_TAIL.pack_into(buf, SYNC_TAIL_OFFSET, base_lsn, offset, lsn, end)


def set_sync_wanted(buf: mmap.mmap, wanted: bool) -> None:
    """Set or clear the writer-wanted flag (a one-byte store: never torn)."""
    buf[SYNC_WANTED_OFFSET] = 1 if wanted else 0


def read_sync_wanted(buf: mmap.mmap) -> bool:
    return buf[SYNC_WANTED_OFFSET] != 0


def clear_sync_tail(buf: mmap.mmap) -> None:
    """Forget the tail hint (zeros), if the file is long enough to hold one."""
    if len(buf) >= SYNC_TAIL_OFFSET + SYNC_TAIL.size:
        write_sync_tail(buf, 0, 0, 0, 0)


# --- the checkpointed file's undo log (docs/FORMAT.md §13) ---------------------------------------
# ``FILE.undo`` holds the bytes that blocks of FILE had at the last checkpoint, written before the
# first change to each block. A header, then entries; each entry is checked by its own CRC.
UNDO_MAGIC = b"LOGSPUND"
# Version 2 stores, where version 1 had 4 reserved zero bytes, the CRC-32 of FILE as it was at the
# checkpoint the transaction started from: a rollback proves with it that the undo log restores
# the whole checkpoint (storage damage can cut entries of blocks that did change). Version 1
# undo logs are still read (without that proof).
UNDO_VERSION = 2
UNDO_VERSION_1 = 1
# magic, version, header_size, block_size, data_size, sequence, created_ns, data_crc (v1: 0)
UNDO_HEADER = struct.Struct("<8sHHIQQQI")
UNDO_HEADER_SIZE = UNDO_HEADER.size + 4  # + crc32 = 48
UNDO_ENTRY = struct.Struct("<IIQ")  # size, reserved (0), offset in the data file
UNDO_ENTRY_OVERHEAD = UNDO_ENTRY.size + 4  # + crc32 of the entry header and the bytes = 20
UNDO_SUFFIX = ".undo"


@dataclass(frozen=True, slots=True)
class UndoHeader:
    block_size: int
    data_size: int
    sequence: int  # the transaction's number (archived undo logs are named by it)
    created_ns: int
    # CRC-32 of FILE at the checkpoint the transaction started from; None in a version-1 log.
    data_crc: int | None = None


def encode_undo_header(h: UndoHeader) -> bytes:
    version, data_crc = (UNDO_VERSION_1, 0) if h.data_crc is None else (UNDO_VERSION, h.data_crc)
    head = UNDO_HEADER.pack(
        UNDO_MAGIC, version, UNDO_HEADER_SIZE, h.block_size, h.data_size, h.sequence, h.created_ns, data_crc
    )
    return head + RECORD_TRAILER.pack(crc32(head))


def decode_undo_header(buf: bytes, path: str) -> UndoHeader:
    """Raises CorruptionError (offset 0) unless ``buf`` starts with a whole, valid undo header."""
    if len(buf) < UNDO_HEADER_SIZE:
        raise CorruptionError(path, 0, f"undo log header truncated ({len(buf)} of {UNDO_HEADER_SIZE} bytes)")
    magic, version, header_size, block_size, data_size, sequence, created, data_crc = UNDO_HEADER.unpack_from(
        buf
    )
    if magic != UNDO_MAGIC:
        raise CorruptionError(path, 0, f"not an undo log (magic {magic!r})")
    (crc,) = RECORD_TRAILER.unpack_from(buf, UNDO_HEADER.size)
    if crc != crc32(buf[: UNDO_HEADER.size]):
        raise CorruptionError(path, 0, "undo log header checksum mismatch")
    if version > UNDO_VERSION:
        raise UnsupportedVersionError(path, version, UNDO_VERSION)
    if (
        header_size != UNDO_HEADER_SIZE
        or not limits.CKPT_BLOCK_SIZE_MIN <= block_size <= limits.CKPT_BLOCK_SIZE_MAX
    ):
        raise CorruptionError(path, 0, f"undo log header: header size {header_size}, block size {block_size}")
    if version == UNDO_VERSION_1 and data_crc != 0:
        raise CorruptionError(path, 40, "undo log header: version 1 with a nonzero reserved field")
    return UndoHeader(block_size, data_size, sequence, created, data_crc if version >= UNDO_VERSION else None)


def encode_undo_entry(offset: int, old: bytes | memoryview) -> bytes:
    head = UNDO_ENTRY.pack(len(old), 0, offset)
    return head + bytes(old) + RECORD_TRAILER.pack(crc32(old, crc32(head)))


def undo_entry_size(buf: bytes) -> int:
    """The byte count of the old contents an entry header declares (not yet checked)."""
    return int(UNDO_ENTRY.unpack_from(buf)[0])


def decode_undo_entry(buf: bytes) -> tuple[int, bytes] | None:
    """(offset in the data file, old bytes) if ``buf`` is exactly one valid entry, else None."""
    if len(buf) < UNDO_ENTRY_OVERHEAD:
        return None
    size, reserved, offset = UNDO_ENTRY.unpack_from(buf)
    if size == 0 or reserved != 0 or len(buf) != UNDO_ENTRY_OVERHEAD + size:
        return None
    if crc32(buf) != CRC_RESIDUE:
        return None
    return offset, buf[UNDO_ENTRY.size : UNDO_ENTRY.size + size]


# --- checks at import: the format's constants and their relationships ---------------------------
def _check_format() -> None:
    if crc32(b"123456789") != CRC_CHECK_VALUE:
        raise AssertionError("crc32 is not CRC-32/ISO-HDLC")
    if RECORD_HEADER_SIZE != 32 or RECORD_OVERHEAD != 36:
        raise AssertionError("record header layout changed")
    if SEGMENT_HEADER_SIZE != 40 or INDEX_HEADER_SIZE != 32 or INDEX_ENTRY_SIZE != 32:
        raise AssertionError("segment or index layout changed")
    # An all-zero header with a zero checksum must never validate (zero-filled tails).
    if crc32(bytes(RECORD_HEADER_SIZE)) == 0:
        raise AssertionError("an all-zero record would be valid")
    if limits.PAYLOAD_SIZE_LIMIT + RECORD_OVERHEAD >= 1 << 32:
        raise AssertionError("payload limit does not fit the 32-bit length field")
    if UNDO_HEADER_SIZE != 48 or UNDO_ENTRY_OVERHEAD != 20:
        raise AssertionError("undo log layout changed")
    if limits.RECORD_SIZE_MAX_DEFAULT > limits.PAYLOAD_SIZE_LIMIT:
        raise AssertionError("default record size above the format limit")


_check_format()
