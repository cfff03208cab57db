"""Redis's string commands on a logspool key-value store (``kv.Store``): what the RESP front door
(``_resp.py``) runs for GET, SET, INCR, APPEND, EXPIRE and the rest. docs/RESP.md is the user's
view; this is the mechanism.

**Values.** A Redis client sends and receives bytes. A value written over RESP is stored as an
*integer* when its bytes are an integer in canonical form (what Redis itself stores as an integer:
optional ``-``, no leading zero, no ``+`` or spaces, 64 bits signed: ``10``, ``-3``, not ``010``
or ``1.0``), else as *bytes*. A canonical integer prints back as exactly the bytes it was read
from, so every value round-trips byte for byte, and INCR on it is an addition of the store's
own integer type (which an embedded ``kv.open`` or the native client see as an ``int``). Values
set by other means read as bytes: a string as its UTF-8, an integer in decimal, a float in its
shortest round-trip decimal form (``10.5``), a boolean as ``1`` or ``0``, void as empty.

**Keys** are the store's: non-empty UTF-8 text of at most 4 KiB. Bytes that are not UTF-8, or an
empty key, get an error reply (Redis keys are any bytes; logspool's are text, shared with the
native protocol and embedded users).

**Decisions.** Every write is one decision of the store (``_decide``: under its writer lock, after
reading every op of every process), so INCR, APPEND, SET NX/GET and the rest are atomic for all
processes; a MULTI/EXEC (or an MSET) is one decision, written in one write. Decisions here do not
wait for their fsync (``durable=False``): the RESP committer runs a round of commands from every
connection in one decision and calls ``sync`` once, before any of their replies is sent, so an
acknowledged write is durable (with the store's ``durability="always"``) and a round of N writes
costs one fsync.

The read-modify-writes of a value's bytes (APPEND, SETRANGE, INCRBYFLOAT, LS.TRUNCATE) are the
store's public ``Store.modify(key, fn)``, which joins the decision open on its thread (the
commit round). The rest still reaches into ``kv.Store``'s decision machinery (``_change``,
``_state``, the op classes of ``kv._ops``): a commit round of many connections' commands is one
decision, and SET's options, EXPIRE, RENAME, locks and a transaction read entries and their
times where the store's public calls offer no such view. It writes only the ops of FORMAT.md §15
(SET, UPDATE, DELETE, TOUCH, RENAME, LOCK, UNLOCK), exactly as the store's own calls would, so
every process folds them the same way. (What would let it use the public API alone: a public
decision, ``with store.transaction()``, whose calls join it; issue 34.)
"""

from __future__ import annotations

import itertools
import re
import struct
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .. import kv, limits
from ..errors import KeyLockedError
from ..kv import _ops as ops
from ..kv._state import Entry

_NS = 1_000_000_000
_INT = struct.Struct("<q")
_FLOAT = struct.Struct("<d")
_FLOAT_RE = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TUPLE_NEW = tuple.__new__  # (Decision.plain_set_op)
# The largest key count KEYS answers with (SCAN pages through any number).
KEYS_REPLY_MAX = 100_000


class RedisError(Exception):
    """An error reply: ``str(err)`` starts with its code (``ERR``, ``WRONGTYPE``...)."""


NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
TOO_BIG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"


def key_of(raw: bytes) -> str:
    """A store key from a Redis key's bytes (RedisError if the store cannot hold it)."""
    try:
        key = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RedisError("ERR logspool keys are UTF-8 text; this key's bytes are not") from None
    if not key:
        raise RedisError("ERR logspool keys are not empty")
    if len(raw) > limits.KV_KEY_SIZE_MAX:
        raise RedisError(f"ERR key of {len(raw)} bytes is over the limit of {limits.KV_KEY_SIZE_MAX}")
    return key


