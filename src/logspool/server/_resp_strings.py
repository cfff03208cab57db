"""The RESP string commands (GET, SET, INCR, EXPIRE, SCAN...) and logspool's own (LS.LOCK,
LS.UNLOCK, LS.NOT, LS.TRUNCATE), parsed here and run by ``_resp_kv.RedisKV`` on the key-value store.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from . import _resp_wire as w
from ._resp_commands import COMMANDS, Command, _arity_error, _client_name, _int, _stream_name, command
from ._resp_kv import NOT_INTEGER, RedisError, canonical_int, key_of, parse_float

if TYPE_CHECKING:
    from ._resp import Session

SCAN_COUNT_MAX = 100_000  # keys one SCAN looks at


# --- keys and values ------------------------------------------------------------------------------
@command("GET", 2, "read")
def _get(s: Session, args: list[bytes]) -> bytes:
    key = key_of(args[1])
    with s.view() as v:
        return s.maybe(s.front.kv.get(v, key))


@command("MGET", -2, "read")
def _mget(s: Session, args: list[bytes]) -> bytes:
    keys = [key_of(a) for a in args[1:]]
    kv = s.front.kv
    out = []
    size = 0
    with s.view() as v:
        for key in keys:
            value = kv.get(v, key)
            out.append(s.maybe(value))
            size += 0 if value is None else len(value)
            if size > s.front.options.output_size_max:
                raise RedisError("ERR the reply would be larger than the output buffer limit")
    return w.array(out)


def _expiry(option: bytes, raw: bytes, now_ns: int) -> int:
    """The expiry (ns since the epoch) of an EX/PX/EXAT/PXAT option (Redis's checks)."""
    number = canonical_int(raw)
    if number is None:
        raise RedisError(NOT_INTEGER)
    if number <= 0:
        raise RedisError("ERR invalid expire time in 'set' command")
    if option == b"EX":
        return now_ns + number * 1_000_000_000
    if option == b"PX":
        return now_ns + number * 1_000_000
    if option == b"EXAT":
        return number * 1_000_000_000
    return number * 1_000_000  # PXAT


_EXPIRY_OPTIONS = (b"EX", b"PX", b"EXAT", b"PXAT")


@command("SET", -3, "write")
def _set(s: Session, args: list[bytes]) -> bytes:
    key = key_of(args[1])
    nx = xx = get = keepttl = False
    expiry: tuple[bytes, bytes] | None = None
    i = 3
    while i < len(args):
        option = args[i].upper()
        if option == b"NX" and not xx:
            nx = True
        elif option == b"XX" and not nx:
            xx = True
        elif option == b"GET":
            get = True
        elif option == b"KEEPTTL" and expiry is None:
            keepttl = True
        elif option in _EXPIRY_OPTIONS and expiry is None and not keepttl and i + 1 < len(args):
            expiry = (option, args[i + 1])
            i += 1
        else:
            raise RedisError("ERR syntax error")
        i += 1
    with s.decide() as d:
        at = None if expiry is None else _expiry(expiry[0], expiry[1], d.now)
        done, old = s.front.kv.set(d, key, args[2], expire_ns=at, keepttl=keepttl, nx=nx, xx=xx)
        if get:
            return s.maybe(None if old is None else d.value(old))
    return w.OK if done else s.nil()


@command("SETNX", 3, "write")
def _setnx(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(int(s.front.kv.set(d, key_of(args[1]), args[2], nx=True)[0]))


@command("SETEX", 4, "write")
def _setex(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        s.front.kv.set(d, key_of(args[1]), args[3], expire_ns=_expiry(b"EX", args[2], d.now))
    return w.OK


@command("PSETEX", 4, "write")
def _psetex(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        s.front.kv.set(d, key_of(args[1]), args[3], expire_ns=_expiry(b"PX", args[2], d.now))
    return w.OK


@command("GETSET", 3, "write")
def _getset(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        _, old = s.front.kv.set(d, key_of(args[1]), args[2])
        return s.maybe(None if old is None else d.value(old))


@command("GETDEL", 2, "write")
def _getdel(s: Session, args: list[bytes]) -> bytes:
    key = key_of(args[1])
    with s.decide() as d:
        entry = d.live(key)
        if entry is None:
            return s.nil()
        value = d.value(entry)
        s.front.kv.delete(d, [key])
        return w.bulk(value)


@command("GETEX", -2, "write")
def _getex(s: Session, args: list[bytes]) -> bytes:
    key = key_of(args[1])
    option = args[2].upper() if len(args) > 2 else None
    if (
        (option == b"PERSIST" and len(args) != 3)
        or (option in _EXPIRY_OPTIONS and len(args) != 4)
        or (option is not None and option != b"PERSIST" and option not in _EXPIRY_OPTIONS)
    ):
        raise RedisError("ERR syntax error")
    with s.decide() as d:
        entry = d.live(key)
        if entry is None:
            return s.nil()
        value = d.value(entry)
        if option == b"PERSIST":
            s.front.kv.expire(d, key, None)
        elif option is not None:
            s.front.kv.expire(d, key, _expiry(option, args[3], d.now))
        return w.bulk(value)


@command("MSET", -3, "write")
def _mset(s: Session, args: list[bytes]) -> bytes:
    if len(args) % 2 == 0:
        raise _arity_error(b"mset")
    pairs = [(key_of(args[i]), args[i + 1]) for i in range(1, len(args), 2)]
    with s.decide() as d:
        for key, _ in pairs:
            d.unlocked(key)
        for key, value in pairs:
            d.set(key, value)
    return w.OK


@command("MSETNX", -3, "write")
def _msetnx(s: Session, args: list[bytes]) -> bytes:
    if len(args) % 2 == 0:
        raise _arity_error(b"msetnx")
    pairs = [(key_of(args[i]), args[i + 1]) for i in range(1, len(args), 2)]
    with s.decide() as d:
        if any(d.live(key) is not None for key, _ in pairs):
            return w.ZERO
        for key, _ in pairs:
            d.unlocked(key)
        for key, value in pairs:
            d.set(key, value)
    return w.ONE


@command("DEL", -2, "write")
def _del(s: Session, args: list[bytes]) -> bytes:
    keys = [key_of(a) for a in args[1:]]
    with s.decide() as d:
        return w.integer(s.front.kv.delete(d, keys))


COMMANDS[b"UNLINK"] = Command(_del, -2, "write")


@command("EXISTS", -2, "read")
def _exists(s: Session, args: list[bytes]) -> bytes:
    keys = [key_of(a) for a in args[1:]]
    with s.view() as v:
        return w.integer(s.front.kv.exists(v, keys))


@command("TYPE", 2, "read")
def _type(s: Session, args: list[bytes]) -> bytes:
    raw = args[1]
    with s.view() as v:
        try:
            if v.live(key_of(raw)) is not None:
                return w.simple("string")
        except RedisError:
            pass
    with contextlib.suppress(RedisError):
        if s.front.streams.exists(_stream_name(raw)):
            return w.simple("stream")
    return w.simple("none")


def _incr(s: Session, key: bytes, amount: int) -> bytes:
    with s.decide() as d:
        return w.integer(s.front.kv.incr(d, key_of(key), amount))


@command("INCR", 2, "write")
def _incr1(s: Session, args: list[bytes]) -> bytes:
    return _incr(s, args[1], 1)


@command("DECR", 2, "write")
def _decr1(s: Session, args: list[bytes]) -> bytes:
    return _incr(s, args[1], -1)


@command("INCRBY", 3, "write")
def _incrby(s: Session, args: list[bytes]) -> bytes:
    return _incr(s, args[1], _int(args[2]))


@command("DECRBY", 3, "write")
def _decrby(s: Session, args: list[bytes]) -> bytes:
    amount = _int(args[2])
    if amount == -(1 << 63):
        raise RedisError("ERR decrement would overflow")
    return _incr(s, args[1], -amount)


@command("INCRBYFLOAT", 3, "write")
def _incrbyfloat(s: Session, args: list[bytes]) -> bytes:
    amount = parse_float(args[2])
    with s.decide() as d:
        return w.bulk(s.front.kv.incrbyfloat(d, key_of(args[1]), amount))


@command("APPEND", 3, "write")
def _append(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(s.front.kv.append(d, key_of(args[1]), args[2]))


@command("STRLEN", 2, "read")
def _strlen(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        return w.integer(s.front.kv.strlen(v, key_of(args[1])))


@command("GETRANGE", 4, "read")
def _getrange(s: Session, args: list[bytes]) -> bytes:
    start, end = _int(args[2]), _int(args[3])
    with s.view() as v:
        return w.bulk(s.front.kv.getrange(v, key_of(args[1]), start, end))


COMMANDS[b"SUBSTR"] = Command(_getrange, 4, "read")


@command("SETRANGE", 4, "write")
def _setrange(s: Session, args: list[bytes]) -> bytes:
    offset = _int(args[2])
    with s.decide() as d:
        return w.integer(s.front.kv.setrange(d, key_of(args[1]), offset, args[3]))


def _expire(s: Session, args: list[bytes], unit_ns: int, absolute: bool) -> bytes:
    key = key_of(args[1])
    number = _int(args[2])
    cond = None
    if len(args) == 4:
        cond = args[3].upper().decode(errors="replace")
        if cond not in ("NX", "XX", "GT", "LT"):
            raise RedisError(f"ERR Unsupported option {cond}")
    elif len(args) > 4:
        raise RedisError("ERR NX and XX, GT or LT options at the same time are not compatible")
    with s.decide() as d:
        at = number * unit_ns if absolute else d.now + number * unit_ns
        if not -(1 << 62) < at < (1 << 63):
            raise RedisError(
                f"ERR invalid expire time in '{args[0].decode(errors='replace').lower()}' command"
            )
        return w.integer(int(s.front.kv.expire(d, key, at, cond)))


@command("EXPIRE", -3, "write")
def _expire_s(s: Session, args: list[bytes]) -> bytes:
    return _expire(s, args, 1_000_000_000, False)


@command("PEXPIRE", -3, "write")
def _pexpire(s: Session, args: list[bytes]) -> bytes:
    return _expire(s, args, 1_000_000, False)


@command("EXPIREAT", -3, "write")
def _expireat(s: Session, args: list[bytes]) -> bytes:
    return _expire(s, args, 1_000_000_000, True)


@command("PEXPIREAT", -3, "write")
def _pexpireat(s: Session, args: list[bytes]) -> bytes:
    return _expire(s, args, 1_000_000, True)


@command("TTL", 2, "read")
def _ttl(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        ms = s.front.kv.pttl(v, key_of(args[1]))
    return w.integer(ms if ms < 0 else (ms + 500) // 1000)


@command("PTTL", 2, "read")
def _pttl(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        return w.integer(s.front.kv.pttl(v, key_of(args[1])))


@command("PERSIST", 2, "write")
def _persist(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(int(s.front.kv.expire(d, key_of(args[1]), None)))


@command("RENAME", 3, "write")
def _rename(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        s.front.kv.rename(d, key_of(args[1]), key_of(args[2]), nx=False)
    return w.OK


@command("RENAMENX", 3, "write")
def _renamenx(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(int(s.front.kv.rename(d, key_of(args[1]), key_of(args[2]), nx=True)))


@command("DBSIZE", 1, "read")
def _dbsize(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        return w.integer(s.front.kv.dbsize(v))


@command("SCAN", -2, "read")
def _scan(s: Session, args: list[bytes]) -> bytes:
    cursor = _int(args[1])
    pattern: bytes | None = None
    count = 10
    kind: bytes | None = None
    i = 2
    while i < len(args):
        option = args[i].upper()
        if i + 1 >= len(args):
            raise RedisError("ERR syntax error")
        if option == b"MATCH":
            pattern = args[i + 1]
        elif option == b"COUNT":
            count = _int(args[i + 1])
            if count < 1:
                raise RedisError("ERR syntax error")
        elif option == b"TYPE":
            kind = args[i + 1].lower()
        else:
            raise RedisError("ERR syntax error")
        i += 2
    after = None if cursor == 0 else s.front.cursor_key(cursor)
    with s.view() as v:
        keys, last = s.front.kv.scan(v, after, min(count, SCAN_COUNT_MAX), pattern)
    if kind is not None and kind != b"string":
        keys = []
    nxt = 0 if last is None else s.front.cursor_for(last)
    return w.array([w.bulk(b"%d" % nxt), w.bulks(keys)])


@command("KEYS", 2, "read")
def _keys(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        return w.bulks(s.front.kv.keys(v, args[1]))


def _flush(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 2 or (len(args) == 2 and args[1].upper() not in (b"ASYNC", b"SYNC")):
        raise RedisError("ERR syntax error")
    if not s.front.options.flushdb:
        raise RedisError("ERR FLUSHDB is disabled: start the daemon with --resp-flushdb to allow it")
    if s._tx is not None:
        s.front.kv.flush(s._tx, 1 << 62)
        return w.OK
    for _ in range(1 << 40):  # bounded: each turn deletes a batch or ends
        with s.decide() as d:
            if not s.front.kv.flush(d, 1000):
                return w.OK
    raise AssertionError("FLUSHDB did not end")


COMMANDS[b"FLUSHDB"] = Command(_flush, -1, "write")
COMMANDS[b"FLUSHALL"] = Command(_flush, -1, "write")


# --- logspool's own: LS.LOCK key owner [ttl_s], LS.UNLOCK key [owner] [FORCE], LS.NOT, LS.TRUNCATE --
@command("LS.LOCK", -3, "write")
def _lock(s: Session, args: list[bytes]) -> bytes:
    ttl = parse_float(args[3]) if len(args) > 3 else 30.0
    if len(args) > 4:
        raise RedisError("ERR syntax error")
    owner = _client_name(args[2])
    with s.decide() as d:
        return w.integer(s.front.kv.lock(d, key_of(args[1]), owner, ttl))


@command("LS.UNLOCK", -2, "write")
def _unlock(s: Session, args: list[bytes]) -> bytes:
    rest = args[2:]
    force = bool(rest) and rest[-1].upper() == b"FORCE"
    if force:
        rest = rest[:-1]
    if len(rest) > 1:
        raise RedisError("ERR syntax error")
    owner = _client_name(rest[0]) if rest else s.name
    with s.decide() as d:
        return w.integer(int(s.front.kv.unlock(d, key_of(args[1]), owner, force)))


@command("LS.NOT", 2, "write")
def _not(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(s.front.kv.flip(d, key_of(args[1])))


@command("LS.TRUNCATE", 3, "write")
def _truncate(s: Session, args: list[bytes]) -> bytes:
    size = _int(args[2])
    with s.decide() as d:
        return w.integer(s.front.kv.truncate(d, key_of(args[1]), size))
