"""The wire protocol: frames and the value codec. Pure: no I/O. docs/PROTOCOL.md specifies it.

A frame is a 16-byte header, big-endian (the seed's FJ header, with a body size so frames can be
skipped and bounded), then a body that is one encoded value, always a map::

    magic "LS" | version u8 | kind u8 | command u16 | flags u16 | request id u32 | body size u32

Values are tagged: nil, bytes, string, integer (i64), float (f64), false, true, list, map (string
keys). The value types are the key-value store's, so a value crosses the wire with its type.
"""

from __future__ import annotations

import array
import functools
import re
import struct
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

MAGIC = b"LS"
VERSION = 1
HEADER = struct.Struct(">2sBBHHII")
HEADER_SIZE = HEADER.size  # 16

REQUEST = 1
REPLY = 2
EVENT = 3
KINDS = {REQUEST: "request", REPLY: "reply", EVENT: "event"}
FLAG_ERROR = 1  # a reply: the body is an error ({"error", "message", "args"})
FLAG_END = 2  # an event: the last one of its subscription
FLAGS_KNOWN = FLAG_ERROR | FLAG_END

DEPTH_MAX = 16

# --- commands ------------------------------------------------------------------------------------
NOP = 0
QUIT = 1
HELLO = 2
PING = 3
STATS = 4
KV_SET = 10
KV_GET = 11
KV_DELETE = 12
KV_ADD = 13
KV_NOT = 14
KV_TRUNCATE = 15
KV_LOCK = 16
KV_UNLOCK = 17
KV_RENAME = 18
KV_RANGE = 19
KV_MATCH = 20
KV_STATS = 21
LOG_APPEND = 30
LOG_READ = 31
LOG_INFO = 32
LOG_FORWARD = 33
LOG_FORGET = 34
JOB_PUT = 40
JOB_TAKE = 41
JOB_ACK = 42
JOB_NACK = 43
JOB_EXTEND = 44
JOB_STATS = 45
JOB_GET = 46
JOB_TAKE_MANY = 47
JOB_ACK_MANY = 48
JOB_RELEASE_MANY = 49
JOB_PUT_MANY = 60
JOB_CANCEL = 61
LISTEN = 50
UNLISTEN = 51
COMMANDS = {
    NOP: "nop", QUIT: "quit", HELLO: "hello", PING: "ping", STATS: "stats",
    KV_SET: "kv.set", KV_GET: "kv.get", KV_DELETE: "kv.delete", KV_ADD: "kv.add", KV_NOT: "kv.not",
    KV_TRUNCATE: "kv.truncate", KV_LOCK: "kv.lock", KV_UNLOCK: "kv.unlock", KV_RENAME: "kv.rename",
    KV_RANGE: "kv.range", KV_MATCH: "kv.match", KV_STATS: "kv.stats",
    LOG_APPEND: "log.append", LOG_READ: "log.read", LOG_INFO: "log.info", LOG_FORWARD: "log.forward",
    LOG_FORGET: "log.forget",
    JOB_PUT: "jobs.put", JOB_TAKE: "jobs.take", JOB_ACK: "jobs.ack", JOB_NACK: "jobs.nack",
    JOB_EXTEND: "jobs.extend", JOB_STATS: "jobs.stats", JOB_GET: "jobs.get",
    JOB_TAKE_MANY: "jobs.take_many", JOB_ACK_MANY: "jobs.ack_many", JOB_RELEASE_MANY: "jobs.release_many",
    JOB_PUT_MANY: "jobs.put_many", JOB_CANCEL: "jobs.cancel",
    LISTEN: "listen", UNLISTEN: "unlisten",
}  # fmt: skip

# --- value tags ------------------------------------------------------------------------------------
NIL = 0
BYTES = 1
STRING = 2
INTEGER = 3
FLOAT = 4
FALSE = 5
TRUE = 6
LIST = 7
MAP = 8
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")


class ProtocolError(Exception):
    """A frame or body that breaks the protocol: the connection that sent it is closed."""


class Frame(NamedTuple):
    kind: int
    command: int
    flags: int
    request_id: int
    body: dict[str, Any]


