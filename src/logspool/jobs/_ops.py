"""The job journal's op records and snapshot file: byte layouts, encode and decode. Pure: no I/O.

docs/FORMAT.md §14 is the specification; tests/golden checks this code against its vectors.

Longer than 600 lines on purpose: one op per journal format version, each with its layout, encoder
and decoder beside the others (the document's §14.1 table, in code).

Every op is one record of the journal's op log (a logspool log in ``DIR/ops``). Its lsn and
timestamp are the log record's: a job's id is the position of the put that created it in the op
log (INDEX_BITS below; its place in arrival order), and a lease's token is the position of its
grant, so ids and tokens only grow and a stale token can never match again. Integers are
little-endian; times are nanoseconds since the Unix epoch (signed 64-bit); strings are UTF-8 with
a 16-bit byte length.
A decision that depends on the clock or on settings (which job to take, whether a nack is the last
delivery) is made by the writer and recorded in the op, so replaying the ops is deterministic.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .. import _format as fmt
from .. import limits
from ..errors import CorruptionError, UnsupportedVersionError

# --- op types ------------------------------------------------------------------------------------
PUT = 1
TAKE = 2
ACK = 3
NACK = 4
EXTEND = 5
EXPIRE = 6
DEAD = 7
RETRY = 8
PURGE = 9
CANCEL = 10
CONFIG = 11
RELEASE = 12  # journal version 2
TAKE_MANY = 13  # journal version 3
ACK_MANY = 14  # journal version 3
PUT_MANY = 15  # journal version 4
OP_NAMES = {
    PUT: "put",
    TAKE: "take",
    ACK: "ack",
    NACK: "nack",
    EXTEND: "extend",
    EXPIRE: "expire",
    DEAD: "dead",
    RETRY: "retry",
    PURGE: "purge",
    CANCEL: "cancel",
    CONFIG: "config",
    RELEASE: "release",
    TAKE_MANY: "take_many",
    ACK_MANY: "ack_many",
    PUT_MANY: "put_many",
}
# A TAKE_MANY at lsn L grants its i-th job the lease token (L << INDEX_BITS) | i, which is also
# the fairness memory of that job's (priority, domain): one order for every lease, growing with
# lsn and, within the op, with the order of the picks. (A TAKE's token is its lsn, smaller than
# any TAKE_MANY's that follows it.) Likewise the i-th put of a PUT_MANY at lsn L creates job id
# (L << INDEX_BITS) | i (a PUT's job id is its lsn, smaller than any PUT_MANY's after it).
INDEX_BITS = 16
LIST_MAX = 1 << INDEX_BITS  # entries of a list op (TAKE_MANY, ACK_MANY, PUT_MANY)


def item_id(lsn: int, index: int) -> int:
    """The id of the ``index``-th item of the list op at ``lsn``: a PUT_MANY's job id, a
    TAKE_MANY's lease token (index 0 is also a PUT's id: its lsn shifted)."""
    return lsn << INDEX_BITS | index


# How a put that finds a pending job for its key merges priority and not_before (2 bits each).
REPLACE = 0
KEEP = 1
EARLIEST = 2  # the value that runs first: the smaller priority number, the earlier time
LATEST = 3
MERGES = {"replace": REPLACE, "keep": KEEP, "earliest": EARLIEST, "latest": LATEST}

_new_tuple = tuple.__new__
_PUT = struct.Struct("<BBBxqqHH")  # type, merge, priority, 0, not_before, ttl_until (0: none), sizes
_ID = struct.Struct("<B7xQ")  # type, 0, job id                      (EXPIRE, PURGE, CANCEL)
_ID_TIME = struct.Struct("<B7xQq")  # type, 0, job id, time          (TAKE: lease_until; RETRY: not_before)
_ID_TOKEN = struct.Struct("<B7xQQ")  # type, 0, job id, token        (ACK, RELEASE)
_ID_TOKEN_TIME = struct.Struct("<B7xQQq")  # type, 0, id, token, time (EXTEND: lease_until)
_NACK = struct.Struct("<BB6xQQqH")  # type, dead, 0, id, token, not_before, error size; error
_DEAD = struct.Struct("<B7xQH")  # type, 0, job id, reason size; reason
_CONFIG = struct.Struct("<B7xI")  # type, 0, max_deliveries
_TAKE_MANY = struct.Struct("<B7xqI")  # type, 0, lease_until, count; then count job ids (u64)
_ACK_MANY = struct.Struct("<B7xI")  # type, 0, count; then count (job id u64, token u64)
# type, merge, priority, 0, count, not_before, ttl_until (0: none); then count items, each
# _PUT_ITEM (key size, domain size, payload size) and the key, domain and payload
_PUT_MANY = struct.Struct("<BBBxIqq")
_PUT_ITEM = struct.Struct("<HHI")
PUT_MANY_HEAD = _PUT_MANY.size
PUT_ITEM_HEAD = _PUT_ITEM.size


class Put(NamedTuple):
    key: str
    domain: str
    payload: bytes
    priority: int
    not_before_ns: int
    ttl_until_ns: int  # 0: no TTL
    priority_merge: int
    not_before_merge: int


class PutMany(NamedTuple):
    """Puts with the same options, in order (version 4): the i-th (key, domain, payload) creates
    job ``(lsn << INDEX_BITS) | i`` if its key has no pending job. Fields as ``Put``."""

    items: tuple[tuple[str, str, bytes], ...]
    priority: int
    not_before_ns: int
    ttl_until_ns: int
    priority_merge: int
    not_before_merge: int


class Take(NamedTuple):
    job_id: int
    lease_until_ns: int


class Ack(NamedTuple):
    job_id: int
    token: int


class Nack(NamedTuple):
    job_id: int
    token: int
    not_before_ns: int
    dead: bool  # the writer found this the last allowed delivery: the job goes to the dead letters
    error: str


class Extend(NamedTuple):
    job_id: int
    token: int
    lease_until_ns: int


class Expire(NamedTuple):
    job_id: int


class Dead(NamedTuple):
    job_id: int
    reason: str


class Retry(NamedTuple):
    job_id: int
    not_before_ns: int


class Purge(NamedTuple):
    job_id: int


class Cancel(NamedTuple):
    job_id: int


class Config(NamedTuple):
    max_deliveries: int


class Release(NamedTuple):
    """A leased job given back unstarted: pending again at its place, the delivery not counted."""

    job_id: int
    token: int


class TakeMany(NamedTuple):
    """Leases for jobs, in the order they were picked (version 3): the i-th gets token
    ``(lsn << INDEX_BITS) | i``."""

    job_ids: tuple[int, ...]
    lease_until_ns: int


class AckMany(NamedTuple):
    """Acks, each as ACK (version 3)."""

    job_ids: tuple[int, ...]
    tokens: tuple[int, ...]


Op = (
    Put
    | Take
    | Ack
    | Nack
    | Extend
    | Expire
    | Dead
    | Retry
    | Purge
    | Cancel
    | Config
    | Release
    | TakeMany
    | AckMany
    | PutMany
)


def utf8(text: str, what: str, size_max: int) -> bytes:
    """``text`` as UTF-8, checked against its bound (a ValueError naming ``what``)."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, not {type(text).__name__}")
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > size_max:
        raise ValueError(f"{what} is {len(data)} bytes of UTF-8; at most {size_max} are allowed")
    return data


