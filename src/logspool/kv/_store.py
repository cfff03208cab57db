"""The key-value store: typed values with expiry, touch TTL, locks and last-writer-wins, kept as
ops in a logspool log and shared by any number of processes (the daemon serves it over TCP).

Longer than 600 lines, and the next to split: ``Store`` is the public API (one method per call of
docs/KV.md, each a short decision), and its snapshot machinery and range queries live in the same
class for now; the ops, the state and the fold are apart (``_ops``, ``_state``, ``logspool._fold``).

The layout (op log, snapshots, marker) and the machinery of catching up, deciding and compacting
are ``logspool._fold``'s; the ops and the snapshot are specified in docs/FORMAT.md §15.

Guarantees (docs/KV.md; docs/DURABILITY.md has the tests):
- Every change is decided under the op log's writer lock after reading every op before it (a
  lock, an overwrite=False, an ADD see the latest state of every process) and, for persisted
  values (the default), returns after its op is fsynced, sharing fsyncs between threads.
- Last writer wins by the request timestamp ``ts`` when callers give one (the seed's rule): a write
  older than the key's last write, or than its delete, changes nothing. Without ``ts`` a write is
  stamped now and wins.
- ``persist=False`` values live in the memory of the process that wrote them (the daemon): the op
  log records only that the key now holds a memory-only value, so after a restart, or in another
  process, the key is absent, never an older value.
- ``memory_max`` bounds the bytes of values held in memory: the least recently used values of at
  least ``limits.KV_COLD_VALUE_MIN`` bytes leave memory and are read back from the op log or from
  the snapshot that holds them.
- ``single_writer=True``: this handle holds the op log's writer lock from open to close (the
  log's ``single_writer``): no other process opens the store meanwhile (an open recovers under
  that lock: it waits for it, then fails with LockedError), so a decision reads nothing new
  first and an fsync needs no coordination with other processes. The daemon's RESP door opens
  the store it serves so (``logspool serve``).
- ``compact_in_background=True``: the snapshot that a decision finds due (which writes the whole
  state and compacts the op log: seconds for a million keys) is written by a forked child (or,
  with ``memory_max`` or a test's I/O seam, a thread that first copies the state under the
  store's mutex), not at the end of that decision, so the decisions after it wait only for the
  fork (``logspool._fold``, ``logspool._forked``). ``close`` waits for it. The daemon's RESP
  door opens its store so: its decisions are the commit rounds of every client.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import operator
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Collection, ItemsView, Iterable, Iterator, MutableMapping, ValuesView
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar, overload

from .. import _format as fmt
from .. import limits
from .._fold import SNAPSHOT_SUBSCRIBER, FoldedStore, _Writer
from .._fs import FileSystem
from ..errors import (
    AppendError,
    CorruptionError,
    DataLossError,
    KeyExistsError,
    KeyLockedError,
    KeyNotFoundError,
    LockedError,
    LogspoolError,
    PositionError,
    ValueTypeError,
)
from ..log import Durability, Log
from ..log._directory import to_ns
from . import _ops as ops
from ._state import Entry, SnapRef, State

_logger = logging.getLogger("logspool.kv")

_NS = 1_000_000_000
_T = TypeVar("_T")
_MISSING: Any = object()  # pop's default when none is given


@dataclass(frozen=True, slots=True)
class Value:
    """A key's value and what the store knows of it, copied when the call returned. Times are
    seconds since the epoch; ``value`` is None for a probe (``data=False``) and for a void value."""

    key: str
    value: ops.Value
    type: str  # "void", "bytes", "string", "integer", "float", "boolean"
    size: int  # of the value's bytes
    created: float
    modified: float
    accessed: float
    expire_at: float | None
    touch: float | None  # seconds a read extends the expiry by
    persist: bool
    version: int  # the lsn of the op that last changed it
    timestamp: float  # the request timestamp of the last write (last writer wins)
    locked_by: str | None
    lock_until: float | None

    def to_json(self) -> dict[str, Any]:
        value = self.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        return {
            "key": self.key, "value": value, "type": self.type, "size": self.size,
            "created": self.created, "modified": self.modified, "accessed": self.accessed,
            "expire_at": self.expire_at, "touch": self.touch, "persist": self.persist,
            "version": self.version, "timestamp": self.timestamp, "locked_by": self.locked_by,
            "lock_until": self.lock_until,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a range or regex query: ``cursor`` continues it (None: nothing is left)."""

    items: list[Value]
    cursor: str | None

    def __iter__(self) -> Iterator[Value]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True, slots=True)
class KVStats:
    keys: int  # values held, expired ones not yet removed included
    hot_bytes: int  # bytes of values in memory
    memory_max: int | None
    tombstones: int
    locks: int
    next_expiry: float | None
    next_lsn: int
    ops_lost: int

    def to_json(self) -> dict[str, Any]:
        return {
            "keys": self.keys, "hot_bytes": self.hot_bytes, "memory_max": self.memory_max,
            "tombstones": self.tombstones, "locks": self.locks, "next_expiry": self.next_expiry,
            "next_lsn": self.next_lsn, "ops_lost": self.ops_lost,
        }  # fmt: skip


# An entry's fields as the snapshot needs them, copied under the mutex in one C call an entry
# (``_freeze``): a value row's (``ops.ValueRow``, the value's bytes in memory or None), then
# where the bytes are and whether the value is memory-only.
_ROW_FIELDS = ("key", "vtype", "value", "ts", "created_ns", "modified_ns", "accessed_ns", "expire_ns",
               "touch_ns", "version")  # fmt: skip
_ENTRY_FIELDS = operator.attrgetter(*_ROW_FIELDS, "where", "volatile")
assert ops.ValueRow._fields == ("key", "vtype", "value", "ts", "created_ns", "modified_ns", "accessed_ns",
                                "expire_ns", "touch_ns", "version")  # fmt: skip


def _entry_fields(state: State) -> Iterator[tuple[Any, ...]]:
    """``_ENTRY_FIELDS`` of every value, in key order."""
    return map(_ENTRY_FIELDS, map(state.values.__getitem__, state.order))


class _InPlace(Collection[tuple[Any, ...]]):
    """``_entry_fields`` of a state nothing else changes (a forked child's), read each time."""

    def __init__(self, state: State) -> None:
        self._state = state

    def __len__(self) -> int:
        return len(self._state.order)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return _entry_fields(self._state)

    def __contains__(self, fields: object) -> bool:
        return any(fields == each for each in self)


class _Frozen(NamedTuple):
    next_lsn: int
    entries: Collection[tuple[Any, ...]]  # _ENTRY_FIELDS of every value, in key order
    tombstones: dict[str, int]
    locks: list[tuple[str, str, int]]


class SnapFile:
    """A snapshot file held open while values that left memory live in it (readable even after
    a newer snapshot removed its name); closed when the last of them is gone."""

    def __init__(self, fs: FileSystem, path: str) -> None:
        self.path = path
        self.fd = fs.open(path, os.O_RDONLY)
        self.close = weakref.finalize(self, _close_quietly, fs, self.fd)  # idempotent


def _close_quietly(fs: FileSystem, fd: int) -> None:
    with contextlib.suppress(OSError):  # (a test harness that cut the power closed it already)
        fs.close(fd)