def encode_value(value: Any, out: list[bytes], depth: int = 0) -> None:
    """Append ``value``'s encoding (§2 of docs/PROTOCOL.md) to ``out``. The common types are
    looked up by their exact type first (a reply is encoded on the daemon's event loop: half the
    cost of the chain of isinstance checks, which still serves subclasses)."""
    if depth > DEPTH_MAX:
        raise ValueError(f"values nest deeper than {DEPTH_MAX}")
    kind = type(value)
    if kind is bytes:
        out.append(_BYTES_HEAD(len(value)))
        out.append(value)
    elif kind is str:
        raw = value.encode("utf-8")
        out.append(_STRING_HEAD(len(raw)))
        out.append(raw)
    elif kind is dict:
        out.append(_MAP_HEAD(len(value)))
        for key, item in value.items():
            raw = key.encode("utf-8") if type(key) is str else str(key).encode("utf-8")
            if len(raw) > 0xFFFF:
                raise ValueError("a map key is longer than 65535 bytes")
            out.append(_U16_PACK(len(raw)))
            out.append(raw)
            encode_value(item, out, depth + 1)
    elif value is None:
        out.append(b"\x00")
    elif value is True:
        out.append(b"\x06")
    elif value is False:
        out.append(b"\x05")
    elif kind is int:
        out.append(_INTEGER_PACK(INTEGER, value))
    elif kind is float:
        out.append(_FLOAT_PACK(FLOAT, value))
    elif kind is list or kind is tuple:
        out.append(_LIST_HEAD(len(value)))
        for item in value:
            encode_value(item, out, depth + 1)
    else:
        _encode_other(value, out, depth)


def _encode_other(value: Any, out: list[bytes], depth: int) -> None:
    """Subclasses of the value types (an IntEnum, a str subclass...) and the errors."""
    if isinstance(value, int):
        out.append(_INTEGER_PACK(INTEGER, value))
    elif isinstance(value, float):
        out.append(_FLOAT_PACK(FLOAT, value))
    elif isinstance(value, str):
        encode_value(str(value), out, depth)
    elif isinstance(value, bytes | bytearray | memoryview):
        encode_value(bytes(value), out, depth)
    elif isinstance(value, list | tuple):
        encode_value(list(value), out, depth)
    elif isinstance(value, dict):
        encode_value(dict(value), out, depth)
    else:
        raise TypeError(
            f"cannot send a {type(value).__name__} (nil, bytes, str, int, float, bool, list, map)"
        )


_HEAD = struct.Struct(">BI")
_BYTES_HEAD = functools.partial(_HEAD.pack, BYTES)
BYTES_HEAD = _BYTES_HEAD  # (a bytes value's encoding is ``BYTES_HEAD(len(value)) + value``)
_STRING_HEAD = functools.partial(_HEAD.pack, STRING)
_LIST_HEAD = functools.partial(_HEAD.pack, LIST)
_MAP_HEAD = functools.partial(_HEAD.pack, MAP)
_U16_PACK = struct.Struct(">H").pack
_INTEGER_PACK = struct.Struct(">Bq").pack
_FLOAT_PACK = struct.Struct(">Bd").pack


def encode_frame(kind: int, command: int, request_id: int, body: dict[str, Any], flags: int = 0) -> bytes:
    parts: list[bytes] = []
    encode_value(body, parts)
    payload = b"".join(parts)
    return HEADER.pack(MAGIC, VERSION, kind, command, flags, request_id, len(payload)) + payload


class Header(NamedTuple):
    kind: int
    command: int
    flags: int
    request_id: int
    size: int


def decode_header(buf: bytes, size_max: int) -> Header:
    """Check a frame header; ProtocolError naming what is wrong."""
    if len(buf) != HEADER_SIZE:
        raise ProtocolError(f"a frame header is {HEADER_SIZE} bytes, got {len(buf)}")
    magic, version, kind, command, flags, request_id, size = HEADER.unpack(buf)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise ProtocolError(f"protocol version {version} is not supported (this side speaks {VERSION})")
    if kind not in KINDS:
        raise ProtocolError(f"unknown frame kind {kind}")
    if flags & ~FLAGS_KNOWN:
        raise ProtocolError(f"unknown flags {flags:#06x}")
    if size > size_max:
        raise ProtocolError(f"frame body of {size} bytes is over the limit of {size_max}")
    return Header(kind, command, flags, request_id, size)


# A store's name, as every store command gives it (PROTOCOL.md; the RESP door's stream keys and
# queue names too): a file name inside the data directory, never a path.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_U32_AT = _U32.unpack_from
_U16_AT = _U16.unpack_from
_I64_AT = _I64.unpack_from
_F64_AT = _F64.unpack_from


