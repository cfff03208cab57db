"""Records framed many at a time with numpy and pyarrow, for the Spark commit (FORMAT.md §4.2):
no Python step per record, and bytes identical to what ``_format.encode_record`` gives.

A task knows its rows but not their lsns, their timestamp or the durable mark: those are chosen
by the driver's commit under the writer lock. So a task computes each payload's CRC-32 (one
``zlib.crc32`` a row, in parallel with the other tasks), and the commit gets each record's CRC
from it with the CRC's linearity, for all the records of a block at once:

    crc32(H || P) = crc32(P) xor shift(crc32(H), len(P))

where ``H`` is the record's 32-byte header and ``shift(v, n)`` is the CRC register ``v`` carried
over ``n`` zero bytes (what ``zlib.crc32(bytes(n), v)`` does to it, minus the inversions): a
linear map of the 32 bits of ``v``, applied as four table lookups per power of two in ``n``
(``_SHIFT``, built at import for 2^0 .. 2^28 bytes, the largest record). The header's CRC is that
of a header holding only the batch's timestamp and durable mark (one ``zlib.crc32``), xor the
contributions of each record's length, flags and lsn bytes, looked up per byte position
(``_HEADER_BYTE``). Exact for any payload size (0 included); ``tests/property`` holds it against
``zlib.crc32``.

Then the block's headers (a numpy structured array), payloads and CRCs are joined into the framed
records by one ``pyarrow.compute.binary_join_element_wise``, and the index entries the block owes
(FORMAT.md §5.2) are found from the records' offsets, vectorized too.
"""

from __future__ import annotations

import functools
import itertools
import struct
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _format as fmt
from .. import limits

_POLY = 0xEDB88320  # CRC-32/ISO-HDLC, reflected (FORMAT.md §3)
_SHIFT_LEVELS = limits.PAYLOAD_SIZE_LIMIT.bit_length()  # 2^0 .. 2^28 bytes: any payload size
_HEADER = np.dtype([("length", "<u4"), ("flags", "<u4"), ("lsn", "<u8"), ("ts", "<u8"), ("durable", "<u8")])
assert _HEADER.itemsize == fmt.RECORD_HEADER_SIZE


