"""The key-value store's op records and snapshot file: byte layouts, encode and decode. Pure: no I/O.

docs/FORMAT.md §15 is the specification; tests/golden checks this code against its vectors.

Every op is one record of the store's op log (a logspool log in ``DIR/ops``) with one fixed
36-byte header, then the key, then a second string (a new name, a lock owner), then the value.
Integers are little-endian; times are nanoseconds since the Unix epoch (signed 64-bit); strings
are UTF-8. Ops record effects, not requests: an ADD is recorded as the UPDATE holding the sum, so
replaying the ops needs no arithmetic and every process reaches the same bytes.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .. import _format as fmt
from ..errors import CorruptionError, UnsupportedVersionError

# --- value types (the seed's numbering) ------------------------------------------------------------
VOID = 0
BYTES = 1
STRING = 2
INTEGER = 3
FLOAT = 4
BOOLEAN = 5
TYPES = {
    VOID: "void",
    BYTES: "bytes",
    STRING: "string",
    INTEGER: "integer",
    FLOAT: "float",
    BOOLEAN: "boolean",
}
TYPE_CODES = {name: code for code, name in TYPES.items()}

_INT = struct.Struct("<q")
_FLOAT = struct.Struct("<d")
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1

Value = None | bytes | str | int | float | bool


def encode_value(value: object) -> tuple[int, bytes]:
    """(type, bytes) of a Python value: None, bytes, str, int (64-bit), float, bool."""
    if value is None:
        return VOID, b""
    if isinstance(value, bool):
        return BOOLEAN, b"\x01" if value else b"\x00"
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise ValueError(f"an integer value must fit in 64 signed bits, not {value}")
        return INTEGER, _INT.pack(value)
    if isinstance(value, float):
        return FLOAT, _FLOAT.pack(value)
    if isinstance(value, str):
        try:
            return STRING, value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(f"a string value must be valid UTF-8: {err}") from None
    if isinstance(value, bytes | bytearray | memoryview):
        return BYTES, bytes(value)
    raise TypeError(f"a value must be None, bytes, str, int, float or bool, not {type(value).__name__}")


def decode_value(vtype: int, raw: bytes, where: str) -> Value:
    """The Python value of (type, bytes); CorruptionError naming ``where`` if they disagree."""
    try:
        if vtype == BYTES:
            return raw
        if vtype == STRING:
            return raw.decode("utf-8")
        if vtype == INTEGER:
            return int(_INT.unpack(raw)[0])
        if vtype == FLOAT:
            return float(_FLOAT.unpack(raw)[0])
        if vtype == BOOLEAN and len(raw) == 1 and raw[0] in (0, 1):
            return raw == b"\x01"
        if vtype == VOID and not raw:
            return None
    except (struct.error, UnicodeDecodeError) as err:
        raise CorruptionError(where, 0, f"a {TYPES[vtype]} value of {len(raw)} bytes: {err}") from None
    raise CorruptionError(where, 0, f"a value of type {vtype} and {len(raw)} bytes is not valid")


# --- op types ------------------------------------------------------------------------------------
SET = 1
UPDATE = 2
DELETE = 3
TOUCH = 4
EXPIRE = 5
LOCK = 6
UNLOCK = 7
RENAME = 8
OP_NAMES = {
    SET: "set",
    UPDATE: "update",
    DELETE: "delete",
    TOUCH: "touch",
    EXPIRE: "expire",
    LOCK: "lock",
    UNLOCK: "unlock",
    RENAME: "rename",
}
FLAG_VOLATILE = 1  # SET: a memory-only value; its bytes are not in the op (FORMAT.md §15.2)

# type, value type, flags, 0, key size, second string size, t1, t2, t3, value size
HEADER = struct.Struct("<BBBxHHqqqI")


class Set(NamedTuple):
    key: str
    vtype: int
    value: bytes
    ts: int  # the request's timestamp (last writer wins)
    expire_ns: int  # 0: never
    touch_ns: int  # 0: reading does not extend the expiry
    volatile: bool


class Update(NamedTuple):  # a new value for a live key; its times, expiry and touch are kept
    key: str
    vtype: int
    value: bytes
    ts: int


class Delete(NamedTuple):
    key: str
    ts: int


class Touch(NamedTuple):
    key: str
    expire_ns: int


class Expire(NamedTuple):
    key: str


class Lock(NamedTuple):
    key: str
    owner: str
    until_ns: int


class Unlock(NamedTuple):
    key: str


class Rename(NamedTuple):
    key: str
    new: str
    ts: int


Op = Set | Update | Delete | Touch | Expire | Lock | Unlock | Rename


def encode(op: Op) -> bytes:
    if isinstance(op, Set):  # (most ops: its fields taken at once)
        text, vtype, value, ts, expire_ns, touch_ns, volatile = op
        key = text.encode("utf-8")
        if volatile:
            value = b""  # (a memory-only value: its bytes stay out of the log)
        flags = FLAG_VOLATILE if volatile else 0
        return b"".join(
            (HEADER.pack(SET, vtype, flags, len(key), 0, ts, expire_ns, touch_ns, len(value)), key, value)
        )
    key = op.key.encode("utf-8")
    second = b""
    vtype = 0
    t1 = t2 = 0
    value = b""
    if isinstance(op, Update):
        kind, vtype, t1, value = UPDATE, op.vtype, op.ts, op.value
    elif isinstance(op, Delete):
        kind, t1 = DELETE, op.ts
    elif isinstance(op, Touch):
        kind, t2 = TOUCH, op.expire_ns
    elif isinstance(op, Expire):
        kind = EXPIRE
    elif isinstance(op, Lock):
        kind, t2, second = LOCK, op.until_ns, op.owner.encode("utf-8")
    elif isinstance(op, Unlock):
        kind = UNLOCK
    else:
        kind, t1, second = RENAME, op.ts, op.new.encode("utf-8")
    head = HEADER.pack(kind, vtype, 0, len(key), len(second), t1, t2, 0, len(value))
    return b"".join((head, key, second, value))


def decode(buf: bytes, where: str) -> Op:
    """The op in ``buf`` (one record's payload); CorruptionError naming ``where`` if it is not one."""
    if len(buf) < HEADER.size:
        raise CorruptionError(where, 0, f"op of {len(buf)} bytes is shorter than its header")
    kind, vtype, flags, ks, ss, t1, t2, t3, vs = HEADER.unpack_from(buf)
    if kind not in OP_NAMES:
        raise CorruptionError(where, 0, f"unknown op type {kind}")
    if HEADER.size + ks + ss + vs != len(buf):
        raise CorruptionError(
            where, 0, f"op sizes disagree: {HEADER.size} + {ks} + {ss} + {vs} != {len(buf)}"
        )
    if vtype not in TYPES or flags & ~FLAG_VOLATILE:
        raise CorruptionError(where, 0, f"op with value type {vtype} and flags {flags:#x}")
    try:
        key = buf[HEADER.size : HEADER.size + ks].decode("utf-8")
        second = buf[HEADER.size + ks : HEADER.size + ks + ss].decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptionError(where, HEADER.size, f"a key or name is not UTF-8: {err}") from None
    value = bytes(buf[HEADER.size + ks + ss :])
    if kind == SET:
        return Set(key, vtype, value, t1, t2, t3, bool(flags & FLAG_VOLATILE))
    if kind == UPDATE:
        return Update(key, vtype, value, t1)
    if kind == DELETE:
        return Delete(key, t1)
    if kind == TOUCH:
        return Touch(key, t2)
    if kind == EXPIRE:
        return Expire(key)
    if kind == LOCK:
        return Lock(key, second, t2)
    if kind == UNLOCK:
        return Unlock(key)
    return Rename(key, second, t1)


# --- snapshot ------------------------------------------------------------------------------------
# A snapshot file: a header, then entries (values sorted by key, tombstones, locks), each framed
# as body size, body crc32, body, so it is written and read as a stream (FORMAT.md §15.3).
SNAPSHOT_MAGIC = b"LSKVSNAP"
SNAPSHOT_VERSION = 1
# magic, version, header size, next_lsn, values, tombstones, locks, header crc32 (over the rest)
SNAPSHOT_HEADER = struct.Struct("<8sHHQQQQI")
FRAME = struct.Struct("<II")  # body size, body crc32
ENTRY_VALUE = 1
ENTRY_TOMBSTONE = 2
ENTRY_LOCK = 3
# kind, type, 0, key size, 0, value size, ts, created, modified, accessed, expire, touch, version
SNAP_VALUE = struct.Struct("<BBxxHxxIqqqqqqQ")
SNAP_TOMBSTONE = struct.Struct("<BxHxxxxq")  # kind, 0, key size, 0, ts
SNAP_LOCK = struct.Struct("<BxHHxxq")  # kind, 0, key size, owner size, 0, until


class ValueRow(NamedTuple):
    key: str
    vtype: int
    value: bytes
    ts: int
    created_ns: int
    modified_ns: int
    accessed_ns: int
    expire_ns: int
    touch_ns: int
    version: int  # lsn of the op that last changed it


def snapshot_header(next_lsn: int, values: int, tombstones: int, locks: int) -> bytes:
    head = SNAPSHOT_HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, SNAPSHOT_HEADER.size, next_lsn,
                                values, tombstones, locks, 0)  # fmt: skip
    return head[:-4] + struct.pack("<I", fmt.crc32(head[:-4]))