def _short(at: int, n: int) -> ProtocolError:
    return ProtocolError(f"body ends inside a value (at byte {at}, {n} more needed)")


def _value(buf: bytes, at: int, depth: int) -> tuple[Any, int]:
    """The value at ``at`` of ``buf`` and the offset after it; ProtocolError if it breaks §2.
    (Functions over ``bytes`` with offsets, no slices of a memoryview: a request is decoded on
    the daemon's event loop, and this is twice as fast as the class it replaced.)"""
    if depth > DEPTH_MAX:
        raise ProtocolError(f"values nest deeper than {DEPTH_MAX}")
    end = len(buf)
    if at >= end:
        raise _short(at, 1)
    tag = buf[at]
    at += 1
    if tag in (BYTES, STRING):
        if at + 4 > end:
            raise _short(at, 4)
        size = _U32_AT(buf, at)[0]
        at += 4
        if at + size > end:
            raise _short(at, size)
        raw = buf[at : at + size]
        if tag == BYTES:
            return raw, at + size
        try:
            return raw.decode("utf-8"), at + size
        except UnicodeDecodeError as err:
            raise ProtocolError(f"a string is not UTF-8: {err}") from None
    if tag == NIL:
        return None, at
    if tag in (INTEGER, FLOAT):
        if at + 8 > end:
            raise _short(at, 8)
        return (_I64_AT if tag == INTEGER else _F64_AT)(buf, at)[0], at + 8
    if tag == TRUE:
        return True, at
    if tag == FALSE:
        return False, at
    if tag == LIST:
        if at + 4 > end:
            raise _short(at, 4)
        count = _U32_AT(buf, at)[0]
        at += 4
        if count > end - at:  # every value takes at least one byte
            raise ProtocolError(f"a count of {count} is more than the body's remaining bytes")
        items = []
        for _ in range(count):
            item, at = _value(buf, at, depth + 1)
            items.append(item)
        return items, at
    if tag == MAP:
        return _map(buf, at, depth)
    raise ProtocolError(f"unknown value tag {tag} at byte {at - 1}")


def _map(buf: bytes, at: int, depth: int) -> tuple[dict[str, Any], int]:
    """The map whose count is at ``at`` (after its tag), and the offset after it."""
    end = len(buf)
    if at + 4 > end:
        raise _short(at, 4)
    count = _U32_AT(buf, at)[0]
    at += 4
    if count > end - at:  # every entry takes at least one byte
        raise ProtocolError(f"a count of {count} is more than the body's remaining bytes")
    out: dict[str, Any] = {}
    for _ in range(count):
        if at + 2 > end:
            raise _short(at, 2)
        size = _U16_AT(buf, at)[0]
        at += 2
        if at + size > end:
            raise _short(at, size)
        try:
            key = buf[at : at + size].decode("utf-8")
        except UnicodeDecodeError as err:
            raise ProtocolError(f"a map key is not UTF-8: {err}") from None
        at += size
        if key in out:
            raise ProtocolError(f"map key {key!r} appears twice")
        out[key], at = _value(buf, at, depth + 1)
    return out, at


def decode_body(buf: bytes) -> dict[str, Any]:
    """The map a frame body holds; ProtocolError if it is anything else or has bytes after it."""
    buf = bytes(buf)
    if not buf:
        raise _short(0, 1)
    if buf[0] != MAP:
        raise ProtocolError("a frame body must be a map")
    body, at = _map(buf, 1, 0)
    if at != len(buf):
        raise ProtocolError(f"{len(buf) - at} bytes after the body's map")
    return body


# The bodies of the client's ``get`` (kv.GET with value_only) and plain ``set`` (kv.SET of a
# value that is bytes or a string, no option), in the order it encodes their fields: the daemon's
# most frequent requests, decoded by matching their fixed bytes (a third of the general decoder's
# time); anything else returns None and takes the general decoder.
_NAME_HEAD = b"\x08\x00\x00\x00\x03\x00\x04name\x02"  # a map of 3; "name": a string
_KEY_FIELD = b"\x00\x03key\x02"  # "key": a string
_GET_TAIL = b"\x00\x0avalue_only\x06"  # "value_only": true, and the body's end
_VALUE_FIELD = b"\x00\x05value"  # "value", its tag next


