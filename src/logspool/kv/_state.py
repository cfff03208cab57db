"""The key-value store's state: the fold of its ops, the sorted key index, expiry and memory.

Pure but for the values' bytes: a value that left memory (the store is over its memory bound) is
named by ``Entry.where``, the place on disk that holds exactly its bytes, which the store reads.
"""

from __future__ import annotations

import collections
import heapq
from typing import NamedTuple

from sortedcontainers import SortedList

from .. import limits
from .._untrack import UNTRACK
from . import _ops as ops


class SnapRef(NamedTuple):
    """A value's bytes inside a snapshot file that this handle holds open (readable even after
    the file is removed): the entry body's offset and size, and the value's offset in the body."""

    file: object  # a _store.SnapFile (kept alive by the refs)
    body_offset: int
    body_size: int
    value_at: int


Where = int | SnapRef | None  # the lsn of the op holding the bytes; a snapshot; nowhere (volatile)


class Entry:
    """One live key. ``value`` is None when the bytes left memory (see ``where``) or when it is a
    memory-only value written by another process (or before a restart): then it is lost. Once in
    a state it is untracked by the cyclic collector (``_untrack``): it refers to nothing that can
    refer back to it (its key, its bytes, numbers, a ``SnapRef`` to a snapshot file)."""

    __slots__ = (
        "accessed_ns",
        "created_ns",
        "expire_ns",
        "key",
        "modified_ns",
        "size",
        "touch_ns",
        "ts",
        "value",
        "version",
        "volatile",
        "vtype",
        "where",
    )  # fmt: skip

    def __init__(self, key: str, vtype: int, value: bytes | None, where: Where, volatile: bool, ts: int,
                 created_ns: int, modified_ns: int, expire_ns: int, touch_ns: int, version: int,
                 size: int) -> None:  # fmt: skip
        self.key = key
        self.vtype = vtype
        self.value = value
        self.where = where
        self.volatile = volatile
        self.ts = ts
        self.created_ns = created_ns
        self.modified_ns = modified_ns
        self.accessed_ns = modified_ns
        self.expire_ns = expire_ns
        self.touch_ns = touch_ns
        self.version = version
        self.size = size  # of the value's bytes

    def lost(self) -> bool:
        """A memory-only value this handle does not hold: as good as absent."""
        return self.volatile and self.value is None