def frame(body: bytes) -> bytes:
    return FRAME.pack(len(body), fmt.crc32(body)) + body


_pack_value = SNAP_VALUE.pack
_pack_frame = FRAME.pack


def value_entry(
    key: str, vtype: int, value: bytes, ts: int, created_ns: int, modified_ns: int, accessed_ns: int,
    expire_ns: int, touch_ns: int, version: int,
) -> tuple[bytes, int, int]:  # fmt: skip
    """A value entry, framed; the size of its body, and the offset of the value's bytes in the
    body. (Fields as ``ValueRow``'s, passed one by one: a snapshot frames one an entry.)"""
    raw = key.encode("utf-8")
    head = _pack_value(ENTRY_VALUE, vtype, len(raw), len(value), ts, created_ns, modified_ns, accessed_ns,
                       expire_ns, touch_ns, version)  # fmt: skip
    body = b"".join((head, raw, value))
    return _pack_frame(len(body), fmt.crc32(body)) + body, len(body), SNAP_VALUE.size + len(raw)


def tombstone_body(key: str, ts: int) -> bytes:
    raw = key.encode("utf-8")
    return SNAP_TOMBSTONE.pack(ENTRY_TOMBSTONE, len(raw), ts) + raw


def lock_body(key: str, owner: str, until_ns: int) -> bytes:
    raw, who = key.encode("utf-8"), owner.encode("utf-8")
    return SNAP_LOCK.pack(ENTRY_LOCK, len(raw), len(who), until_ns) + raw + who