def _name_and_key(buf: bytes) -> tuple[str, str, int] | None:
    """The name and key strings that open the client's get body (``_NAME_HEAD``, ``_KEY_FIELD``)
    and the offset after them; None if ``buf`` does not open so."""
    if not buf.startswith(_NAME_HEAD):
        return None
    start = len(_NAME_HEAD) + 4
    size = _U32_AT(buf, len(_NAME_HEAD))[0] if len(buf) >= start else -1
    at = start + size
    if size < 0 or buf[at : at + len(_KEY_FIELD)] != _KEY_FIELD:
        return None
    key_at = at + len(_KEY_FIELD) + 4
    if len(buf) < key_at:
        return None
    end = key_at + _U32_AT(buf, at + len(_KEY_FIELD))[0]
    if end > len(buf):
        return None
    try:
        return buf[start:at].decode("utf-8"), buf[key_at:end].decode("utf-8"), end
    except UnicodeDecodeError:
        return None


def get_value_only_fields(buf: bytes) -> tuple[str, str] | None:
    """The name and key of a body that is exactly ``{"name": str, "key": str, "value_only":
    true}`` in that order (the client's get); else None (the caller decodes it the general
    way, which also names any error)."""
    found = _name_and_key(buf)
    if found is None or buf[found[2] :] != _GET_TAIL:
        return None
    return found[0], found[1]


def decode_get_value_only(buf: bytes) -> dict[str, Any] | None:
    """``decode_body(buf)`` for a body ``get_value_only_fields`` takes; else None."""
    found = get_value_only_fields(buf)
    if found is None:
        return None
    return {"name": found[0], "key": found[1], "value_only": True}


# A plain set's body, by its fixed bytes: a field's head and the size after it, each read by one
# unpack (the name's at the body's start; the key's after the name; the value's, with its tag,
# after the key).
_SET_NAME_AT = struct.Struct(f">{len(_NAME_HEAD)}sI").unpack_from
_SET_KEY_AT = struct.Struct(f">{len(_KEY_FIELD)}sI").unpack_from
_SET_VALUE_AT = struct.Struct(f">{len(_VALUE_FIELD)}sBI").unpack_from
_SET_NAME_SIZE = len(_NAME_HEAD) + 4
_SET_KEY_SIZE = len(_KEY_FIELD) + 4
_SET_VALUE_SIZE = len(_VALUE_FIELD) + 5


def decode_set_plain(buf: bytes) -> dict[str, Any] | None:
    """``decode_body(buf)`` if ``buf`` is exactly ``{"name": str, "key": str, "value": bytes or
    str}`` in that order; else None (as ``decode_get_value_only``). Each field's head and size
    read by one unpack (the daemon decodes one a SET on its event loop: three fifths of the time
    that ``_name_and_key`` and a check a field took)."""
    try:
        name_head, name_size = _SET_NAME_AT(buf)
        key_at = _SET_NAME_SIZE + name_size
        key_head, key_size = _SET_KEY_AT(buf, key_at)
        value_at = key_at + _SET_KEY_SIZE + key_size
        value_head, tag, value_size = _SET_VALUE_AT(buf, value_at)
    except struct.error:  # (``buf`` ends within a field's head)
        return None
    raw_at = value_at + _SET_VALUE_SIZE
    if (
        name_head != _NAME_HEAD
        or key_head != _KEY_FIELD
        or value_head != _VALUE_FIELD
        or raw_at + value_size != len(buf)
    ):
        return None
    try:
        name = buf[_SET_NAME_SIZE:key_at].decode("utf-8")
        key = buf[key_at + _SET_KEY_SIZE : value_at].decode("utf-8")
        if tag == BYTES:
            return {"name": name, "key": key, "value": buf[raw_at:]}
        if tag == STRING:
            return {"name": name, "key": key, "value": buf[raw_at:].decode("utf-8")}
    except UnicodeDecodeError:
        return None
    return None


# A plain append's body, by its fixed bytes: ``{"name": str, "records": [bytes, ...]}`` in that
# order, as the client's append and append_many encode it; the name's head and size read by one
# unpack, the records' field and count by one, each record's tag and size by one.
_APPEND_NAME_HEAD = b"\x08\x00\x00\x00\x02\x00\x04name\x02"  # a map of 2; "name": a string
_RECORDS_FIELD = b"\x00\x07records\x07"  # "records": a list, its count next
_APPEND_NAME_AT = struct.Struct(f">{len(_APPEND_NAME_HEAD)}sI").unpack_from
_RECORDS_AT = struct.Struct(f">{len(_RECORDS_FIELD)}sI").unpack_from
_RECORD_AT = struct.Struct(">BI").unpack_from  # a record's tag and size
_APPEND_NAME_SIZE = len(_APPEND_NAME_HEAD) + 4
_RECORDS_SIZE = len(_RECORDS_FIELD) + 4