class _Stream:
    """Sequential reads of a file through the I/O seam, in large preads."""

    def __init__(self, fs: FileSystem, fd: int, offset: int) -> None:
        self._fs, self._fd, self.offset = fs, fd, offset
        self._buf = b""
        self._at = 0

    def read(self, n: int) -> bytes:
        have = len(self._buf) - self._at
        if have < n:
            more = self._fs.pread(self._fd, max(n - have, 1 << 20), self.offset + have)
            self._buf = self._buf[self._at :] + more
            self._at = 0
        out = self._buf[self._at : self._at + n]
        self._at += len(out)
        self.offset += len(out)
        return out


def _text(value: object, what: str, *, empty: bool = False, size_max: int = limits.KV_KEY_SIZE_MAX) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{what} must be valid UTF-8: {err}") from None
    if not raw and not empty:
        raise ValueError(f"{what} must not be empty")
    if len(raw) > size_max:
        raise ValueError(f"{what} is {len(raw)} bytes in UTF-8, more than the limit of {size_max}")
    return value


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not 0 < value <= limits.JOB_DURATION_S_MAX:
        raise ValueError(
            f"{what} must be > 0 and at most {limits.JOB_DURATION_S_MAX:g} seconds, not {value!r}"
        )
    return float(value)


class _SpaceExplained(AppendError):
    """``Store._append_failed``'s explanation of a write that failed for want of space (a
    decision inside another explains it once)."""


def _no_space(err: BaseException) -> bool:
    """Whether ``err`` (or an error that caused it) is ENOSPC: the file system is full."""
    seen: BaseException | None = err
    for _ in range(8):  # bounded: a chain of causes
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        seen = seen.__cause__ or seen.__context__
    # An append queued in another thread's failed batch carries the reason as text only.
    return isinstance(err, AppendError) and os.strerror(errno.ENOSPC) in err.reason


def _size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _bytes_max(value: object) -> int:
    """The bound on the bytes of keys and values a page holds."""
    if value is None:
        return 1 << 62
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"bytes_max must be a number of bytes >= 1 or None, not {value!r}")
    return value


def _held(entry: Entry, data: bool) -> int:
    """What a value counts against a page's ``bytes_max``: its key's bytes, and its own."""
    return len(entry.key.encode("utf-8")) + (entry.size if data else 0)


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limits.KV_QUERY_LIMIT_MAX:
        raise ValueError(f"limit must be an integer from 1 to {limits.KV_QUERY_LIMIT_MAX}, not {value!r}")
    return value


def _same(state: State, entry: Entry) -> Entry | None:
    """``entry`` as ``state`` holds it (its key at the same version: the same op's value)."""
    found = state.values.get(entry.key)
    if found is not None and found.version == entry.version and found.where is not None:
        return found
    return None