def cut_utf8(text: str, size_max: int) -> bytes:
    """``text`` as UTF-8 cut to at most ``size_max`` bytes, at a character boundary."""
    data = text.encode("utf-8", "replace")
    if len(data) <= size_max:
        return data
    return data[:size_max].decode("utf-8", "ignore").encode("utf-8")


def encode_put_many(op: PutMany, size_max: int) -> list[tuple[bytes, int]]:
    """``op`` as PUT_MANY records of at most ``size_max`` bytes and LIST_MAX puts each (a put
    larger than ``size_max`` on its own is one record, which the log refuses): (record payload,
    puts in it) in order. Arguments are assumed checked by the caller (jobs._journal)."""
    merge = op.priority_merge | op.not_before_merge << 2
    out: list[tuple[bytes, int]] = []
    parts: list[bytes] = []
    size = PUT_MANY_HEAD
    count = 0

    def flush() -> None:
        head = _PUT_MANY.pack(PUT_MANY, merge, op.priority, count, op.not_before_ns, op.ttl_until_ns)
        out.append((b"".join((head, *parts)), count))

    pack = _PUT_ITEM.pack
    for key, domain, payload in op.items:
        key_raw = key.encode("utf-8", "surrogatepass")
        domain_raw = domain.encode("utf-8", "surrogatepass")
        item = PUT_ITEM_HEAD + len(key_raw) + len(domain_raw) + len(payload)
        if count and (count == LIST_MAX or size + item > size_max):
            flush()
            parts, size, count = [], PUT_MANY_HEAD, 0
        parts += (pack(len(key_raw), len(domain_raw), len(payload)), key_raw, domain_raw, payload)
        size += item
        count += 1
    if count:
        flush()
    return out