def decode_append_plain(buf: bytes) -> dict[str, Any] | None:
    """``decode_body(buf)`` if ``buf`` is exactly ``{"name": str, "records": [bytes, ...]}`` in
    that order; else None (as ``decode_set_plain``: the general decoder names what is wrong).
    The daemon decodes one a log.APPEND on its event loop, without the general decoder's
    recursion (a call a value)."""
    try:
        name_head, name_size = _APPEND_NAME_AT(buf)
        records_at = _APPEND_NAME_SIZE + name_size
        records_head, count = _RECORDS_AT(buf, records_at)
    except struct.error:  # (``buf`` ends within a field's head)
        return None
    at = records_at + _RECORDS_SIZE
    end_all = len(buf)
    if name_head != _APPEND_NAME_HEAD or records_head != _RECORDS_FIELD or count > end_all - at:
        return None
    records = []
    try:
        for _ in range(count):  # bounded: a record takes at least 5 bytes of ``buf``
            tag, size = _RECORD_AT(buf, at)
            start = at + 5
            at = start + size
            if tag != BYTES or at > end_all:
                return None
            records.append(buf[start:at])
    except struct.error:  # (``buf`` ends within a record's head)
        return None
    if at != end_all:
        return None
    try:
        return {"name": buf[_APPEND_NAME_SIZE:records_at].decode("utf-8"), "records": records}
    except UnicodeDecodeError:
        return None


# A read of the client's gets only (kv.GET pipelined), of one store: each frame a request header
# of kv.GET with no flag, then the body ``get_value_only_fields`` takes, its name the first
# frame's. Its fixed bytes: the header up to the request id (``GET_REQUEST_HEAD``), and from the
# body's start to the key's size the first frame's (the name's head, size and bytes, the key's
# head); one unpack reads a frame's request id, body size, those bytes and its key's size
# (``_gets_struct``).
GET_REQUEST_HEAD = HEADER.pack(MAGIC, VERSION, REQUEST, KV_GET, 0, 0, 0)[:8]
SET_REQUEST_HEAD = HEADER.pack(MAGIC, VERSION, REQUEST, KV_SET, 0, 0, 0)[:8]  # (a kv.SET's, likewise)
APPEND_REQUEST_HEAD = HEADER.pack(MAGIC, VERSION, REQUEST, LOG_APPEND, 0, 0, 0)[:8]  # (a log.APPEND's)
_GET_NAME_SIZE_MAX = 128  # a store's name (``NAME_RE``) has at most this many bytes
_GET_FIRST = struct.Struct(f">{len(GET_REQUEST_HEAD)}s8x{len(_NAME_HEAD)}sI")  # name's head, size
_GET_TAIL_SIZE = len(_GET_TAIL)


@functools.lru_cache(maxsize=_GET_NAME_SIZE_MAX + 1)  # (one a name's size: bounded)
def _gets_struct(name_size: int) -> struct.Struct:
    """A frame's header up to its request id, request id, body size, body up to its key's
    size (the name's of ``name_size`` bytes) and key's size."""
    middle_size = len(_NAME_HEAD) + 4 + name_size + len(_KEY_FIELD)
    return struct.Struct(f">{len(GET_REQUEST_HEAD)}s4sI{middle_size}sI")