class _Behind(LogspoolError):
    """A read outside a decision met a value whose op another process compacted away and whose
    key another process changed since, past this handle's state: the read is made again from
    the state caught up (``_reads_anew``), never from old metadata and new bytes."""

    def __init__(self, path: str, key: str) -> None:
        super().__init__(
            f"{path}: the value of {key!r} was compacted away and changed by another process "
            "past this handle's state: read again"
        )


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _reads_anew(read: Callable[Concatenate[Store, _P], _R]) -> Callable[Concatenate[Store, _P], _R]:
    """A public read (outside a decision) made again, from the state caught up, when a value it
    read was compacted away and changed past this handle (``_Behind``): the read is as new as
    the store. The last try's ``_Behind`` reaches the caller (another process compacting and
    changing that value faster than this handle catches up and reads, three times running)."""

    def again(self: Store, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        for _ in range(3):  # bounded: each turn follows another process's compaction
            try:
                return read(self, *args, **kwargs)
            except _Behind:
                with self._mutex:
                    self._reads_again += 1
                    self._catch_up()
        return read(self, *args, **kwargs)

    functools.update_wrapper(again, read)  # (its name and docstring)
    return again


class Store(FoldedStore[State, ops.Op], MutableMapping[str, ops.Value]):
    """A key-value store in a directory. Use ``logspool.kv.open``. See the module docstring.

    A ``MutableMapping`` of str keys: ``get(key, default)`` and ``store[key]`` give the value,
    ``entry(key)`` the value with its metadata; iteration is in key order, a page at a time (see
    "the MutableMapping" below). Safe to share between threads; any number of processes may open
    the same directory.
    """

    KIND = "logspool-kv"
    FOLD_WORK_IN_BYTES = False  # one key an op: its records count the work
    VERSION = 1
    WHAT = "key-value store"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        durability: Durability = "always",
        memory_max: int | None = None,
        segment_size_max: int | None = None,
        snapshot_ops_min: int = limits.KV_SNAPSHOT_OPS_MIN,
        lock_timeout_s: float = limits.LOCK_TIMEOUT_S_DEFAULT,
        single_writer: bool = False,
        compact_in_background: bool = False,
        fs: FileSystem | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if not isinstance(single_writer, bool):
            raise TypeError(f"single_writer must be True or False, not {single_writer!r}")
        # The decision under way (its writer, its time, its thread), under the mutex: see _change.
        self._deciding: tuple[_Writer[State, ops.Op], int, int] | None = None
        self.single_writer = False  # (True once this handle holds the op log's writer lock)
        if memory_max is not None and (
            isinstance(memory_max, bool) or not isinstance(memory_max, int) or memory_max < 0
        ):
            raise ValueError(f"memory_max must be a number of bytes >= 0 or None, not {memory_max!r}")
        self.memory_max = memory_max
        self._frozen_refs: list[tuple[str, int, int, int, int]] = []  # (see _encode_snapshot)
        self._snap_files: weakref.WeakSet[SnapFile] = weakref.WeakSet()
        self._reads_again = 0  # reads made again after a value moved past this handle (_reads_anew)
        self._open_store(
            path,
            create=create,
            durability=durability,
            segment_size_max=segment_size_max,
            snapshot_ops_min=snapshot_ops_min,
            lock_timeout_s=lock_timeout_s,
            fs=fs,
            clock=clock,
            compact_in_background=compact_in_background,
        )
        if single_writer:
            self._own_op_log(durability, lock_timeout_s)
            self.single_writer = True

    def _own_op_log(self, durability: Durability, lock_timeout_s: float) -> None:
        """Hold the op log's writer lock until close: its handle (opened shared by the fold, and
        recovered) is replaced by a ``single_writer`` one, then what other processes appended in
        between is applied. The reader and the state carry over: a reader needs no handle.
        LockedError (the store closed) if another process holds the lock past ``lock_timeout_s``."""
        with self._mutex:
            shared = self._log
            shared.close()
            try:
                self._log = Log(
                    shared.path,
                    durability=durability,
                    create=False,
                    lock_timeout_s=lock_timeout_s,
                    single_writer=True,
                    fs=self._fs,
                )
            except BaseException:
                self.close()  # (closes the reader; the shared handle is closed already)
                raise
            self._catch_up()

    # --- the fold's hooks -------------------------------------------------------------------------
    def _new_state(self, snapshot: bytes | None, path: str) -> State:
        assert snapshot is None  # snapshots are read as streams (_read_snapshot)
        return State(self.memory_max)

    def _read_snapshot(self, path: str) -> State:
        """The state of a snapshot file, read as a stream: with a memory bound, large values stay
        in the file (which this handle keeps open) and are read back when asked for."""
        snap = self._snap_file(path)
        stream = _Stream(self._fs, snap.fd, 0)
        head = ops.decode_snapshot_header(stream.read(ops.SNAPSHOT_HEADER.size), path)
        stream.read(head.size - ops.SNAPSHOT_HEADER.size)
        state = State(self.memory_max)
        state.next_lsn = head.next_lsn
        counts = {ops.ENTRY_VALUE: 0, ops.ENTRY_TOMBSTONE: 0, ops.ENTRY_LOCK: 0}
        for _ in range(head.values + head.tombstones + head.locks):
            offset = stream.offset
            framing = stream.read(ops.FRAME.size)
            if len(framing) < ops.FRAME.size:
                raise CorruptionError(path, offset, "snapshot ends before its last entry")
            size, crc = ops.FRAME.unpack(framing)
            body = stream.read(size)
            if len(body) < size or fmt.crc32(body) != crc:
                raise CorruptionError(path, offset, "snapshot entry checksum mismatch (or cut short)")
            kind, content, value_at = ops.decode_entry(body, path, offset)
            counts[kind] += 1
            if isinstance(content, ops.ValueRow):
                value = body[value_at:]
                ops.decode_value(content.vtype, value, f"{path}: offset {offset}")
                if self.memory_max is not None and len(value) >= limits.KV_COLD_VALUE_MIN:
                    ref = SnapRef(snap, offset + ops.FRAME.size, size, value_at)
                    state.add_row(content._replace(value=value), None, ref)
                else:
                    state.add_row(content, value, None)
            elif kind == ops.ENTRY_TOMBSTONE:
                key, ts = content  # type: ignore[misc]
                state.tombstones[key] = ts
            else:
                key, owner, until = content  # type: ignore[misc]
                state.locks[key] = (owner, until)
        if stream.read(1):
            raise CorruptionError(path, stream.offset - 1, "bytes after the last snapshot entry")
        if (counts[ops.ENTRY_VALUE], counts[ops.ENTRY_TOMBSTONE], counts[ops.ENTRY_LOCK]) != (
            head.values,
            head.tombstones,
            head.locks,
        ):
            raise CorruptionError(path, 0, f"snapshot entry counts {counts} disagree with its header")
        return state

    def _encode_op(self, op: ops.Op) -> bytes:
        return ops.encode(op)

    def _decode_op(self, payload: bytes, where: str) -> ops.Op:
        return ops.decode(payload, where)

    def _exact(self, op: ops.Op) -> bool:
        """A SET of a value kept in the op (not memory-only), every field of its own type: its
        bytes carry each field as it is, so they decode to it exactly (``ops.encode``,
        ``ops.decode``; tests/property/test_kv_exact_ops.py). A memory-only SET is not: its bytes
        carry no value."""
        return (
            type(op) is ops.Set
            and op.volatile is False
            and type(op.key) is str
            and type(op.value) is bytes
            and type(op.vtype) is int
            and op.vtype in ops.TYPES
            and type(op.ts) is int
            and type(op.expire_ns) is int
            and type(op.touch_ns) is int
        )

    def _before_snapshot(self) -> None:
        state = self._state
        if self.memory_max is not None and self._cold_below(self._compacted_below()):
            # Values on disk only at ops that compaction may have removed (another process's
            # snapshots): where are they now. (Under the snapshot lock, which every compaction
            # takes to move the op log's start: none moves it until this snapshot is written.)
            self._relocate()
        horizon = state.last_ns - int(limits.KV_TOMBSTONE_S * _NS)
        for key in [k for k, ts in state.tombstones.items() if ts < horizon]:
            del state.tombstones[key]

    def _freeze(self, in_place: bool = False) -> tuple[int, object]:
        state = self._state
        # Under the mutex the decisions wait: copy what the snapshot needs, at C speed (a
        # ValueRow built an entry here held the mutex 160-230 ms for 100,000 keys, every commit
        # round of the daemon waiting; this copy still holds it 70-90 ms, and 0.8-0.95 s for a
        # million keys); the rows are built in _encode_snapshot, outside it. A forked child
        # (``_snapshot_forks``) reads the entries where they are: nothing else changes them.
        entries: Collection[tuple[Any, ...]] = _InPlace(state) if in_place else list(_entry_fields(state))
        locks = [(k, o, u) for k, (o, u) in sorted(state.locks.items()) if u > state.last_ns]
        self._frozen_refs = []
        return state.next_lsn, _Frozen(state.next_lsn, entries, dict(state.tombstones), locks)

    def _snapshot_forks(self) -> bool:
        """The fold's, where no value has left memory (those are read back through this
        process's open snapshot files, and the new snapshot's positions of them are this
        process's to record: ``_snapshot_written``)."""
        return self.memory_max is None and super()._snapshot_forks()

    def _encode_snapshot(self, frozen: object) -> Iterable[bytes]:
        assert isinstance(frozen, _Frozen)
        next_lsn, entries, tombstone_map, locks = frozen
        volatile = 0
        for fields in entries:
            if fields[-1]:  # memory-only: absent after a restart; its timestamp stays
                tombstone_map[fields[0]] = fields[3]
                volatile += 1
        tombstones = sorted(tombstone_map.items())
        yield ops.snapshot_header(next_lsn, len(entries) - volatile, len(tombstones), len(locks))
        offset = ops.SNAPSHOT_HEADER.size
        value_entry, cold_min, frame_size = ops.value_entry, limits.KV_COLD_VALUE_MIN, ops.FRAME.size
        refs = self._frozen_refs
        pieces: list[bytes] = []
        pending = 0
        # (the fields unpacked, no row object an entry: a quarter of the time for 100,000 keys)
        for (
            key,
            vtype,
            value,
            ts,
            created,
            modified,
            accessed,
            expire,
            touch,
            version,
            where,
            gone,
        ) in entries:
            if gone:
                continue
            if value is None:  # (it left memory: read back from where it is)
                value = self._read_at(where, key)
            piece, size, value_at = value_entry(key, vtype, value, ts, created, modified, accessed, expire,
                                                touch, version)  # fmt: skip
            if len(value) >= cold_min:  # where it can be read back from
                refs.append((key, version, offset + frame_size, size, value_at))
            offset += len(piece)
            pieces.append(piece)
            pending += len(piece)
            if pending >= 1 << 20:
                yield b"".join(pieces)
                pieces, pending = [], 0
        pieces += [ops.frame(ops.tombstone_body(k, ts)) for k, ts in tombstones]
        pieces += [ops.frame(ops.lock_body(k, o, u)) for k, o, u in locks]
        yield b"".join(pieces)

    def _snapshot_written(self, next_lsn: int, path: str) -> None:
        """Values that may leave memory now point into the new snapshot: the op log below it
        will be compacted away by a later snapshot."""
        refs, self._frozen_refs = self._frozen_refs, []
        if self.memory_max is None or not refs:
            return
        snap = self._snap_file(path)
        with self._mutex:
            for key, version, body_offset, size, value_at in refs:
                entry = self._state.values.get(key)
                if entry is not None and entry.version == version and not entry.volatile:
                    entry.where = SnapRef(snap, body_offset, size, value_at)

    def _state_size(self) -> int:
        return len(self._state.values)

    def _snap_file(self, path: str) -> SnapFile:
        snap = SnapFile(self._fs, path)
        self._snap_files.add(snap)
        return snap

    def _current(self) -> State:
        """The state, current. A single writer's always is (every op of the op log is its own,
        applied when it was written), so its reads skip the catch-up, a read of the op log's
        tail and a look for a next segment (a seventh of a GET on the daemon's event loop)."""
        if self.single_writer and not self._stale:
            self._check_open()
            return self._state
        return super()._current()

    def close(self) -> None:
        """Close the store (and the snapshot files values were read from), after a snapshot
        running in the background is written. Idempotent."""
        super().close()  # (it waits for a snapshot running in the background, then closes)
        with self._mutex:
            for snap in list(self._snap_files):
                snap.close()

    # --- values on disk ---------------------------------------------------------------------------
    def _read_at(self, where: int | SnapRef | None, key: str) -> bytes:
        """The bytes of a value that left memory. PositionError (or DataLossError) if the op log
        no longer holds that op (compacted by another process's snapshot)."""
        if isinstance(where, SnapRef):
            snap = where.file
            assert isinstance(snap, SnapFile)
            raw = self._fs.pread(
                snap.fd, where.body_size + ops.FRAME.size, where.body_offset - ops.FRAME.size
            )
            size, crc = ops.FRAME.unpack_from(raw)
            body = raw[ops.FRAME.size :]
            if size != where.body_size or fmt.crc32(body) != crc:
                raise CorruptionError(snap.path, where.body_offset, f"value of {key!r}: checksum mismatch")
            return body[where.value_at :]
        assert isinstance(where, int), where
        for rec in self._log.read(start=where):
            if rec.lsn != where:
                raise PositionError(self._log.path, where, rec.lsn, rec.lsn)  # quarantined by a repair
            op = ops.decode(rec.payload, f"{self._log.path}: lsn {where}")
            if not isinstance(op, ops.Set | ops.Update):
                raise CorruptionError(self._log.path, 0, f"lsn {where} holds no value for {key!r}")
            return op.value
        raise PositionError(self._log.path, where, 0, 0)  # (past the end: never for a live value)

    def _bytes(self, entry: Entry) -> bytes:
        """``entry``'s value bytes, read back from disk if they left memory. Under ``_mutex``.
        Outside a decision, ``_Behind`` if another process compacted its op away and changed
        its key past this handle's state (the public read reads again: ``_reads_anew``)."""
        if entry.value is not None:
            return entry.value
        key = entry.key
        for _ in range(4):  # bounded: each turn follows a compaction by another process
            value = self._unwritten_value(entry.where)
            if value is None:
                try:
                    value = self._read_at(entry.where, key)
                except (PositionError, DataLossError):
                    # The op was compacted away: the newest snapshot holds what it held.
                    self._relocate(entry)
                    continue
            self._state.loaded(entry, value)
            return value
        raise CorruptionError(self.path, 0, f"value of {key!r}: not found on disk after 4 relocations")

    def _unwritten_value(self, where: int | SnapRef | None) -> bytes | None:
        """The value of the op at ``where`` if the decision under way made it and has not
        written it yet (a value that left memory at once: a memory bound of 0)."""
        writer = self._writer
        if writer is None or type(where) is not int:
            return None
        payload = writer.unwritten_payload(where)
        if payload is None:
            return None
        op = ops.decode(payload, f"{self.path}: lsn {where}")
        assert isinstance(op, ops.Set | ops.Update), op
        return op.value

    def _compacted_below(self) -> int:
        """The lsn below which retention may remove the op log's segments: the older kept
        snapshot's (``FoldedStore.snapshot``)."""
        for info in self._log.subscribers():
            if info.name == SNAPSHOT_SUBSCRIBER:
                return info.lsn
        return 0

    def _cold_below(self, lsn: int) -> bool:
        """Whether a value on disk only is in the op log below ``lsn``."""
        return any(
            e.value is None and type(e.where) is int and e.where < lsn for e in self._state.values.values()
        )

    def _relocate(self, entry: Entry | None = None) -> None:
        """After another process's snapshots compacted away ops that hold values of this
        handle's state: point every value at where it is now, the newest snapshot or the op log
        after it. The state there is built aside (``_state_at``), with the decision under way's
        ops not written yet replayed onto it (the same ops as this one's, to the same entries: an
        entry's version is the lsn of the op that last changed it), and this handle's state is
        kept, never replaced or changed but for where its values are: a decision under way
        holds it and writes the ops applied to it (loading anew dropped them from the state: the
        decision's next op applied at an lsn it did not have), and a page being read walks it.
        ``entry``: one the caller holds, perhaps no longer in the state (``SET k v GET``'s old
        value, replaced in the decision; one renamed in it, then replaced): pointed where its
        bytes are now, found by its key and version before, during or after the replay.
        Outside a decision, if the newest snapshot is past this handle's state (it holds ops
        this handle has not applied), the state aside is built to the op log's end: values whose
        keys are at the same versions there are unchanged, and are pointed where it holds them;
        ``_Behind`` if ``entry`` is not among them (changed since, or held across a catch-up: the
        public read is made again). Under ``_mutex``."""
        state, writer = self._state, self._writer
        unwritten = writer.unwritten() if writer is not None else 0
        lsn = state.next_lsn - unwritten
        newest = self._snapshot_lsns()[:1]
        # (one past the op log's end holds ops a power loss took before they were durable: it is
        # not newer, ``_newest`` passes over it)
        newer = bool(newest) and lsn < newest[0] <= self._log.next_lsn
        aside = None if newer else self._state_at(lsn)
        if aside is None:
            if writer is not None:  # (under the writer lock no process appends, or snapshots past it)
                raise CorruptionError(self.path, 0, "a snapshot holds ops past the op log's end")
            # The state as it is now, past this handle's: values unchanged since (their keys at
            # the same versions) are where it holds them; a changed one is not found (below).
            aside = self._state_at(None)
            assert aside is not None
        found = None if entry is None else _same(aside, entry)

        def look() -> None:
            nonlocal found
            if found is None and entry is not None:
                found = _same(aside, entry)

        if writer is not None:
            writer.replay(aside, look)
        there = aside.values
        for key, mine in state.values.items():
            other = there.get(key)
            if other is not None and other.version == mine.version and other.where is not None:
                mine.where = other.where
        if entry is None:
            return
        if found is None:
            if writer is None:
                raise _Behind(self.path, entry.key)
            raise CorruptionError(
                self.path,
                0,
                f"value of {entry.key!r}: in neither the newest snapshot nor the op log after it",
            )
        entry.where = found.where

    def _value(self, entry: Entry, now: int, data: bool) -> Value:
        lock = self._state.lock_of(entry.key, now)
        value = (
            ops.decode_value(entry.vtype, self._bytes(entry), f"{self.path}: {entry.key!r}") if data else None
        )
        return Value(
            key=entry.key,
            value=value,
            type=ops.TYPES[entry.vtype],
            size=entry.size,
            created=entry.created_ns / _NS,
            modified=entry.modified_ns / _NS,
            accessed=entry.accessed_ns / _NS,
            expire_at=entry.expire_ns / _NS if entry.expire_ns else None,
            touch=entry.touch_ns / _NS if entry.touch_ns else None,
            persist=not entry.volatile,
            version=entry.version,
            timestamp=entry.ts / _NS,
            locked_by=lock[0] if lock else None,
            lock_until=lock[1] / _NS if lock else None,
        )

    # --- deciding ---------------------------------------------------------------------------------
    def _append_failed(self, err: AppendError) -> AppendError | None:
        """A decision's write that failed for want of space, explained: deleting keys cannot
        help (a delete is an op too); freeing the live state's size and compacting does
        (docs/KV.md, "Free space to compact")."""
        if not _no_space(err) or isinstance(err, _SpaceExplained):
            return None  # (not for want of space; or explained already, by an inner decision)
        size = self._live_size()
        return _SpaceExplained(
            err.path,
            f"{err.reason}; the key-value store needs free space to compact: free about "
            f"{_size_text(size)} (its live state, {size} bytes) on the file system, or move "
            "the store, then call snapshot(), which compacts the op log and returns its "
            "space; deleting keys does not free space, a delete is an op too",
        )

    def _live_size(self) -> int:
        """About the bytes of a snapshot of the state now: what compaction needs free."""
        with self._mutex:
            state = self._state
            size = ops.SNAPSHOT_HEADER.size
            for key, e in state.values.items():
                size += ops.FRAME.size + ops.SNAP_VALUE.size + len(key.encode("utf-8")) + e.size
            for key in itertools.chain(state.tombstones, state.locks):
                size += ops.FRAME.size + ops.SNAP_TOMBSTONE.size + len(key.encode("utf-8"))
            return size

    @contextlib.contextmanager
    def _change(
        self, *, durable: bool = True, timeout_s: float | None = None, room: int | None = None
    ) -> Iterator[tuple[_Writer[State, ops.Op], int]]:
        """A decision at time ``now``, after removing (with EXPIRE ops) values that expired. On a
        thread already inside a decision of this store, that decision (its ops written with the
        outer one's, durable when it is): a call such as ``modify`` made within the daemon's
        commit round is part of that round. ``timeout_s``: as ``_decide``'s. ``room``: for a
        caller that must not wait (a daemon's event loop): LockedError, no op made, unless the
        op log's active segment has room for ``room`` bytes of records after the EXPIRE ops
        (``Tail.room``: a rotation fsyncs under the sync file's lock, which another process
        holds through its fsyncs)."""
        outer = self._deciding
        if outer is not None and outer[2] == threading.get_ident():
            yield outer[0], outer[1]
            return
        with self._decide(durable=durable, timeout_s=timeout_s) as w:
            now = self._clock()
            due = self._state.due(now, limits.KV_EXPIRE_BATCH)
            if room is not None:
                made = sum(len(self._encode_op(ops.Expire(k))) + fmt.RECORD_OVERHEAD for k in due)
                if w.room() < room + made:
                    self._state.undue(due)
                    raise LockedError(self.path, 0)
            w.write_many([ops.Expire(k) for k in due])
            self._deciding = (w, now, threading.get_ident())
            try:
                yield w, now
            finally:
                self._deciding = None

    def _write_plain_alone(self, made: list[ops.Set], now: int) -> bool:
        """Under ``_mutex``: ``_write_alone`` for ops of plain SETs made at ``now`` from the
        current state (a daemon's commit round: ``Decision.plain_set_op``, a value of bytes kept
        in the op, every field of its own type: exact), applied by ``State.apply_plain``. False,
        nothing written, also when a value expired by ``now`` (its EXPIRE op is a decision's:
        ``_change``)."""
        state = self._state
        if state.expired_by(now):
            return False
        return self._write_alone(made, state.apply_plain)

    def _unlocked(self, key: str, owner: str | None, now: int) -> None:
        lock = self._state.lock_of(key, now)
        if lock is not None and lock[0] != owner:
            raise KeyLockedError(self.path, key, lock[0], lock[1] / _NS)

    def _stamp(self, key: str, ts: datetime | float | None, now: int) -> int | None:
        """The request timestamp of a write of ``key``: the caller's (None if it is older than the
        key's last write: last writer wins), or now (never older than the last write)."""
        last = self._state.last_ts(key)
        if ts is None:
            return now if last is None else max(now, last)
        stamp = to_ns(ts)
        return None if last is not None and stamp < last else stamp

    # --- writing ----------------------------------------------------------------------------------
    def set(
        self,
        key: str,
        value: ops.Value,
        *,
        overwrite: bool = True,
        ttl: float | None = None,
        expire_at: datetime | float | None = None,
        touch: float | None = None,
        persist: bool = True,
        ts: datetime | float | None = None,
        owner: str | None = None,
    ) -> bool:
        """Set ``key`` to ``value`` (None, bytes, str, int, float or bool: the value's type is kept).

        Returns False, changing nothing, if ``overwrite`` is False and the key holds a value, or
        if ``ts`` (the request's time) is older than the key's last write or delete (last writer
        wins). ``ttl`` (seconds) or ``expire_at`` (a time): the value expires then. ``touch``
        (seconds): every ``get`` extends the expiry to at least that long from then (and the
        value expires ``touch`` seconds from now if no ttl is given). ``persist=False``: the value
        lives in this process's memory only (see the module docstring) and the call does not wait
        for an fsync. KeyLockedError if another ``owner`` holds a lock on the key.
        Durability: with persist, returns after its op is fsynced.
        """
        _text(key, "key")
        vtype, raw = ops.encode_value(value)
        if len(raw) > limits.KV_VALUE_SIZE_MAX:
            raise ValueError(f"value of {len(raw)} bytes is over the limit of {limits.KV_VALUE_SIZE_MAX}")
        if ttl is not None and expire_at is not None:
            raise ValueError("give ttl or expire_at, not both")
        touch_ns = 0 if touch is None else int(_seconds(touch, "touch") * _NS)
        ttl_ns = None if ttl is None else int(_seconds(ttl, "ttl") * _NS)
        persist = bool(persist)
        with self._change(durable=persist) as (w, now):
            self._unlocked(key, owner, now)
            if not overwrite and self._state.live(key, now) is not None:
                return False
            stamp = self._stamp(key, ts, now)
            if stamp is None:
                return False
            expire = (
                now + ttl_ns if ttl_ns is not None else (to_ns(expire_at) if expire_at is not None else 0)
            )
            if touch_ns and not expire:
                expire = now + touch_ns
            w.write(ops.Set(key, vtype, raw, stamp, expire, touch_ns, not persist))
            if not persist:  # the op holds no bytes: this process keeps them
                self._state.loaded(self._state.values[key], raw)
            return True

    def delete(self, key: str, *, ts: datetime | float | None = None, owner: str | None = None) -> bool:
        """Remove ``key``'s value; True if there was one. With ``ts``, a delete older than the key's
        last write changes nothing (False), and one newer is remembered (for an hour) so that an
        older write arriving later loses. KeyLockedError as ``set``. Durable on return."""
        _text(key, "key")
        with self._change() as (w, now):
            self._unlocked(key, owner, now)
            live = self._state.live(key, now) is not None
            if not live and ts is None:
                return False
            stamp = self._stamp(key, ts, now)
            if stamp is None:
                return False
            w.write(ops.Delete(key, stamp))
            return live

    def _update(self, w: _Writer[State, ops.Op], entry: Entry, vtype: int, raw: bytes, now: int) -> None:
        w.write(ops.Update(entry.key, vtype, raw, max(now, entry.ts)))

    def modify(
        self,
        key: str,
        fn: Callable[[ops.Value], ops.Value],
        *,
        default: ops.Value = None,
        owner: str | None = None,
    ) -> ops.Value:
        """Read-modify-write ``key`` in one decision (not ``update``, which is the mapping's: set
        many keys): ``fn`` gets its value (``default`` if it holds none) and returns the new one,
        which is set with the key's expiry and touch TTL kept (a key that held none is created
        without). No process changes the key in between. Returns the new value. ``fn`` runs
        under the writer lock: keep it short; what it raises is raised, nothing written.
        KeyLockedError if another ``owner`` locked the key; ValueError if the new value is over
        ``limits.KV_VALUE_SIZE_MAX``. Durable on return; on a thread inside another decision of
        this store (the daemon's commit round), part of that one: written and durable with it.
        Any thread or process."""
        _text(key, "key")
        with self._change() as (w, now):
            self._unlocked(key, owner, now)
            entry = self._state.live(key, now)
            current = (
                default
                if entry is None
                else ops.decode_value(entry.vtype, self._bytes(entry), f"{self.path}: {key!r}")
            )
            new = fn(current)
            vtype, raw = ops.encode_value(new)
            if len(raw) > limits.KV_VALUE_SIZE_MAX:
                raise ValueError(f"value of {len(raw)} bytes is over the limit of {limits.KV_VALUE_SIZE_MAX}")
            if entry is None:
                w.write(ops.Set(key, vtype, raw, self._stamp(key, None, now) or now, 0, 0, False))
            else:
                self._update(w, entry, vtype, raw, now)
            return new

    def add(self, key: str, amount: int | float = 1, *, owner: str | None = None) -> int | float:
        """Add ``amount`` to an integer or float value, atomically for every process; returns the
        new value. A missing key is created holding ``amount``. ValueTypeError for other types (or
        a float added to an integer); ValueError if an integer leaves 64 bits. KeyLockedError as
        ``set``. Additions all count: they are not ordered by timestamps. Durable on return."""
        _text(key, "key")
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise TypeError(f"amount must be an int or a float, not {type(amount).__name__}")
        with self._change() as (w, now):
            self._unlocked(key, owner, now)
            entry = self._state.live(key, now)
            if entry is None:
                vtype, raw = ops.encode_value(amount)
                w.write(ops.Set(key, vtype, raw, self._stamp(key, None, now) or now, 0, 0, False))
                return amount
            current = ops.decode_value(entry.vtype, self._bytes(entry), key)
            if entry.vtype == ops.INTEGER and isinstance(amount, int):
                result: int | float = int(current) + amount  # type: ignore[arg-type]
            elif entry.vtype == ops.FLOAT:
                result = float(current) + amount  # type: ignore[arg-type]
            else:
                kind = "integer (a float amount)" if entry.vtype == ops.INTEGER else ops.TYPES[entry.vtype]
                raise ValueTypeError(self.path, key, "add", kind)
            vtype, raw = ops.encode_value(result)
            self._update(w, entry, vtype, raw, now)
            return result

    def flip(self, key: str, *, owner: str | None = None) -> bool:
        """NOT: negate a boolean value atomically; returns the new value. KeyNotFoundError,
        ValueTypeError for other types, KeyLockedError as ``set``. Durable on return."""
        _text(key, "key")
        with self._change() as (w, now):
            self._unlocked(key, owner, now)
            entry = self._state.live(key, now)
            if entry is None:
                raise KeyNotFoundError(self.path, key)
            if entry.vtype != ops.BOOLEAN:
                raise ValueTypeError(self.path, key, "not", ops.TYPES[entry.vtype])
            result = self._bytes(entry) != b"\x01"
            self._update(w, entry, ops.BOOLEAN, ops.encode_value(result)[1], now)
            return result

    def truncate(self, key: str, size: int, *, owner: str | None = None) -> int:
        """Resize a bytes value to ``size`` bytes (cut, or padded with zero bytes), or cut a string
        value to ``size`` UTF-8 bytes (ValueError if that splits a character or grows it).
        Returns the new size. KeyNotFoundError, ValueTypeError, KeyLockedError. Durable on return."""
        _text(key, "key")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= limits.KV_VALUE_SIZE_MAX:
            raise ValueError(f"size must be an integer from 0 to {limits.KV_VALUE_SIZE_MAX}, not {size!r}")
        with self._change() as (w, now):
            self._unlocked(key, owner, now)
            entry = self._state.live(key, now)
            if entry is None:
                raise KeyNotFoundError(self.path, key)
            raw = self._bytes(entry)
            if entry.vtype == ops.BYTES:
                new = raw[:size] + bytes(max(0, size - len(raw)))
            elif entry.vtype == ops.STRING:
                if size > len(raw):
                    raise ValueError(f"cannot grow string value {key!r} ({len(raw)} bytes) to {size}")
                new = raw[:size]
                try:
                    new.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"cutting {key!r} at byte {size} would split a character") from None
            else:
                raise ValueTypeError(self.path, key, "truncate", ops.TYPES[entry.vtype])
            self._update(w, entry, entry.vtype, new, now)
            return size

    def rename(
        self,
        key: str,
        new: str,
        *,
        overwrite: bool = False,
        ts: datetime | float | None = None,
        owner: str | None = None,
    ) -> bool:
        """Move ``key``'s value (with its times, expiry and touch) to ``new`` in one op: no process
        ever sees both or neither. KeyNotFoundError if ``key`` holds no value; KeyExistsError if
        ``new`` does and ``overwrite`` is False; KeyLockedError if either is locked by another
        owner. Returns False, changing nothing, if ``ts`` is older than either key's last write
        (last writer wins). Durable on return."""
        _text(key, "key")
        _text(new, "new")
        with self._change() as (w, now):
            self._unlocked(key, owner, now)
            self._unlocked(new, owner, now)
            entry = self._state.live(key, now)
            if entry is None:
                raise KeyNotFoundError(self.path, key)
            if new == key:
                return True
            if not overwrite and self._state.live(new, now) is not None:
                raise KeyExistsError(self.path, new)
            stamp = self._stamp(key, ts, now)
            stamp_new = self._stamp(new, ts, now)
            if stamp is None or stamp_new is None:
                return False
            w.write(ops.Rename(key, new, max(stamp, stamp_new)))
            return True

    def lock(self, key: str, owner: str, ttl: float = limits.JOB_LEASE_S_DEFAULT) -> float:
        """Lock ``key`` for ``owner`` for ``ttl`` seconds (renewed if ``owner`` holds it already):
        until then only writes that name this owner change the key. Returns when the lock ends.
        The key need not hold a value. KeyLockedError if another owner holds it. Durable on return."""
        _text(key, "key")
        _text(owner, "owner", size_max=limits.KV_OWNER_SIZE_MAX)
        ttl_ns = int(_seconds(ttl, "ttl") * _NS)
        with self._change() as (w, now):
            self._unlocked(key, owner, now)
            w.write(ops.Lock(key, owner, now + ttl_ns))
            return (now + ttl_ns) / _NS

    def unlock(self, key: str, owner: str | None = None, *, force: bool = False) -> bool:
        """Release ``owner``'s lock on ``key`` (any owner's with ``force``); True if a lock was
        released. KeyLockedError if another owner holds it. Durable on return."""
        _text(key, "key")
        with self._change() as (w, now):
            lock = self._state.lock_of(key, now)
            if lock is None:
                return False
            if lock[0] != owner and not force:
                raise KeyLockedError(self.path, key, lock[0], lock[1] / _NS)
            w.write(ops.Unlock(key))
            return True

    def expire(self) -> int:
        """Remove every value whose expiry has passed (writes do some of this as they go); returns
        how many. Durable on return; on a thread inside another decision of this store (a
        ``modify``'s function, the daemon's commit round), part of that one, as ``set`` is: its
        EXPIRE ops are written and durable with it."""
        outer = self._deciding
        if outer is not None and outer[2] == threading.get_ident():
            return self._expire_in(outer[0], outer[1])
        removed = 0
        for _ in range(1 << 40):  # bounded: each turn removes a batch or ends
            with self._decide() as w:
                due = self._state.due(self._clock(), limits.KV_EXPIRE_BATCH)
                w.write_many([ops.Expire(k) for k in due])
            removed += len(due)
            if not due:
                return removed
        raise AssertionError("unreachable")  # pragma: no cover

    def _expire_in(self, w: _Writer[State, ops.Op], now: int) -> int:
        """``expire`` inside a decision: EXPIRE ops for what expired by the decision's time,
        written with the decision's own."""
        removed = 0
        for _ in range(1 << 40):  # bounded: each turn removes a batch (``due`` pops them) or ends
            due = self._state.due(now, limits.KV_EXPIRE_BATCH)
            if not due:
                return removed
            w.write_many([ops.Expire(k) for k in due])
            removed += len(due)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- reading ----------------------------------------------------------------------------------
    @overload
    def get(self, key: str, default: None = None) -> ops.Value: ...
    @overload
    def get(self, key: str, default: ops.Value | _T) -> ops.Value | _T: ...
    def get(self, key: str, default: object = None) -> object:
        """``key``'s value (None, bytes, str, int, float or bool, as it was set), or ``default``
        if it holds none: ``dict.get``. A read: it extends a touch TTL as ``entry`` does (the
        Touch rule, docs/KV.md); ``entry(key, touch=False)`` reads without touching. Reads the op
        log up to now; takes the writer lock only to record a touch. Any thread or process."""
        found = self.entry(key)
        return default if found is None else found.value

    @_reads_anew
    def entry(self, key: str, *, data: bool = True, touch: bool = True) -> Value | None:
        """``key``'s value with what the store knows of it (times, expiry, touch TTL, version,
        lock: a ``Value``), or None. ``data=False`` is a probe: everything but the value (and no
        read from disk). If the value has a touch TTL, the read extends its expiry (``touch=False``
        does not); that extension is recorded without waiting for an fsync. Reads the op log up
        to now; takes the writer lock only to record a touch. Any thread or process."""
        _text(key, "key")
        with self._mutex:
            now = self._clock()
            entry = self._current().live(key, now)
            if entry is None:
                return None
            if touch and entry.touch_ns:
                wanted = now + entry.touch_ns
                # recorded when it moves the expiry by at least 1% of the touch TTL (or 1 ms)
                if wanted - entry.expire_ns >= max(entry.touch_ns // 100, 1_000_000):
                    with self._change(durable=False) as (w, now):
                        found = self._state.live(key, now)
                        if found is None:
                            return None
                        w.write(ops.Touch(key, now + found.touch_ns))
                        entry = found
            self._state.used(entry, now)
            return self._value(entry, now, data)

    # --- the MutableMapping -----------------------------------------------------------------------
    # ``store[key]`` reads as ``get`` (and touches); ``store[key] = v`` is ``set``; ``del`` is
    # ``delete`` (KeyError if there was no value); ``in`` is a probe that does not touch.
    # Iteration (``iter``, ``keys``, ``items``, ``values``) walks the keys in UTF-8 byte order a
    # page of ``ITER_PAGE_COUNT`` keys (or ``ITER_PAGE_BYTES_MAX`` bytes of them) at a time, as
    # ``range`` pages, so a large store is never read at once (and, as ranges, without
    # touching). Like a database cursor and unlike a dict, it never raises for changes made while
    # it runs (by this or any process): each page is read as the store is then, so a change
    # behind the cursor is not seen and one ahead of it is.
    # ``pop``, ``popitem`` and ``setdefault`` are each one decision under the writer lock (atomic
    # for every process); ``update`` and ``clear`` set or delete a key at a time, each durable on
    # its own. Two handles are equal only if they are the same object: a Mapping's ``==`` would
    # read both stores whole (compare ``dict(a) == dict(b)`` for that).
    ITER_PAGE_COUNT = 1000  # keys a page of iteration reads under the mutex
    ITER_PAGE_BYTES_MAX = 4 * 1024 * 1024  # and bytes of keys and values (at least one value)

    def __getitem__(self, key: str) -> ops.Value:
        found = self.entry(key)
        if found is None:
            raise KeyNotFoundError(self.path, key)
        return found.value

    def __setitem__(self, key: str, value: ops.Value) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        if not self.delete(key):
            raise KeyNotFoundError(self.path, key)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` holds a value now (False for anything that cannot be a key). Does not
        touch."""
        try:
            _text(key, "key")
        except (TypeError, ValueError):
            return False
        assert isinstance(key, str)
        return self.entry(key, data=False, touch=False) is not None

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._walk(data=False))

    def items(self) -> ItemsView[str, ops.Value]:
        return _Items(self)

    def values(self) -> ValuesView[ops.Value]:
        return _Values(self)

    def _walk(self, *, data: bool) -> Iterator[tuple[str, ops.Value]]:
        """Every (key, value) in key order, a page at a time (see the section's comment); the
        values are None unless ``data``."""
        cursor = None
        for _ in range(1 << 40):  # bounded: each turn reads a page or ends
            page, more = self._walk_page(cursor, data)
            yield from page
            if not more:
                return
            cursor = page[-1][0]
        raise AssertionError("unreachable")  # pragma: no cover

    @_reads_anew
    def _walk_page(self, cursor: str | None, data: bool) -> tuple[list[tuple[str, ops.Value]], bool]:
        """The (key, value) pairs after ``cursor``: ``range`` without its ``Value`` objects (10
        times faster for keys), with the same bounds; and whether more may follow."""
        with self._mutex:
            now = self._clock()
            state = self._current()
            order = state.order
            i = 0 if cursor is None else state.keys_from(cursor, True)
            page: list[tuple[str, ops.Value]] = []
            size = 0
            # (an iterator: indexing a SortedList is a search a key)
            for key in order.islice(i):
                if len(page) >= self.ITER_PAGE_COUNT:
                    break
                entry = state.live(key, now)
                if entry is not None:
                    held = _held(entry, data)
                    if page and size + held > self.ITER_PAGE_BYTES_MAX:
                        break  # it starts the next page
                    value = (
                        ops.decode_value(entry.vtype, self._bytes(entry), f"{self.path}: {key!r}")
                        if data
                        else None
                    )
                    page.append((key, value))
                    size += held
                i += 1
            return page, i < len(order) and bool(page)

    @overload
    def pop(self, key: str) -> ops.Value: ...
    @overload
    def pop(self, key: str, default: ops.Value | _T) -> ops.Value | _T: ...
    def pop(self, key: str, default: object = _MISSING) -> object:
        """Remove ``key``'s value and return it, in one decision (no other process changes the key
        in between); ``default`` (or KeyError) if it holds none. KeyLockedError if another owner
        locked it. Durable on return."""
        _text(key, "key")
        with self._change() as (w, now):
            self._unlocked(key, None, now)
            entry = self._state.live(key, now)
            if entry is None:
                if default is _MISSING:
                    raise KeyNotFoundError(self.path, key)
                return default
            value = ops.decode_value(entry.vtype, self._bytes(entry), f"{self.path}: {key!r}")
            w.write(ops.Delete(key, self._stamp(key, None, now) or now))
            return value

    def popitem(self) -> tuple[str, ops.Value]:
        """Remove and return the first key (in key order) and its value; KeyError if the store is
        empty. Durable on return."""
        for _ in range(1000):  # bounded: each turn lost its key to another process's delete
            first = self.range(limit=1, data=False).items
            if not first:
                raise KeyNotFoundError(self.path, "(any: the store is empty)")
            key = first[0].key
            value = self.pop(key, _MISSING)
            if value is not _MISSING:
                return key, value
        raise KeyNotFoundError(self.path, "(any: other processes deleted each one first)")

    # (typeshed's first overload returns None for a value type that holds None: too narrow here)
    def setdefault(self, key: str, default: ops.Value = None) -> ops.Value:  # type: ignore[override]
        """``key``'s value if it holds one, else set it to ``default`` and return that, in one
        decision (no other process changes the key in between). Does not touch. KeyLockedError if
        another owner locked a key it would set. Durable on return."""
        _text(key, "key")
        vtype, raw = ops.encode_value(default)
        if len(raw) > limits.KV_VALUE_SIZE_MAX:
            raise ValueError(f"value of {len(raw)} bytes is over the limit of {limits.KV_VALUE_SIZE_MAX}")
        with self._change() as (w, now):
            entry = self._state.live(key, now)
            if entry is not None:
                return ops.decode_value(entry.vtype, self._bytes(entry), f"{self.path}: {key!r}")
            self._unlocked(key, None, now)
            w.write(ops.Set(key, vtype, raw, self._stamp(key, None, now) or now, 0, 0, False))
            return default

    def clear(self) -> None:
        """Delete every value, a key at a time in key order (each durable on its own).
        KeyLockedError at the first key another owner locked (the keys before it are gone)."""
        for key in self:
            self.delete(key)

    def __eq__(self, other: object) -> bool:
        return self is other  # (see the section's comment)

    def __hash__(self) -> int:
        return id(self)

    @_reads_anew
    def range(
        self,
        start: str = "",
        end: str | None = None,
        *,
        limit: int = 100,
        cursor: str | None = None,
        data: bool = True,
        bytes_max: int | None = None,
    ) -> Page:
        """The values of the keys from ``start`` (included) to ``end`` (excluded; None: to the
        last key), in key order (Unicode code points, which is UTF-8 byte order), at most
        ``limit`` of them, and with ``bytes_max`` only as many as hold at most that many bytes
        of keys and values (UTF-8; or one value). ``cursor`` (a page's) continues after the last
        key of that page. ``data=False`` probes. Ranges do not extend touch TTLs."""
        _text(start, "start", empty=True)
        if end is not None:
            _text(end, "end", empty=True)
        if cursor is not None:
            _text(cursor, "cursor", empty=True)
        count = _limit(limit)
        size_max = _bytes_max(bytes_max)
        size = 0
        with self._mutex:
            now = self._clock()
            state = self._current()
            after = cursor is not None and cursor >= start
            i = state.keys_from(cursor if after and cursor is not None else start, after)
            items: list[Value] = []
            order = state.order
            keys = order.islice(i)  # (an iterator: indexing a SortedList is a search a key)
            while i < len(order) and len(items) < count:
                key = next(keys)
                if end is not None and key >= end:
                    return Page(items, None)
                entry = state.live(key, now)
                if entry is not None:
                    held = _held(entry, data)
                    if items and size + held > size_max:
                        break  # it starts the next page
                    items.append(self._value(entry, now, data))
                    size += held
                i += 1
            more = i < len(order) and (end is None or order[i] < end)
            return Page(items, items[-1].key if more and items else None)

    @_reads_anew
    def match(
        self,
        pattern: str,
        *,
        limit: int = 100,
        timeout: float = limits.KV_MATCH_TIMEOUT_S_DEFAULT,
        cursor: str | None = None,
        data: bool = True,
        bytes_max: int | None = None,
    ) -> Page:
        """The values of keys in which the regular expression ``pattern`` matches (``re.search``:
        anchor with ``^`` and ``$``), in key order, at most ``limit`` of them (and ``bytes_max``
        as ``range``), looking for at most ``timeout`` seconds: a page with a ``cursor``
        continues where it stopped. The time is checked between keys (one key is at most 4 KiB)."""
        _text(pattern, "pattern", size_max=limits.KV_KEY_SIZE_MAX)
        try:
            regex = re.compile(pattern)
        except re.error as err:
            raise ValueError(f"pattern {pattern!r} is not a regular expression: {err}") from None
        count = _limit(limit)
        budget = _seconds(timeout, "timeout")
        if cursor is not None:
            _text(cursor, "cursor", empty=True)
        size_max = _bytes_max(bytes_max)
        size = 0
        deadline = time.monotonic() + budget
        with self._mutex:
            now = self._clock()
            state = self._current()
            order = state.order
            i = 0 if cursor is None else state.keys_from(cursor, True)
            items: list[Value] = []
            last = cursor
            keys = order.islice(i)  # (an iterator: indexing a SortedList is a search a key)
            while i < len(order):
                if len(items) >= count or time.monotonic() > deadline:
                    return Page(items, last)
                key = next(keys)
                if regex.search(key):
                    entry = state.live(key, now)
                    if entry is not None:
                        held = _held(entry, data)
                        if items and size + held > size_max:
                            return Page(items, last)  # it starts the next page
                        items.append(self._value(entry, now, data))
                        size += held
                i += 1
                last = key
            return Page(items, None)

    def __len__(self) -> int:
        """How many keys hold a value now."""
        with self._mutex:
            now = self._clock()
            state = self._current()
            return sum(1 for k in state.order if state.live(k, now) is not None)

    def stats(self) -> KVStats:
        with self._mutex:
            state = self._current()
            nxt = state.next_expiry()
            return KVStats(
                keys=len(state.values),
                hot_bytes=state.hot_bytes,
                memory_max=self.memory_max,
                tombstones=len(state.tombstones),
                locks=sum(1 for _, until in state.locks.values() if until > self._clock()),
                next_expiry=None if nxt is None else nxt / _NS,
                next_lsn=state.next_lsn,
                ops_lost=self._ops_lost,
            )

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a change by any process; True if there is one."""
        with self._mutex:
            before = self._state.next_lsn
        self._wait_for_ops(timeout)
        with self._mutex:
            return self._current().next_lsn != before

    def __repr__(self) -> str:
        return f"<logspool.kv.Store {self.path!r}>"


class _Items(ItemsView[str, ops.Value]):
    """``store.items()``: (key, value) pairs a page at a time (one read of each page, no touch)."""

    _mapping: Store

    def __iter__(self) -> Iterator[tuple[str, ops.Value]]:
        return self._mapping._walk(data=True)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, tuple) or len(item) != 2 or item[0] not in self._mapping:
            return False
        found = self._mapping.entry(item[0], touch=False)
        return found is not None and found.value == item[1]


class _Values(ValuesView[ops.Value]):
    """``store.values()``: the values in key order, a page at a time (no touch)."""

    _mapping: Store

    def __iter__(self) -> Iterator[ops.Value]:
        return (value for _, value in self._mapping._walk(data=True))


def open(
    path: str | os.PathLike[str],
    *,
    create: bool = True,
    durability: Durability = "always",
    memory_max: int | None = None,
    segment_size_max: int | None = None,
    snapshot_ops_min: int = limits.KV_SNAPSHOT_OPS_MIN,
    lock_timeout_s: float = limits.LOCK_TIMEOUT_S_DEFAULT,
    single_writer: bool = False,
    compact_in_background: bool = False,
    fs: FileSystem | None = None,
    clock: Callable[[], int] | None = None,
) -> Store:
    """Open (and by default create) the key-value store at ``path``. The options are those of
    ``Store``, with the same defaults (``single_writer``, ``compact_in_background``: see the
    module docstring)."""
    return Store(
        path,
        create=create,
        durability=durability,
        memory_max=memory_max,
        segment_size_max=segment_size_max,
        snapshot_ops_min=snapshot_ops_min,
        lock_timeout_s=lock_timeout_s,
        single_writer=single_writer,
        compact_in_background=compact_in_background,
        fs=fs,
        clock=clock,
    )


# One signature in two places: open's options are Store's, with the same defaults (checked here, at
# import, so that an option added to one and not the other fails every test).
assert open.__kwdefaults__ == Store.__init__.__kwdefaults__, "open() and Store() take other options"


__all__ = ["KVStats", "Page", "Store", "Value", "open"]