def encode(op: Op) -> bytes:
    """The record payload of ``op``. Arguments are assumed checked by the caller (jobs._journal)."""
    if isinstance(op, PutMany):
        [(record, _)] = encode_put_many(op, 1 << 62)
        return record
    if isinstance(op, Put):
        key = op.key.encode("utf-8", "surrogatepass")
        domain = op.domain.encode("utf-8", "surrogatepass")
        merge = op.priority_merge | op.not_before_merge << 2
        head = _PUT.pack(PUT, merge, op.priority, op.not_before_ns, op.ttl_until_ns, len(key), len(domain))
        return b"".join((head, key, domain, op.payload))
    if isinstance(op, Take):
        return _ID_TIME.pack(TAKE, op.job_id, op.lease_until_ns)
    if isinstance(op, Ack):
        return _ID_TOKEN.pack(ACK, op.job_id, op.token)
    if isinstance(op, Nack):
        error = cut_utf8(op.error, limits.JOB_ERROR_SIZE_MAX)
        return _NACK.pack(NACK, op.dead, op.job_id, op.token, op.not_before_ns, len(error)) + error
    if isinstance(op, Extend):
        return _ID_TOKEN_TIME.pack(EXTEND, op.job_id, op.token, op.lease_until_ns)
    if isinstance(op, Expire):
        return _ID.pack(EXPIRE, op.job_id)
    if isinstance(op, Dead):
        reason = cut_utf8(op.reason, limits.JOB_ERROR_SIZE_MAX)
        return _DEAD.pack(DEAD, op.job_id, len(reason)) + reason
    if isinstance(op, Retry):
        return _ID_TIME.pack(RETRY, op.job_id, op.not_before_ns)
    if isinstance(op, Purge):
        return _ID.pack(PURGE, op.job_id)
    if isinstance(op, Cancel):
        return _ID.pack(CANCEL, op.job_id)
    if isinstance(op, Config):
        return _CONFIG.pack(CONFIG, op.max_deliveries)
    if isinstance(op, Release):
        return _ID_TOKEN.pack(RELEASE, op.job_id, op.token)
    if isinstance(op, TakeMany):
        n = len(op.job_ids)
        return _TAKE_MANY.pack(TAKE_MANY, op.lease_until_ns, n) + struct.pack(f"<{n}Q", *op.job_ids)
    if isinstance(op, AckMany):
        n = len(op.job_ids)
        flat = [x for pair in zip(op.job_ids, op.tokens, strict=True) for x in pair]
        return _ACK_MANY.pack(ACK_MANY, n) + struct.pack(f"<{2 * n}Q", *flat)
    raise TypeError(f"not an op: {op!r}")  # pragma: no cover - our own bug


def _text(buf: bytes, start: int, size: int, where: str, what: str) -> tuple[str, int]:
    end = start + size
    if end > len(buf):
        raise CorruptionError(where, start, f"{what} runs past the end of the op ({end} > {len(buf)})")
    try:
        return buf[start:end].decode("utf-8", "surrogatepass"), end
    except UnicodeDecodeError as err:
        raise CorruptionError(where, start, f"{what} is not UTF-8: {err}") from err


def _check_count(buf: bytes, where: str, count: int, head: int, each: int | None) -> None:
    """A list op's count against its size: from 1 to LIST_MAX entries, exactly filling it (if
    entries are ``each`` bytes)."""
    if not 1 <= count <= LIST_MAX:
        raise CorruptionError(where, head - 4, f"{OP_NAMES[buf[0]]} op of {count} entries (1..{LIST_MAX})")
    if each is not None and len(buf) != head + count * each:
        raise CorruptionError(
            where,
            head,
            f"{OP_NAMES[buf[0]]} op of {count} entries is {len(buf)} bytes, not {head + count * each}",
        )