def canonical_int(value: bytes) -> int | None:
    """The integer ``value`` spells in canonical form (Redis's string2ll rules), else None."""
    n = len(value)
    if not 0 < n <= 20:
        return None
    if value.isdigit():
        if n > 1 and value[0] == 48:  # a leading zero
            return None
    elif value[0] == 45 and n > 1 and value[1:].isdigit():  # "-"
        if value[1] == 48:  # "-0", "-01"
            return None
    else:
        return None
    number = int(value)
    return number if ops.INT_MIN <= number <= ops.INT_MAX else None


def format_float(value: float) -> bytes:
    """A float as Redis prints INCRBYFLOAT's result: plain decimal, no exponent, no ``.0``."""
    text = repr(value)
    if "e" in text or "E" in text:
        text = format(Decimal(text), "f")
    if text.endswith(".0"):
        text = text[:-2]
    return text.encode()


def parse_float(value: bytes) -> float:
    if not _FLOAT_RE.fullmatch(value):
        raise RedisError(NOT_FLOAT)
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise RedisError(NOT_FLOAT)
    return number


def to_bytes(vtype: int, raw: bytes) -> bytes:
    """The bytes a Redis client reads for a stored value (see the module docstring)."""
    if vtype == ops.BYTES or vtype == ops.STRING:
        return raw
    if vtype == ops.INTEGER:
        return b"%d" % _INT.unpack(raw)[0]
    if vtype == ops.FLOAT:
        return format_float(_FLOAT.unpack(raw)[0])
    if vtype == ops.BOOLEAN:
        return b"1" if raw == b"\x01" else b"0"
    return b""


def from_bytes(value: bytes) -> tuple[int, bytes]:
    """The stored (type, bytes) of a value a Redis client sent."""
    number = canonical_int(value) if len(value) <= 20 else None
    if number is not None:
        return ops.INTEGER, _INT.pack(number)
    if len(value) > limits.KV_VALUE_SIZE_MAX:
        raise RedisError(TOO_BIG)
    return ops.BYTES, value


def _python_to_bytes(value: ops.Value) -> bytes:
    vtype, raw = ops.encode_value(value)
    return to_bytes(vtype, raw)


class NotHere(Exception):
    """A read run on the event loop met what would make it write (a touch TTL's extension is
    an op, and a decision may wait for another process's writer lock): its batch runs in the
    pool instead (``Server.read``: durable before the reply goes). Raised before anything of
    the batch is written."""


def durable_entry(store: kv.Store, key: str, *, data: bool = True, touch: bool = True) -> kv.Value | None:
    """``store.entry``, for a daemon's read in its pool: a touch TTL's extension that the read
    records (a TOUCH op, written without waiting for its fsync) is durable before the store's
    mutex is let go, so no read of the store, on the event loop (which takes the mutex only
    when it is free) or in the pool, shows the new expiry before a crash could no longer take
    it back; and the read's own reply follows it. One fsync a touch recorded (Redis's GETEX
    costs one too)."""
    with store._mutex:
        found = store.entry(key, data=data, touch=touch)
        if touch and found is not None and found.touch and store._always:
            store._log.sync(gather=False)  # (nothing to do if no touch was written: at once)
        return found