def value_only_gets(buf: bytes, size_max: int) -> tuple[bytes, list[tuple[bytes, bytes]]] | None:
    """The name and each (request id, key) of the frames of ``buf``, as their raw bytes (the id
    as the header's 4, to be copied into the reply's; the name and key as UTF-8, not yet
    checked), if ``buf`` is whole frames of the client's get only, of one store, as the frame
    loop would take them one by one (``decode_header``, then ``get_value_only_fields``), each
    body at most ``size_max`` bytes; else None (the caller takes ``buf`` the general way, which
    also names any error). Each frame read by one unpack, with no slice but its key's (the frame
    loop's header check, body slice and ``get_value_only_fields`` cost three times this)."""
    if len(buf) < _GET_FIRST.size:
        return None
    head, name_head, name_size = _GET_FIRST.unpack_from(buf)
    if head != GET_REQUEST_HEAD or name_head != _NAME_HEAD or name_size > _GET_NAME_SIZE_MAX:
        return None
    frame = _gets_struct(name_size)
    middle_end = frame.size - 4  # (the key's size follows)
    middle = buf[HEADER_SIZE:middle_end]  # the name's head, size and bytes, then the key's head
    if not middle.endswith(_KEY_FIELD):
        return None
    frame_at = frame.unpack_from
    key_at_frame = frame.size
    end_all = len(buf)
    out = []
    at = 0
    try:
        for _ in range(end_all // frame.size):  # bounded: each turn takes a frame of more bytes
            head, request_id, size, body_head, key_size = frame_at(buf, at)
            if head != GET_REQUEST_HEAD or body_head != middle or size > size_max:
                return None
            end = at + HEADER_SIZE + size
            key_at = at + key_at_frame
            key_end = key_at + key_size
            # (the tail ends the frame, its bytes in ``buf``: the frame is whole, its key inside)
            if key_end + _GET_TAIL_SIZE != end or not buf.startswith(_GET_TAIL, key_end):
                return None
            out.append((request_id, buf[key_at:key_end]))
            at = end
            if at == end_all:
                return middle[len(_NAME_HEAD) + 4 : -len(_KEY_FIELD)], out
    except struct.error:  # (a frame cut short: ``buf`` ends within its fixed bytes)
        return None
    return None


def decode_frames(buf: bytes, size_max: int) -> Iterator[Frame]:
    """Every whole frame in ``buf`` (tests and fuzzing); ProtocolError on the first bad one."""
    at = 0
    while at < len(buf):
        head = decode_header(buf[at : at + HEADER_SIZE], size_max)
        body = buf[at + HEADER_SIZE : at + HEADER_SIZE + head.size]
        if len(body) != head.size:
            raise ProtocolError("the frame is cut short")
        yield Frame(head.kind, head.command, head.flags, head.request_id, decode_body(body))
        at += HEADER_SIZE + head.size


# --- log.READ pages, packed -----------------------------------------------------------------------
def pack_records(records: list[list[Any]]) -> bytes:
    """A log.READ page as one bytes value (docs/PROTOCOL.md, log.READ ``packed``): the count
    (u32), the lsns (i64 each), the timestamps (i64 each), the payload sizes (u32 each), then the
    payloads, little-endian; decoded column by column rather than value by value."""
    lsns = array.array("q", [r[0] for r in records])
    stamps = array.array("q", [r[1] for r in records])
    sizes = array.array("I", [len(r[2]) for r in records])
    if sys.byteorder != "little":  # pragma: no cover (the wire is little-endian)
        for column in (lsns, stamps, sizes):
            column.byteswap()
    head = len(records).to_bytes(4, "little")
    return b"".join((head, lsns.tobytes(), stamps.tobytes(), sizes.tobytes(), *(r[2] for r in records)))


def unpack_records(packed: bytes) -> tuple[list[int], list[int], list[bytes]]:
    """(lsns, timestamps, payloads) of a packed page; ProtocolError if its sizes do not add up."""
    if len(packed) < 4:
        raise ProtocolError("a packed page shorter than its count")
    count = int.from_bytes(packed[:4], "little")
    columns_end = 4 + count * 20
    if len(packed) < columns_end:
        raise ProtocolError(f"a packed page of {count} records ends within its columns")
    lsns, stamps, sizes = array.array("q"), array.array("q"), array.array("I")
    lsns.frombytes(packed[4 : 4 + count * 8])
    stamps.frombytes(packed[4 + count * 8 : 4 + count * 16])
    sizes.frombytes(packed[4 + count * 16 : columns_end])
    if sys.byteorder != "little":  # pragma: no cover
        for column in (lsns, stamps, sizes):
            column.byteswap()
    if columns_end + sum(sizes) != len(packed):
        raise ProtocolError(f"a packed page's payload sizes do not add up to its {len(packed)} bytes")
    payloads = []
    pos = columns_end
    view = memoryview(packed)
    for size in sizes:
        payloads.append(bytes(view[pos : pos + size]))
        pos += size
    return lsns.tolist(), stamps.tolist(), payloads