class SnapshotHeader(NamedTuple):
    next_lsn: int
    values: int
    tombstones: int
    locks: int
    size: int


def decode_snapshot_header(buf: bytes, path: str) -> SnapshotHeader:
    if len(buf) < SNAPSHOT_HEADER.size:
        raise CorruptionError(path, 0, f"snapshot of {len(buf)} bytes is shorter than its header")
    magic, version, size, next_lsn, values, tombstones, locks, crc = SNAPSHOT_HEADER.unpack_from(buf)
    if magic != SNAPSHOT_MAGIC:
        raise CorruptionError(path, 0, f"bad magic {magic!r} (expected {SNAPSHOT_MAGIC!r})")
    if fmt.crc32(buf[: SNAPSHOT_HEADER.size - 4]) != crc:
        raise CorruptionError(path, 0, "snapshot header checksum mismatch")
    if version > SNAPSHOT_VERSION:
        raise UnsupportedVersionError(path, version, SNAPSHOT_VERSION)
    if size < SNAPSHOT_HEADER.size:
        raise CorruptionError(path, 0, f"snapshot header size {size} is too small")
    return SnapshotHeader(next_lsn, values, tombstones, locks, size)


def _text(body: bytes, start: int, size: int, path: str, offset: int) -> str:
    if start + size > len(body):
        raise CorruptionError(path, offset, "snapshot entry ends inside a string")
    try:
        return body[start : start + size].decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptionError(path, offset, f"snapshot entry string is not UTF-8: {err}") from None


Entry = tuple[int, ValueRow | tuple[str, int] | tuple[str, str, int], int]


def decode_entry(body: bytes, path: str, offset: int) -> Entry:
    """(kind, content, value offset in body) of one entry body already checked by its crc.
    Content: a ValueRow (its value b"" if the caller will not keep it), (key, ts), (key, owner, until)."""
    kind = body[0] if body else 0
    if kind == ENTRY_VALUE and len(body) >= SNAP_VALUE.size:
        _, vtype, ks, vs, ts, created, modified, accessed, expire, touch, version = SNAP_VALUE.unpack_from(
            body
        )
        if vtype not in TYPES or SNAP_VALUE.size + ks + vs != len(body):
            raise CorruptionError(path, offset, f"snapshot value entry: type {vtype}, sizes disagree")
        key = _text(body, SNAP_VALUE.size, ks, path, offset)
        at = SNAP_VALUE.size + ks
        row = ValueRow(key, vtype, b"", ts, created, modified, accessed, expire, touch, version)
        return kind, row, at
    if kind == ENTRY_TOMBSTONE and len(body) >= SNAP_TOMBSTONE.size:
        _, ks, ts = SNAP_TOMBSTONE.unpack_from(body)
        if SNAP_TOMBSTONE.size + ks != len(body):
            raise CorruptionError(path, offset, "snapshot tombstone entry sizes disagree")
        return kind, (_text(body, SNAP_TOMBSTONE.size, ks, path, offset), ts), 0
    if kind == ENTRY_LOCK and len(body) >= SNAP_LOCK.size:
        _, ks, os_, until = SNAP_LOCK.unpack_from(body)
        if SNAP_LOCK.size + ks + os_ != len(body):
            raise CorruptionError(path, offset, "snapshot lock entry sizes disagree")
        key = _text(body, SNAP_LOCK.size, ks, path, offset)
        return kind, (key, _text(body, SNAP_LOCK.size + ks, os_, path, offset), until), 0
    raise CorruptionError(path, offset, f"snapshot entry of kind {kind} and {len(body)} bytes")
