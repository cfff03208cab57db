"""The wire protocol: frames and the value codec. Pure: no I/O. docs/PROTOCOL.md specifies it.

A frame is a 16-byte header, big-endian (the seed's FJ header, with a body size so frames can be
skipped and bounded), then a body that is one encoded value, always a map::

    magic "LS" | version u8 | kind u8 | command u16 | flags u16 | request id u32 | body size u32

Values are tagged: nil, bytes, string, integer (i64), float (f64), false, true, list, map (string
keys). The value types are the key-value store's, so a value crosses the wire with its type.
"""

from __future__ import annotations

import array
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
    if depth > DEPTH_MAX:
        raise ValueError(f"values nest deeper than {DEPTH_MAX}")
    if value is None:
        out.append(b"\x00")
    elif value is True:
        out.append(b"\x06")
    elif value is False:
        out.append(b"\x05")
    elif isinstance(value, int):
        out.append(b"\x03" + _I64.pack(value))
    elif isinstance(value, float):
        out.append(b"\x04" + _F64.pack(value))
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out.append(b"\x02" + _U32.pack(len(raw)) + raw)
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        out.append(b"\x01" + _U32.pack(len(raw)) + raw)
    elif isinstance(value, list | tuple):
        out.append(b"\x07" + _U32.pack(len(value)))
        for item in value:
            encode_value(item, out, depth + 1)
    elif isinstance(value, dict):
        out.append(b"\x08" + _U32.pack(len(value)))
        for key, item in value.items():
            raw = str(key).encode("utf-8")
            if len(raw) > 0xFFFF:
                raise ValueError("a map key is longer than 65535 bytes")
            out.append(_U16.pack(len(raw)) + raw)
            encode_value(item, out, depth + 1)
    else:
        raise TypeError(
            f"cannot send a {type(value).__name__} (nil, bytes, str, int, float, bool, list, map)"
        )


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


class _Decoder:
    def __init__(self, buf: bytes) -> None:
        self.buf = memoryview(buf)
        self.at = 0

    def take(self, n: int) -> memoryview:
        if self.at + n > len(self.buf):
            raise ProtocolError(f"body ends inside a value (at byte {self.at}, {n} more needed)")
        out = self.buf[self.at : self.at + n]
        self.at += n
        return out

    def value(self, depth: int) -> Any:
        if depth > DEPTH_MAX:
            raise ProtocolError(f"values nest deeper than {DEPTH_MAX}")
        tag = self.take(1)[0]
        if tag == NIL:
            return None
        if tag == TRUE:
            return True
        if tag == FALSE:
            return False
        if tag == INTEGER:
            return _I64.unpack(self.take(8))[0]
        if tag == FLOAT:
            return _F64.unpack(self.take(8))[0]
        if tag in (BYTES, STRING):
            raw = bytes(self.take(_U32.unpack(self.take(4))[0]))
            if tag == BYTES:
                return raw
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ProtocolError(f"a string is not UTF-8: {err}") from None
        if tag == LIST:
            count = _U32.unpack(self.take(4))[0]
            self._room(count)
            return [self.value(depth + 1) for _ in range(count)]
        if tag == MAP:
            return self.map(depth)
        raise ProtocolError(f"unknown value tag {tag} at byte {self.at - 1}")

    def map(self, depth: int) -> dict[str, Any]:
        count = _U32.unpack(self.take(4))[0]
        self._room(count)
        out: dict[str, Any] = {}
        for _ in range(count):
            raw = bytes(self.take(_U16.unpack(self.take(2))[0]))
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ProtocolError(f"a map key is not UTF-8: {err}") from None
            if key in out:
                raise ProtocolError(f"map key {key!r} appears twice")
            out[key] = self.value(depth + 1)
        return out

    def _room(self, count: int) -> None:
        if count > len(self.buf) - self.at:  # every value takes at least one byte
            raise ProtocolError(f"a count of {count} is more than the body's remaining bytes")


def decode_body(buf: bytes) -> dict[str, Any]:
    """The map a frame body holds; ProtocolError if it is anything else or has bytes after it."""
    dec = _Decoder(buf)
    if dec.take(1)[0] != MAP:
        raise ProtocolError("a frame body must be a map")
    body = dec.map(0)
    if dec.at != len(buf):
        raise ProtocolError(f"{len(buf) - dec.at} bytes after the body's map")
    return body


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