def _byte_table() -> np.ndarray:
    """The CRC register after one byte ``b`` from register 0: the classic 256-entry table."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_BYTE = _byte_table()


def _tables_of(columns: np.ndarray) -> np.ndarray:
    """A linear map of 32 bits, given by the images of its 32 unit vectors (``columns``), as four
    256-entry tables, one per byte of the input (the image of a value is the xor of the four
    lookups)."""
    bits = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)  # (256, 8)
    tables = np.zeros((4, 256), np.uint32)
    for j in range(4):
        chosen = np.where(bits, columns[8 * j : 8 * j + 8][None, :], np.uint32(0)).astype(np.uint32)
        tables[j] = np.bitwise_xor.reduce(chosen, axis=1)
    return tables


def _apply(tables: np.ndarray, v: np.ndarray) -> np.ndarray:
    out: np.ndarray = tables[0][v & 0xFF] ^ tables[1][(v >> 8) & 0xFF]
    out ^= tables[2][(v >> 16) & 0xFF]
    out ^= tables[3][v >> 24]
    return out


def _shift_tables() -> np.ndarray:
    """``_SHIFT[k]``: the register carried over 2^k zero bytes, as tables (``_tables_of``). One
    zero byte maps register s to (s >> 8) xor table[s & 0xFF]; 2^(k+1) bytes are 2^k twice."""
    units = np.uint32(1) << np.arange(32, dtype=np.uint32)
    levels = np.zeros((_SHIFT_LEVELS, 4, 256), np.uint32)
    levels[0] = _tables_of((units >> 8) ^ _BYTE[units & 0xFF])
    for k in range(1, _SHIFT_LEVELS):
        levels[k] = _tables_of(_apply(levels[k - 1], _apply(levels[k - 1], units)))
    return levels


_SHIFT = _shift_tables()
_DIGITS = (_SHIFT_LEVELS + 3) // 4  # hexadecimal digits of a size below 2^29


def _digit_tables() -> np.ndarray:
    """``_DIGIT[d][j]``: for sizes of any hexadecimal digit ``k`` at place ``d``, the tables
    (``_tables_of``) of the register carried over ``k * 16^d`` zero bytes, flat: entry
    ``k * 256 + b`` is byte ``j``'s table at ``b``. One lookup per byte and digit carries each
    register over its own size (the shifts by 2^i bytes composed)."""
    units = np.uint32(1) << np.arange(32, dtype=np.uint32)
    digits = np.zeros((_DIGITS, 4, 16 * 256), np.uint32)
    for d in range(_DIGITS):
        for k in range(16):
            columns = units
            for i in range(4):
                if (k >> i) & 1 and 4 * d + i < _SHIFT_LEVELS:
                    columns = _apply(_SHIFT[4 * d + i], columns)
            digits[d][:, k * 256 : (k + 1) * 256] = _tables_of(columns)
    return digits


_DIGIT = _digit_tables()


def shift(v: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """CRC registers ``v`` (uint32) each carried over ``n`` zero bytes (n below 2^29, an array
    of the same shape, or one int for all): ``~zlib.crc32(bytes(n), ~v)``, vectorized. One size
    for all: a table set per bit of it; sizes that differ: a table set per hexadecimal digit of
    the largest, each register looking up its own digit's tables (4 lookups a digit)."""
    v = np.asarray(v, np.uint32)
    n = np.asarray(n, np.int64)
    if n.size == 0 or v.size == 0:
        return v.copy()
    assert int(n.min()) >= 0 and int(n.max()) < (1 << _SHIFT_LEVELS)
    if n.ndim == 0 or bool(n.min() == n.max()):
        size = int(n.flat[0])
        for k in range(size.bit_length()):  # bounded by the 29 levels
            if (size >> k) & 1:
                v = _apply(_SHIFT[k], v)
        return v
    for d in range((int(n.max()).bit_length() + 3) // 4):  # bounded by the 8 digits
        at = ((n >> (4 * d)) & 15) << 8
        tables = _DIGIT[d]
        out: np.ndarray = tables[0][at + (v & 0xFF)] ^ tables[1][at + ((v >> 8) & 0xFF)]
        out ^= tables[2][at + ((v >> 16) & 0xFF)]
        out ^= tables[3][at + (v >> 24)]
        v = out
    return v


def _header_byte_tables() -> np.ndarray:
    """``_HEADER_BYTE[j][b]``: what byte ``b`` at offset ``j`` of a record header adds to the
    register after the header's 32 bytes (from register 0): its byte table carried over the
    31 - j bytes after it."""
    tables = np.zeros((fmt.RECORD_HEADER_SIZE, 256), np.uint32)
    for j in range(fmt.RECORD_HEADER_SIZE):
        tables[j] = shift(_BYTE, np.full(256, fmt.RECORD_HEADER_SIZE - 1 - j))
    return tables


_HEADER_BYTE = _header_byte_tables()


@functools.lru_cache(maxsize=256)
def _header_byte_shifted(j: int, n: int) -> np.ndarray:
    """``_HEADER_BYTE[j]`` carried over ``n`` more zero bytes (a payload of ``n`` bytes)."""
    return shift(_HEADER_BYTE[j], n)


def record_crcs(
    sizes: np.ndarray, payload_crcs: np.ndarray, *, lsn: int, timestamp: int, durable_lsn: int
) -> np.ndarray:
    """The CRC-32 (§4.2) of plain records (flags 0) with payloads of ``sizes`` bytes whose
    CRC-32s are ``payload_crcs``, lsns from ``lsn`` on, all with ``timestamp`` and
    ``durable_lsn``. The header bytes that are the same in every record (the timestamp, the
    durable mark, the high bytes of the lsns, the length if the sizes are equal) are folded into
    one register; the others are looked up per byte, for all records at once."""
    count = len(sizes)
    if count == 0:
        return np.zeros(0, np.uint32)
    sizes = np.asarray(sizes, np.int64)
    last = lsn + count - 1
    uniform = bool(sizes.min() == sizes.max())
    lsn_bytes = [j for j in range(8) if (lsn >> 8 * j) != (last >> 8 * j)]  # the lsn bytes that change
    fixed = bytearray(fmt.RECORD_HEADER.pack(int(sizes[0]) if uniform else 0, 0, lsn, timestamp, durable_lsn))
    for j in lsn_bytes:
        fixed[8 + j] = 0
    lsns = np.arange(lsn, lsn + count, dtype=np.uint64)
    varying = [(8 + j, ((lsns >> np.uint64(8 * j)) & np.uint64(0xFF)).astype(np.intp)) for j in lsn_bytes]
    if not uniform:
        varying += [(j, ((sizes >> (8 * j)) & 0xFF).astype(np.intp)) for j in range(4)]
    # The header's CRC is that of ``fixed`` xor the contributions of the varying bytes; the
    # record's, that carried over the payload, xor the payload's CRC.
    head = np.uint32(zlib.crc32(fixed))
    if uniform:  # one shift for all: fold it into the tables (the usual case: one payload size)
        n = int(sizes[0])
        crc: np.ndarray = np.asarray(payload_crcs, np.uint32) ^ shift(np.array([head], np.uint32), n)[0]
        for j, column in varying:
            crc ^= _header_byte_shifted(j, n)[column]
        return crc
    crc = np.full(count, head, np.uint32)
    for j, column in varying:
        crc ^= _HEADER_BYTE[j][column]
    crc = shift(crc, sizes)
    crc ^= np.asarray(payload_crcs, np.uint32)
    return crc


def payload_crcs(sizes: np.ndarray, data: memoryview) -> np.ndarray:
    """The CRC-32 of each of the payloads ``data`` holds back to back, ``sizes`` bytes each (in
    a task: one ``zlib.crc32`` a row, called from C; rows of one size are cut by
    ``struct.iter_unpack``, 40% faster than slices for 100-byte rows)."""
    count = len(sizes)
    crc32 = zlib.crc32
    if count and int(sizes.min()) == int(sizes.max()):
        size = int(sizes[0])
        if size == 0:
            return np.zeros(count, np.uint32)  # (the CRC-32 of no bytes)
        rows = struct.iter_unpack(f"{size}s", data)
        return np.fromiter(itertools.starmap(crc32, rows), np.uint32, count)
    ends = np.cumsum(sizes, dtype=np.int64)
    starts = (ends - sizes).tolist()
    return np.fromiter(map(crc32, map(data.__getitem__, map(slice, starts, ends.tolist()))), np.uint32, count)


@dataclass(frozen=True, slots=True)
class Framed:
    """Records framed as FORMAT.md §4.2 says, with what the log needs to write them as a batch:
    ``data`` the records back to back; ``count`` of them; ``last_size`` the bytes of the last;
    ``index`` the index entries (§5.2) they owe, encoded; ``due`` the next entry's offset."""

    data: memoryview
    count: int
    last_size: int
    index: bytes
    due: int


def frame(
    sizes: np.ndarray,
    data: memoryview,
    crcs: np.ndarray,
    *,
    lsn: int,
    timestamp: int,
    durable_lsn: int,
    offset: int,
    due: int,
    interval: int,
) -> Framed:
    """The records of payloads ``data`` (``sizes`` bytes each, back to back, their CRC-32s
    ``crcs``), plain (flags 0), the first with lsn ``lsn``, all with ``timestamp`` and
    ``durable_lsn``, written from segment ``offset`` on, where the next index entry is ``due``
    (every ``interval`` bytes): bytes equal to ``encode_record`` of each, and the entries a
    record-by-record walk would make (``ActiveSegment.write_batch``)."""
    records = frame_records(sizes, data, crcs, lsn=lsn, timestamp=timestamp, durable_lsn=durable_lsn)
    return with_index(sizes, records, lsn=lsn, timestamp=timestamp, offset=offset, due=due, interval=interval)


def frame_records(
    sizes: np.ndarray, data: memoryview, crcs: np.ndarray, *, lsn: int, timestamp: int, durable_lsn: int
) -> memoryview:
    """The framed records of ``frame``, without their index entries (which depend on where the
    block before ends): the costly part, which may run in another thread (numpy and pyarrow
    release the GIL in their loops)."""
    count = len(sizes)
    assert count > 0 and len(crcs) == count
    headers = np.empty(count, _HEADER)
    headers["length"] = sizes
    headers["flags"] = 0
    headers["lsn"] = np.arange(lsn, lsn + count, dtype=np.uint64)
    headers["ts"] = timestamp
    headers["durable"] = durable_lsn
    trailers = record_crcs(sizes, crcs, lsn=lsn, timestamp=timestamp, durable_lsn=durable_lsn).astype("<u4")
    size = int(sizes[0])
    if int(sizes.min()) == int(sizes.max()):  # one size: three strided copies (half the join's time)
        out = np.empty((count, size + fmt.RECORD_OVERHEAD), np.uint8)
        out[:, : fmt.RECORD_HEADER_SIZE] = headers.view(np.uint8).reshape(count, fmt.RECORD_HEADER_SIZE)
        out[:, fmt.RECORD_HEADER_SIZE : fmt.RECORD_HEADER_SIZE + size] = np.frombuffer(
            data, np.uint8, count * size
        ).reshape(count, size)
        out[:, fmt.RECORD_HEADER_SIZE + size :] = trailers.view(np.uint8).reshape(
            count, fmt.RECORD_TRAILER_SIZE
        )
        return out.reshape(-1).data
    offsets = np.empty(count + 1, np.int64)  # of the payloads in ``data``
    offsets[0] = 0
    np.cumsum(sizes, dtype=np.int64, out=offsets[1:])
    payloads = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    head = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(fmt.RECORD_HEADER_SIZE), count, [None, pa.py_buffer(headers)]
    )
    tail = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(fmt.RECORD_TRAILER_SIZE), count, [None, pa.py_buffer(trailers)]
    )
    joined = pc.binary_join_element_wise(  # type: ignore[attr-defined]
        head.cast(pa.large_binary()),
        payloads,
        tail.cast(pa.large_binary()),
        pa.scalar(b"", pa.large_binary()),
    )
    return memoryview(joined.buffers()[2])[: int(offsets[-1]) + count * fmt.RECORD_OVERHEAD]


def with_index(
    sizes: np.ndarray, records: memoryview, *, lsn: int, timestamp: int, offset: int, due: int, interval: int
) -> Framed:
    """``records`` (of ``frame_records``), written from segment ``offset`` on, with the index
    entries they owe (§5.2): the first record at or after ``due``, then every record that starts
    in a later interval than the one before it."""
    count = len(sizes)
    lengths = np.asarray(sizes, np.int64) + fmt.RECORD_OVERHEAD
    starts = np.empty(count, np.int64)
    starts[0] = offset
    np.cumsum(lengths[:-1], out=starts[1:])
    starts[1:] += offset
    index = b""
    later = np.flatnonzero(starts >= due)
    if len(later):
        first = int(later[0])
        bucket = starts // interval
        takes = np.concatenate(([first], first + 1 + np.flatnonzero(np.diff(bucket[first:]) > 0)))
        index = b"".join(
            fmt.encode_index_entry(lsn + int(i), timestamp, int(starts[i])) for i in takes.tolist()
        )
        due = (int(starts[takes[-1]]) // interval + 1) * interval
    return Framed(records, count, int(lengths[-1]), index, due)