class View:
    """The store's state, current, for one command (or a transaction): under the store's mutex.
    A ``Decision`` also holds the writer lock and can write."""

    on_loop = False  # (a read of a batch run on the event loop: it never writes, ``NotHere``)

    def __init__(self, store: kv.Store, now: int, owner: str | None) -> None:
        self.store = store
        self.state = store._state
        self.now = now
        self.owner = owner

    def live(self, key: str) -> Entry | None:
        return self.state.live(key, self.now)

    def raw(self, entry: Entry) -> bytes:
        return self.store._bytes(entry)

    def value(self, entry: Entry) -> bytes:
        return to_bytes(entry.vtype, self.store._bytes(entry))

    def plain_set_op(self, key: str, vtype: int, raw: bytes, owner: str | None) -> ops.Set | None:
        """The op of a SET of ``key`` with no option (no expiry, persisted, overwriting), made as
        ``kv.Store.set`` makes it, not written: the request time now, never older than the key's
        last write. None if an owner other than ``owner`` holds a lock on the key. (Both doors'
        commit rounds make their plain SETs' ops so, and write them with one ``write_many``: a
        ``Decision``'s, or an ``Alone``'s for a round of plain SETs only.)"""
        state = self.state
        now = self.now
        if state.locks:
            lock = state.lock_of(key, now)
            if lock is not None and lock[0] != owner:
                return None
        if type(raw) is not bytes:  # (an op of ``Alone`` is applied as made: exact, ``kv.Store._exact``)
            return None
        last = state.last_ts(key)
        # (built as the tuple it is: a NamedTuple's own __new__ is a Python function, a tenth of
        # the op's making)
        return _TUPLE_NEW(
            ops.Set, (key, vtype, raw, now if last is None or last < now else last, 0, 0, False)
        )


class Decision(View):
    def __init__(self, store: kv.Store, writer: object, now: int, owner: str | None) -> None:
        super().__init__(store, now, owner)
        self.w = writer

    def write(self, op: ops.Op) -> None:
        self.w.write(op)  # type: ignore[attr-defined]

    def write_many(self, made: list[ops.Set]) -> None:
        """Write the ops of plain SETs (``plain_set_op``) in one call (each checked before any is
        applied: an error writes none), applied by ``State.apply_plain``: nothing here holds an
        entry of the state."""
        # (the state's function now: ``self.state`` is the one this decision began with)
        self.w.write_many(made, self.store._state.apply_plain)  # type: ignore[attr-defined]

    def unlocked(self, key: str) -> None:
        """KeyLockedError if another owner than this connection's name holds a lock on ``key``."""
        self.store._unlocked(key, self.owner, self.now)

    def stamp(self, key: str) -> int:
        return self.store._stamp(key, None, self.now) or self.now

    def set(self, key: str, value: bytes, expire_ns: int = 0, touch_ns: int = 0) -> None:
        vtype, raw = from_bytes(value)
        self.write(ops.Set(key, vtype, raw, self.stamp(key), expire_ns, touch_ns, False))

    def update(self, entry: Entry, value: bytes) -> None:
        """A new value for a live key, its expiry kept (as Redis keeps a TTL on INCR, APPEND)."""
        vtype, raw = from_bytes(value)
        self.write(ops.Update(entry.key, vtype, raw, max(self.now, entry.ts)))

    def delete(self, key: str) -> None:
        self.write(ops.Delete(key, self.stamp(key)))


class Alone(View):
    """``RedisKV.alone``: a commit round of plain SETs only, on a store the daemon owns, written
    without a decision's layers (``kv.Store._write_alone``): its ops made by ``plain_set_op``,
    all written by one ``write_many``, which says False, nothing written, when the store needs
    a decision (the round then takes ``decide``). The store's mutex is held from enter to exit."""

    def __init__(self, store: kv.Store) -> None:
        self.store = store
        self.owner = None
        self.written = False

    def __enter__(self) -> Alone:
        store = self.store
        store._mutex.acquire()
        try:
            self.state = store._state  # (read under the mutex: a reload replaces it)
            self.now = store._clock()
        except BaseException:
            store._mutex.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.store._mutex.release()
        if self.written:
            self.store._maybe_snapshot()  # (as a decision's end: outside the mutex)

    def write_many(self, made: list[ops.Set]) -> bool:
        """Write and apply the ops of ``plain_set_op`` in one write (``kv.Store._write_alone``);
        False, nothing written, if the store needs a decision for them."""
        self.written = self.store._write_plain_alone(made, self.now)
        return self.written