def decode(buf: bytes, where: str) -> Op:
    """The op in a record payload. ``where`` names the record in errors (path and lsn).

    CorruptionError if the bytes are not a well-formed op; UnsupportedVersionError for an op type
    this code does not know (a newer version wrote it)."""
    if not buf:
        raise CorruptionError(where, 0, "empty op record")
    kind = buf[0]
    try:
        if kind == PUT_MANY:
            return _decode_put_many(buf, where)
        if kind == PUT:
            _, merge, priority, not_before, ttl_until, key_size, domain_size = _PUT.unpack_from(buf)
            at = _PUT.size + key_size
            end = at + domain_size
            if end > len(buf) or merge > 0xF:
                _text(buf, _PUT.size, key_size, where, "key")
                _text(buf, at, domain_size, where, "domain")
                raise CorruptionError(where, 1, f"unknown merge bits 0x{merge:02x}")
            try:
                key = buf[_PUT.size : at].decode("utf-8", "surrogatepass")
                domain = buf[at:end].decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                _text(buf, _PUT.size, key_size, where, "key")
                _text(buf, at, domain_size, where, "domain")
                raise  # pragma: no cover - one of the two raised
            # (tuple.__new__: half the cost of Put(...), and every process folds every put)
            fields = (key, domain, buf[end:], priority, not_before, ttl_until, merge & 3, merge >> 2)
            return _new_tuple(Put, fields)
        if kind == TAKE:
            _, job_id, lease_until = _ID_TIME.unpack_from(buf)
            return Take(job_id, lease_until)
        if kind == ACK:
            _, job_id, token = _ID_TOKEN.unpack_from(buf)
            return Ack(job_id, token)
        if kind == NACK:
            _, dead, job_id, token, not_before, error_size = _NACK.unpack_from(buf)
            error, _ = _text(buf, _NACK.size, error_size, where, "error")
            return Nack(job_id, token, not_before, bool(dead), error)
        if kind == EXTEND:
            _, job_id, token, lease_until = _ID_TOKEN_TIME.unpack_from(buf)
            return Extend(job_id, token, lease_until)
        if kind in (EXPIRE, PURGE, CANCEL):
            _, job_id = _ID.unpack_from(buf)
            return Expire(job_id) if kind == EXPIRE else Purge(job_id) if kind == PURGE else Cancel(job_id)
        if kind == DEAD:
            _, job_id, reason_size = _DEAD.unpack_from(buf)
            reason, _ = _text(buf, _DEAD.size, reason_size, where, "reason")
            return Dead(job_id, reason)
        if kind == RETRY:
            _, job_id, not_before = _ID_TIME.unpack_from(buf)
            return Retry(job_id, not_before)
        if kind == CONFIG:
            _, max_deliveries = _CONFIG.unpack_from(buf)
            return Config(max_deliveries)
        if kind == RELEASE:
            _, job_id, token = _ID_TOKEN.unpack_from(buf)
            return Release(job_id, token)
        if kind == TAKE_MANY:
            _, lease_until, count = _TAKE_MANY.unpack_from(buf)
            _check_count(buf, where, count, _TAKE_MANY.size, 8)
            return TakeMany(struct.unpack_from(f"<{count}Q", buf, _TAKE_MANY.size), lease_until)
        if kind == ACK_MANY:
            (_, count) = _ACK_MANY.unpack_from(buf)
            _check_count(buf, where, count, _ACK_MANY.size, 16)
            flat = struct.unpack_from(f"<{2 * count}Q", buf, _ACK_MANY.size)
            return AckMany(flat[0::2], flat[1::2])
    except struct.error as err:
        raise CorruptionError(where, 0, f"{OP_NAMES[kind]} op of {len(buf)} bytes is too short") from err
    raise UnsupportedVersionError(where, kind, max(OP_NAMES))