class State:
    """Values, LWW tombstones and locks after every op below ``next_lsn``; sorted keys; expiry."""

    def __init__(self, memory_max: int | None = None) -> None:
        self.values: dict[str, Entry] = {}
        # The keys of ``values``, sorted. A SortedList, not a list kept with ``bisect.insort``: a
        # new key or a delete moved every pointer after its place, O(n) (11.6 us a new random key
        # among 100,000 keys, 129 us among 1,000,000, against 1.0 and 4.1; benchmarks/RESULTS.md).
        self.order: SortedList[str] = SortedList()
        self.tombstones: dict[str, int] = {}  # deleted key -> the delete's request timestamp
        self.locks: dict[str, tuple[str, int]] = {}  # key -> (owner, until ns)
        self.next_lsn = 0
        self.last_ns = 0  # the newest record timestamp applied
        self.memory_max = memory_max
        self.hot_bytes = 0  # bytes of values held in memory
        self._expiring: list[tuple[int, str]] = []  # heap of (expire ns, key)
        self._lru: collections.OrderedDict[str, None] = collections.OrderedDict()  # may leave memory

    # --- building ---------------------------------------------------------------------------------
    def _insert(self, entry: Entry) -> None:
        if UNTRACK is not None:  # (an Entry is in no reference cycle: docs/DESIGN.md)
            UNTRACK(entry)
        old = self.values.get(entry.key)
        if old is None:
            self.order.add(entry.key)
        else:
            self._forget(old)
        self.values[entry.key] = entry
        self.tombstones.pop(entry.key, None)
        if entry.expire_ns:
            heapq.heappush(self._expiring, (entry.expire_ns, entry.key))
        self._hold(entry)

    def _remove(self, key: str) -> Entry | None:
        entry = self.values.pop(key, None)
        if entry is not None:
            self.order.remove(key)
            self._forget(entry)
        return entry

    def _forget(self, entry: Entry) -> None:
        if entry.value is not None:
            self.hot_bytes -= entry.size
        if self._lru:
            self._lru.pop(entry.key, None)

    def _hold(self, entry: Entry) -> None:
        """Count ``entry``'s bytes in memory; let them leave memory later if they may (only
        with a memory bound: without one nothing leaves, and the order of use is not kept, an
        ordered-dict node a key of 128 bytes or more)."""
        if entry.value is None:
            return
        self.hot_bytes += entry.size
        if self.memory_max is None:
            return
        if entry.where is not None and entry.size >= limits.KV_COLD_VALUE_MIN:
            self._lru[entry.key] = None
            self._lru.move_to_end(entry.key)
        self.evict()

    def evict(self) -> int:
        """Drop the bytes of the least recently used values that may leave memory until the held
        bytes fit ``memory_max``. Returns how many left."""
        if self.memory_max is None:
            return 0
        gone = 0
        while self.hot_bytes > self.memory_max and self._lru:
            key, _ = self._lru.popitem(last=False)
            entry = self.values[key]
            entry.value = None
            self.hot_bytes -= entry.size
            gone += 1
        return gone

    def loaded(self, entry: Entry, value: bytes) -> None:
        """``entry``'s bytes were read back from disk: hold them again (most recently used)."""
        if entry.value is None and self.values.get(entry.key) is entry:
            entry.value = value
            self._hold(entry)

    def used(self, entry: Entry, now_ns: int) -> None:
        entry.accessed_ns = now_ns
        if self._lru and entry.key in self._lru:
            self._lru.move_to_end(entry.key)

    def add_row(self, row: ops.ValueRow, value: bytes | None, where: Where) -> None:
        """A value entry of a snapshot (``value`` None: it stays on disk at ``where``)."""
        size = len(row.value) if value is None else len(value)
        entry = Entry(row.key, row.vtype, value, where, False, row.ts, row.created_ns, row.modified_ns,
                      row.expire_ns, row.touch_ns, row.version, size)  # fmt: skip
        entry.accessed_ns = row.accessed_ns
        self._insert(entry)

    # --- the fold ---------------------------------------------------------------------------------
    def apply_plain(self, lsn: int, timestamp_ns: int, op: ops.Op) -> None:
        """``apply``, to the same effect, for the ops of a daemon's commit round of plain SETs
        (``Decision.write_many``), whose makers hold no entry of the state: an overwrite whose
        value the op keeps takes the key's entry in place, as an UPDATE does (no entry to
        allocate, untrack and free: a sixth of such a round's decision, where most SETs
        overwrite). Elsewhere an entry read before a write must keep what it held (SET's GET
        option answers the old value from it): ``apply`` gives each SET a new one. No reader
        holds an entry across such a round: every read of the store, and every value read back
        from disk and given to its entry (``loaded``), is under the store's mutex, which the
        round holds."""
        if type(op) is not ops.Set or op.volatile:
            self.apply(lsn, timestamp_ns, op)
            return
        key, vtype, value, ts, expire_ns, touch_ns, _ = op
        old = self.values.get(key)
        if old is None:
            self.apply(lsn, timestamp_ns, op)
            return
        assert lsn == self.next_lsn, (lsn, self.next_lsn)
        self.next_lsn = lsn + 1
        self.last_ns = max(self.last_ns, timestamp_ns)
        self._forget(old)
        old.vtype, old.value, old.where, old.volatile, old.ts = vtype, value, lsn, False, ts
        old.modified_ns = old.accessed_ns = timestamp_ns
        old.expire_ns, old.touch_ns, old.version, old.size = expire_ns, touch_ns, lsn, len(value)
        if expire_ns:
            heapq.heappush(self._expiring, (expire_ns, key))
        self._hold(old)

    def apply(self, lsn: int, timestamp_ns: int, op: ops.Op) -> None:
        """Apply the op recorded at ``lsn`` (the log record's lsn and timestamp). Ops are effects
        decided by their writer, so this never refuses one."""
        assert lsn == self.next_lsn, (lsn, self.next_lsn)
        self.next_lsn = lsn + 1
        self.last_ns = max(self.last_ns, timestamp_ns)
        if isinstance(op, ops.Set):
            key, vtype, value, ts, expire_ns, touch_ns, volatile = op
            old = self.values.get(key)
            created = old.created_ns if old is not None else timestamp_ns
            held, where = (None, None) if volatile else (value, lsn)
            self._insert(Entry(key, vtype, held, where, volatile, ts, created, timestamp_ns, expire_ns,
                               touch_ns, lsn, len(value)))  # fmt: skip
        elif isinstance(op, ops.Update):
            old = self.values.get(op.key)
            if old is None:  # (only after ops were lost to a repair): a value without expiry
                self._insert(Entry(op.key, op.vtype, op.value, lsn, False, op.ts, timestamp_ns,
                                   timestamp_ns, 0, 0, lsn, len(op.value)))  # fmt: skip
                return
            self._forget(old)
            old.vtype, old.value, old.where, old.volatile = op.vtype, op.value, lsn, False
            old.ts, old.modified_ns, old.accessed_ns, old.version = op.ts, timestamp_ns, timestamp_ns, lsn
            old.size = len(op.value)
            self._hold(old)
        elif isinstance(op, ops.Delete):
            self._remove(op.key)
            self.tombstones[op.key] = op.ts
        elif isinstance(op, ops.Touch):
            entry = self.values.get(op.key)
            if entry is not None:
                entry.expire_ns = op.expire_ns
                entry.accessed_ns = timestamp_ns
                if op.expire_ns:
                    heapq.heappush(self._expiring, (op.expire_ns, op.key))
        elif isinstance(op, ops.Expire):
            self._remove(op.key)
        elif isinstance(op, ops.Lock):
            self.locks[op.key] = (op.owner, op.until_ns)
        elif isinstance(op, ops.Unlock):
            self.locks.pop(op.key, None)
        else:
            entry = self._remove(op.key)
            self.tombstones[op.key] = op.ts
            if entry is not None:
                entry.key = op.new
                entry.ts, entry.modified_ns, entry.version = op.ts, timestamp_ns, lsn
                self._insert(entry)

    # --- queries ----------------------------------------------------------------------------------
    def live(self, key: str, now_ns: int) -> Entry | None:
        """The entry of ``key`` if it has a value now (not expired, not a lost memory-only one)."""
        entry = self.values.get(key)
        if entry is None or entry.lost() or (entry.expire_ns and entry.expire_ns <= now_ns):
            return None
        return entry

    def lock_of(self, key: str, now_ns: int) -> tuple[str, int] | None:
        lock = self.locks.get(key)
        return lock if lock is not None and lock[1] > now_ns else None

    def last_ts(self, key: str) -> int | None:
        """The request timestamp of the last write of ``key`` (a value's or a delete's), if known."""
        entry = self.values.get(key)
        if entry is not None:
            return entry.ts
        return self.tombstones.get(key)

    def due(self, now_ns: int, limit: int) -> list[str]:
        """Keys whose values expired by ``now_ns`` (at most ``limit``), to remove with EXPIRE ops."""
        out: list[str] = []
        heap = self._expiring
        while heap and heap[0][0] <= now_ns and len(out) < limit:
            at, key = heapq.heappop(heap)
            entry = self.values.get(key)
            if entry is not None and entry.expire_ns == at and key not in out:
                out.append(key)
        return out

    def expired_by(self, now_ns: int) -> bool:
        """Whether ``due`` might find a key (a value expired by ``now_ns``, or a stale mark that
        ``due`` clears)."""
        heap = self._expiring
        return bool(heap) and heap[0][0] <= now_ns

    def undue(self, keys: list[str]) -> None:
        """Give back keys ``due`` returned, their EXPIRE ops not made (a decision refused)."""
        for key in keys:
            entry = self.values.get(key)
            if entry is not None and entry.expire_ns:
                heapq.heappush(self._expiring, (entry.expire_ns, key))

    def next_expiry(self) -> int | None:
        heap = self._expiring
        while heap:
            at, key = heap[0]
            entry = self.values.get(key)
            if entry is not None and entry.expire_ns == at:
                return at
            heapq.heappop(heap)
        return None

    def keys_from(self, start: str, after: bool) -> int:
        """The position in ``order`` of the first key >= ``start`` (> with ``after``)."""
        return self.order.bisect_right(start) if after else self.order.bisect_left(start)

    def check(self) -> None:
        """Assert the invariants (tests)."""
        assert list(self.order) == sorted(self.values), "sorted keys out of step"
        held = sum(e.size for e in self.values.values() if e.value is not None)
        assert held == self.hot_bytes, (held, self.hot_bytes)
        assert self.memory_max is not None or not self._lru, "an order of use kept without a bound"
        for key in self._lru:
            entry = self.values[key]
            assert entry.value is not None and entry.where is not None, key
        for key, entry in self.values.items():
            assert entry.key == key and key not in self.tombstones, key