class _Deciding:
    """``RedisKV.decide``: the store's ``_change``, its writer and time given as a ``Decision``.
    A class, not a generator: every commit round enters one (see ``_active._Locked``)."""

    __slots__ = ("_change", "_owner", "_store")

    def __init__(
        self, store: kv.Store, owner: str | None, timeout_s: float | None = None, room: int | None = None
    ) -> None:
        self._store = store
        self._owner = owner
        self._change = store._change(durable=False, timeout_s=timeout_s, room=room)

    def __enter__(self) -> Decision:
        w, now = self._change.__enter__()
        try:
            return Decision(self._store, w, now, self._owner)
        except BaseException:
            self._change.__exit__(*sys.exc_info())
            raise

    def __exit__(self, *exc: Any) -> bool | None:
        return self._change.__exit__(*exc)


class RedisKV:
    """The Redis string commands on one store. Shared by every RESP connection (each command is a
    decision or a read under the store's mutex); used from the daemon's pool threads."""

    def __init__(self, store: kv.Store) -> None:
        self.store = store

    # --- views and decisions ------------------------------------------------------------------
    def decide(
        self, owner: str | None = None, timeout_s: float | None = None, room: int | None = None
    ) -> _Deciding:
        """``with kv.decide() as d``: one decision; its fsync is left to ``sync`` (see the module
        docstring). ``timeout_s``: how long to wait for the store's writer lock (0: not at all,
        LockedError if another process holds it; None: the store's timeout). ``room``: bytes
        of records the decision will write at most: LockedError, nothing made, if they might
        rotate the op log's segment (``kv.Store._change``)."""
        return _Deciding(self.store, owner, timeout_s, room)

    def alone(self) -> Alone:
        """``with kv.alone() as a``: a round of plain SETs written without a decision (``Alone``;
        for a store the daemon owns, ``single_writer``)."""
        return Alone(self.store)

    def mutexes(self, group: object) -> list[Any]:
        """The locks a commit round of this store takes besides the rounds' own: its mutex
        (``Committer._run_group`` takes them without waiting, on the loop)."""
        return [self.store._mutex]

    def sync(self, *, gather: bool = False, wait: bool = True) -> bool:
        """Make every decision made so far durable (with ``durability="always"``). Any thread;
        threads that call it at once share one fsync. ``gather``, ``wait``: as ``Log.sync``'s
        (``gather`` off, as a commit round wants it: see ``sync_writes``); False only with
        ``wait=False``, nothing done."""
        if self.store._always:
            return self.store._log.sync(gather=gather, wait=wait)
        return True

    # --- reads --------------------------------------------------------------------------------
    def get(self, v: View, key: str) -> bytes | None:
        entry = v.live(key)
        if entry is None:
            return None
        if entry.touch_ns and not isinstance(v, Decision):
            # A touch TTL: the store's own read records the extension (Touch rule, docs/KV.md),
            # in the pool, never on the loop.
            if v.on_loop:
                raise NotHere
            found = durable_entry(self.store, key)
            return None if found is None else _python_to_bytes(found.value)
        v.state.used(entry, v.now)
        return v.value(entry)

    def exists(self, v: View, keys: list[str]) -> int:
        return sum(1 for key in keys if v.live(key) is not None)

    def strlen(self, v: View, key: str) -> int:
        entry = v.live(key)
        if entry is None:
            return 0
        if entry.vtype in (ops.BYTES, ops.STRING):
            return entry.size
        return len(v.value(entry))

    def getrange(self, v: View, key: str, start: int, end: int) -> bytes:
        entry = v.live(key)
        if entry is None:
            return b""
        value = v.value(entry)
        n = len(value)
        if start < 0:
            start = max(n + start, 0)
        if end < 0:
            end = max(n + end, 0)
        end = min(end, n - 1)
        return b"" if start > end or n == 0 else value[start : end + 1]

    def pttl(self, v: View, key: str) -> int:
        """Milliseconds to live; -2 if no value, -1 if it never expires."""
        entry = v.live(key)
        if entry is None:
            return -2
        if not entry.expire_ns:
            return -1
        return max(0, (entry.expire_ns - v.now + 500_000) // 1_000_000)

    def dbsize(self, v: View) -> int:
        return len(v.state.values)  # as Redis, values expired but not yet removed count

    def scan(
        self, v: View, after: str | None, count: int, pattern: bytes | None
    ) -> tuple[list[bytes], str | None]:
        """The keys among the next ``count`` (after ``after``, in key order) that match ``pattern``
        and hold a value, and the last key looked at (None: the end)."""
        order = v.state.order
        i = 0 if after is None else v.state.keys_from(after, True)
        stop = min(len(order), i + count)
        out = []
        for key in order[i:stop]:
            raw = key.encode("utf-8")
            if (pattern is None or glob_match(pattern, raw)) and v.live(key) is not None:
                out.append(raw)
        return out, (order[stop - 1] if stop < len(order) else None)

    def keys(self, v: View, pattern: bytes) -> list[bytes]:
        out = []
        literal = not any(c in pattern for c in b"*?[\\")
        if literal:  # one key: no walk
            key = pattern.decode("utf-8", "replace")
            return [pattern] if key and v.live(key) is not None else []
        for key in v.state.order:
            raw = key.encode("utf-8")
            if glob_match(pattern, raw) and v.live(key) is not None:
                out.append(raw)
                if len(out) > KEYS_REPLY_MAX:
                    raise RedisError(f"ERR KEYS matches more than {KEYS_REPLY_MAX} keys here; use SCAN")
        return out

    # --- writes -------------------------------------------------------------------------------
    def set(self, d: Decision, key: str, value: bytes, *, expire_ns: int | None = None, keepttl: bool = False,
            nx: bool = False, xx: bool = False) -> tuple[bool, Entry | None]:  # fmt: skip
        """SET with its options; (whether it set, the entry it replaced or found)."""
        d.unlocked(key)
        old = d.live(key)
        if (nx and old is not None) or (xx and old is None):
            return False, old
        keep = keepttl and old is not None
        expire = old.expire_ns if keep and old is not None else (expire_ns or 0)
        touch = old.touch_ns if keep and old is not None else 0
        d.set(key, value, expire, touch)
        return True, old

    def delete(self, d: Decision, keys: list[str]) -> int:
        removed = 0
        for key in keys:
            d.unlocked(key)
            if d.live(key) is not None:
                d.delete(key)
                removed += 1
        return removed

    def incr(self, d: Decision, key: str, amount: int) -> int:
        d.unlocked(key)
        entry = d.live(key)
        if entry is None:
            current = 0
        elif entry.vtype == ops.INTEGER:
            current = _INT.unpack(d.raw(entry))[0]
        elif entry.vtype in (ops.BYTES, ops.STRING):
            parsed = canonical_int(d.raw(entry))
            if parsed is None:
                raise RedisError(NOT_INTEGER)
            current = parsed
        else:
            raise RedisError(NOT_INTEGER)
        result = current + amount
        if not ops.INT_MIN <= result <= ops.INT_MAX:
            raise RedisError("ERR increment or decrement would overflow")
        if entry is None:
            d.write(ops.Set(key, ops.INTEGER, _INT.pack(result), d.stamp(key), 0, 0, False))
        else:
            d.write(ops.Update(key, ops.INTEGER, _INT.pack(result), max(d.now, entry.ts)))
        return result

    # APPEND, SETRANGE, INCRBYFLOAT and LS.TRUNCATE are read-modify-writes of a value's bytes:
    # ``Store.modify`` inside the decision ``d`` (it joins it), through the value's bytes as a
    # Redis client sees them and back (a canonical integer is stored as an integer again).
    def _modify(self, d: Decision, key: str, fn: Callable[[bytes], bytes]) -> bytes:
        """The new bytes of ``key`` (``fn`` of its bytes, b"" if it holds none), stored."""
        out: list[bytes] = []

        def step(current: ops.Value) -> ops.Value:
            value = fn(_python_to_bytes(current))
            if len(value) > limits.KV_VALUE_SIZE_MAX:
                raise RedisError(TOO_BIG)
            out.append(value)
            number = canonical_int(value) if len(value) <= 20 else None
            return value if number is None else number

        self.store.modify(key, step, default=b"", owner=d.owner)  # (on d's thread: joins d)
        return out[0]

    def incrbyfloat(self, d: Decision, key: str, amount: float) -> bytes:
        def add(value: bytes) -> bytes:
            result = (parse_float(value) if value or d.live(key) is not None else 0.0) + amount
            if result != result or result in (float("inf"), float("-inf")):
                raise RedisError("ERR increment would produce NaN or Infinity")
            return format_float(result)

        return self._modify(d, key, add)

    def append(self, d: Decision, key: str, data: bytes) -> int:
        return len(self._modify(d, key, lambda value: value + data))

    def setrange(self, d: Decision, key: str, offset: int, data: bytes) -> int:
        if offset < 0:
            raise RedisError("ERR offset is out of range")
        d.unlocked(key)
        if not data:
            entry = d.live(key)
            return 0 if entry is None else len(d.value(entry))
        if offset + len(data) > limits.KV_VALUE_SIZE_MAX:
            raise RedisError(TOO_BIG)  # (before the padding is allocated)

        def put(value: bytes) -> bytes:
            if len(value) < offset:
                value += bytes(offset - len(value))
            return value[:offset] + data + value[offset + len(data) :]

        return len(self._modify(d, key, put))

    def expire(self, d: Decision, key: str, at_ns: int | None, cond: str | None = None) -> bool:
        """Set (or with None remove) ``key``'s expiry; Redis's NX, XX, GT, LT conditions."""
        d.unlocked(key)
        entry = d.live(key)
        if entry is None:
            return False
        current = entry.expire_ns
        if at_ns is None:
            if not current:
                return False
        elif (
            (cond == "NX" and current)
            or (cond == "XX" and not current)
            or (cond == "GT" and (not current or at_ns <= current))
            or (cond == "LT" and current and at_ns >= current)
        ):
            return False
        if at_ns is not None and at_ns <= d.now:
            d.delete(key)  # a time in the past deletes the key, as in Redis
        else:
            d.write(ops.Touch(key, at_ns or 0))
        return True

    def rename(self, d: Decision, key: str, new: str, *, nx: bool) -> bool:
        d.unlocked(key)
        d.unlocked(new)
        if d.live(key) is None:
            raise RedisError("ERR no such key")
        if key == new:
            return not nx
        if nx and d.live(new) is not None:
            return False
        d.write(ops.Rename(key, new, max(d.stamp(key), d.stamp(new))))
        return True

    def flush(self, d: Decision, count: int) -> int:
        """Delete up to ``count`` keys (FLUSHDB runs decisions of this until none is left)."""
        keys = list(itertools.islice(d.state.values, count))
        for key in keys:
            d.unlocked(key)
            d.delete(key)
        return len(keys)

    # --- logspool's own (seed 002): LS.LOCK, LS.UNLOCK, LS.NOT, LS.TRUNCATE --------------------
    def lock(self, d: Decision, key: str, owner: str, ttl_s: float) -> int:
        """Lock ``key`` for ``owner``; the lock's end in ms since the epoch."""
        if not 0 < ttl_s <= limits.JOB_DURATION_S_MAX:
            raise RedisError("ERR invalid lock time")
        d.store._unlocked(key, owner, d.now)
        until = d.now + int(ttl_s * _NS)
        d.write(ops.Lock(key, owner, until))
        return until // 1_000_000

    def unlock(self, d: Decision, key: str, owner: str | None, force: bool) -> bool:
        lock = d.state.lock_of(key, d.now)
        if lock is None:
            return False
        if lock[0] != owner and not force:
            raise KeyLockedError(d.store.path, key, lock[0], lock[1] / _NS)
        d.write(ops.Unlock(key))
        return True

    def flip(self, d: Decision, key: str) -> int:
        """NOT of a boolean value (stored by the native API) or of an integer 0 or 1."""
        d.unlocked(key)
        entry = d.live(key)
        if entry is None:
            raise RedisError("ERR no such key")
        raw = d.raw(entry)
        if entry.vtype == ops.BOOLEAN:
            result = raw != b"\x01"
            d.write(ops.Update(key, ops.BOOLEAN, b"\x01" if result else b"\x00", max(d.now, entry.ts)))
            return int(result)
        if entry.vtype == ops.INTEGER and _INT.unpack(raw)[0] in (0, 1):
            flipped: int = 1 - _INT.unpack(raw)[0]
            d.write(ops.Update(key, ops.INTEGER, _INT.pack(flipped), max(d.now, entry.ts)))
            return flipped
        raise RedisError("WRONGTYPE LS.NOT needs a boolean value, or an integer 0 or 1")

    def truncate(self, d: Decision, key: str, size: int) -> int:
        """Cut the value to ``size`` bytes or pad it with zero bytes; the new size."""
        if not 0 <= size <= limits.KV_VALUE_SIZE_MAX:
            raise RedisError("ERR size is out of range")
        d.unlocked(key)
        if d.live(key) is None:
            raise RedisError("ERR no such key")
        self._modify(d, key, lambda value: value[:size] + bytes(max(0, size - len(value))))
        return size


def glob_match(pattern: bytes, text: bytes) -> bool:
    """Redis's glob (KEYS, SCAN MATCH): ``*``, ``?``, ``[abc]``, ``[^a-z]``, ``\\x`` escapes. The
    usual two-pointer walk that backtracks only to the last ``*``: time at most len(pattern) x
    len(text), so no pattern can make a key take long (keys are at most 4 KiB)."""
    p = t = 0
    star = -1
    mark = 0
    np, nt = len(pattern), len(text)
    for _ in range((np + 1) * (nt + 1) + 1):  # bounded: see the docstring
        if t < nt:
            if p < np:
                c = pattern[p]
                if c == 42:  # "*"
                    star, mark = p, t
                    p += 1
                    continue
                ok, nxt = _one(pattern, p, text[t])
                if ok:
                    p, t = nxt, t + 1
                    continue
            if star < 0:
                return False
            mark += 1
            p, t = star + 1, mark
            continue
        while p < np and pattern[p] == 42:
            p += 1
        return p == np
    return False  # pragma: no cover (the bound is never reached)


def _one(pattern: bytes, p: int, ch: int) -> tuple[bool, int]:
    """Whether the pattern element at ``p`` (not ``*``) matches byte ``ch``, and the next element."""
    c = pattern[p]
    if c == 63:  # "?"
        return True, p + 1
    if c == 92 and p + 1 < len(pattern):  # "\"
        return pattern[p + 1] == ch, p + 2
    if c != 91:  # not "["
        return c == ch, p + 1
    i = p + 1
    negate = i < len(pattern) and pattern[i] == 94  # "^"
    if negate:
        i += 1
    matched = False
    while i < len(pattern) and pattern[i] != 93:  # until "]"
        if pattern[i] == 92 and i + 1 < len(pattern):
            matched |= pattern[i + 1] == ch
            i += 2
        elif i + 2 < len(pattern) and pattern[i + 1] == 45 and pattern[i + 2] != 93:  # a-z
            lo, hi = sorted((pattern[i], pattern[i + 2]))
            matched |= lo <= ch <= hi
            i += 3
        else:
            matched |= pattern[i] == ch
            i += 1
    return matched != negate, min(i + 1, len(pattern))