def _decode_put_many(buf: bytes, where: str) -> PutMany:
    _, merge, priority, count, not_before, ttl_until = _PUT_MANY.unpack_from(buf)
    _check_count(buf, where, count, 8, None)
    if merge > 0xF:
        raise CorruptionError(where, 1, f"unknown merge bits 0x{merge:02x}")
    items = []
    unpack = _PUT_ITEM.unpack_from
    end = len(buf)
    at = PUT_MANY_HEAD
    for i in range(count):
        key_size, domain_size, payload_size = unpack(buf, at)  # (struct.error: too short)
        k = at + PUT_ITEM_HEAD
        d = k + key_size
        p = d + domain_size
        at = p + payload_size
        if at > end:
            raise CorruptionError(where, k - PUT_ITEM_HEAD, f"put {i} of {count} runs past the end of the op")
        try:
            key = buf[k:d].decode("utf-8", "surrogatepass")
            domain = buf[d:p].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as err:
            raise CorruptionError(where, k, f"put {i} of {count}: key or domain is not UTF-8: {err}") from err
        items.append((key, domain, buf[p:at]))
    if at != end:
        raise CorruptionError(where, at, f"{end - at} bytes after the last of {count} puts")
    return PutMany(tuple(items), priority, not_before, ttl_until, merge & 3, merge >> 2)


# --- snapshot file ---------------------------------------------------------------------------------
# A snapshot holds the whole state after every op below ``next_lsn``: the settings, the counters,
# the fairness memory and every job. Written to a temporary file, fsynced and renamed (FORMAT.md
# §14.3); a reader checks the header CRC and the body CRC before believing any of it.
SNAPSHOT_MAGIC = b"LSJOBSNP"
SNAPSHOT_VERSION = 1
# magic, version, header size, next_lsn, max_deliveries, job count, counter count, served count,
# body size, body crc32, header crc32 (over the bytes before it)
SNAPSHOT_HEADER = struct.Struct("<8sHHQIIIIQII")
SNAPSHOT_HEADER_SIZE = SNAPSHOT_HEADER.size
# A job: id, token, not_before, ttl_until, lease_until, created, updated, deliveries, priority,
# state, merge 0, sizes of key, domain, error, payload; then key, domain, error, payload.
SNAPSHOT_JOB = struct.Struct("<QQqqqqqIBBxxHHHI")
# A counter: name size, value; name.   A served entry: priority, domain size, lsn; domain.
SNAPSHOT_COUNTER = struct.Struct("<HQ")
SNAPSHOT_SERVED = struct.Struct("<BxHQ")

PENDING = 0
LEASED = 1
DEAD_LETTER = 2
STATES = {PENDING: "pending", LEASED: "leased", DEAD_LETTER: "dead"}


class JobRow(NamedTuple):
    """One job as a snapshot stores it (the journal's internal record of a job)."""

    id: int
    key: str
    domain: str
    payload: bytes
    priority: int
    state: int
    not_before_ns: int
    ttl_until_ns: int
    deliveries: int
    token: int
    lease_until_ns: int
    created_ns: int
    updated_ns: int
    error: str


class Snapshot(NamedTuple):
    next_lsn: int
    max_deliveries: int
    counters: dict[str, int]
    served: dict[tuple[int, str], int]  # (priority, domain) -> lsn of the last TAKE it got
    jobs: list[JobRow]


def encode_snapshot(snap: Snapshot) -> bytes:
    parts: list[bytes] = []
    for name, value in sorted(snap.counters.items()):
        raw = name.encode()
        parts.append(SNAPSHOT_COUNTER.pack(len(raw), value) + raw)
    for (priority, domain), lsn in sorted(snap.served.items()):
        raw = domain.encode("utf-8", "surrogatepass")
        parts.append(SNAPSHOT_SERVED.pack(priority, len(raw), lsn) + raw)
    for job in snap.jobs:
        key = job.key.encode("utf-8", "surrogatepass")
        domain_raw = job.domain.encode("utf-8", "surrogatepass")
        error_raw = job.error.encode("utf-8", "surrogatepass")
        head = SNAPSHOT_JOB.pack(
            job.id,
            job.token,
            job.not_before_ns,
            job.ttl_until_ns,
            job.lease_until_ns,
            job.created_ns,
            job.updated_ns,
            job.deliveries,
            job.priority,
            job.state,
            len(key),
            len(domain_raw),
            len(error_raw),
            len(job.payload),
        )
        parts.append(b"".join((head, key, domain_raw, error_raw, job.payload)))
    body = b"".join(parts)
    header = SNAPSHOT_HEADER.pack(
        SNAPSHOT_MAGIC,
        SNAPSHOT_VERSION,
        SNAPSHOT_HEADER_SIZE,
        snap.next_lsn,
        snap.max_deliveries,
        len(snap.jobs),
        len(snap.counters),
        len(snap.served),
        len(body),
        fmt.crc32(body),
        0,
    )
    header = header[:-4] + struct.pack("<I", fmt.crc32(header[:-4]))
    return header + body


def decode_snapshot(buf: bytes, path: str) -> Snapshot:
    """The snapshot in ``buf`` (a whole file). CorruptionError naming ``path`` and the offset of the
    first thing that fails a check; UnsupportedVersionError for a newer version."""
    if len(buf) < SNAPSHOT_HEADER_SIZE:
        raise CorruptionError(path, 0, f"snapshot of {len(buf)} bytes is shorter than its header")
    (
        magic,
        version,
        header_size,
        next_lsn,
        max_deliveries,
        n_jobs,
        n_counters,
        n_served,
        size,
        body_crc,
        crc,
    ) = SNAPSHOT_HEADER.unpack_from(buf)
    if magic != SNAPSHOT_MAGIC:
        raise CorruptionError(path, 0, f"bad magic {magic!r} (expected {SNAPSHOT_MAGIC!r})")
    if fmt.crc32(buf[: SNAPSHOT_HEADER_SIZE - 4]) != crc:
        raise CorruptionError(path, 0, "snapshot header checksum mismatch")
    if version > SNAPSHOT_VERSION:
        raise UnsupportedVersionError(path, version, SNAPSHOT_VERSION)
    if header_size < SNAPSHOT_HEADER_SIZE or header_size + size != len(buf):
        raise CorruptionError(
            path, 0, f"snapshot sizes disagree: header {header_size} + body {size} != file {len(buf)}"
        )
    body = memoryview(buf)[header_size:]
    if fmt.crc32(body) != body_crc:
        raise CorruptionError(path, header_size, "snapshot body checksum mismatch")
    at = 0

    def need(n: int) -> None:
        if at + n > len(body):
            raise CorruptionError(path, header_size + at, f"snapshot body ends inside an entry ({n} bytes)")

    def text(n: int) -> str:
        nonlocal at
        need(n)
        try:
            value = bytes(body[at : at + n]).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as err:  # damage: the fold then tries the older snapshot
            raise CorruptionError(path, header_size + at, f"snapshot text is not UTF-8: {err}") from None
        at += n
        return value

    counters: dict[str, int] = {}
    for _ in range(n_counters):
        need(SNAPSHOT_COUNTER.size)
        name_size, value = SNAPSHOT_COUNTER.unpack_from(body, at)
        at += SNAPSHOT_COUNTER.size
        counters[text(name_size)] = value
    served: dict[tuple[int, str], int] = {}
    for _ in range(n_served):
        need(SNAPSHOT_SERVED.size)
        priority, domain_size, lsn = SNAPSHOT_SERVED.unpack_from(body, at)
        at += SNAPSHOT_SERVED.size
        served[(priority, text(domain_size))] = lsn
    jobs: list[JobRow] = []
    for _ in range(n_jobs):
        need(SNAPSHOT_JOB.size)
        (jid, token, nb, ttl, lease, created, updated, deliveries, priority, state, ks, ds, es, ps) = (
            SNAPSHOT_JOB.unpack_from(body, at)
        )
        if state not in STATES:
            raise CorruptionError(path, header_size + at, f"job {jid} has unknown state {state}")
        at += SNAPSHOT_JOB.size
        key = text(ks)
        domain = text(ds)
        error = text(es)
        need(ps)
        payload = bytes(body[at : at + ps])
        at += ps
        jobs.append(
            JobRow(
                jid,
                key,
                domain,
                payload,
                priority,
                state,
                nb,
                ttl,
                deliveries,
                token,
                lease,
                created,
                updated,
                error,
            )
        )
    if at != len(body):
        raise CorruptionError(path, header_size + at, f"{len(body) - at} bytes after the last snapshot entry")
    return Snapshot(next_lsn, max_deliveries, counters, served, jobs)
