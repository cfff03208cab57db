"""A state kept as a deterministic fold over an op log, shared by any number of processes.

The job journal (``logspool.jobs``) and the key-value store (``logspool.kv``) are both built on
this (docs/FORMAT.md §14 and §15). Layout of a store directory ``DIR``:
- ``DIR/JOURNAL``: a small JSON marker (kind and format version), written last at creation.
- ``DIR/ops/``: the op log, a logspool log. Every change is one op record.
- ``DIR/snapshot.<next lsn, 16 hex digits>``: the state after every op below that lsn. The two
  newest are kept; the op log's durable subscriber ``snapshot`` sits at the older of the two, and
  the log's retention (``consumed``) removes the segments below it.
- ``DIR/snapshot.lock``: taken by the one process writing a snapshot.

Every process applies the same ops in lsn order from the same snapshot, so all reach the same
state. A change that depends on the state (a decision) is made under the op log's writer lock
after reading every op before it (``_decide``), and its op is applied at once by the writer.
With ``durability="always"`` a call returns after its op is fsynced; the fsync happens after the
locks are released so that threads share it (group commit).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, Protocol, Self, TypeVar

from . import _forked, limits
from . import _format as fmt
from ._fs import REAL, FileSystem, install_temp, process_alive, replace_file, temp_owner
from ._reader import Reader
from ._retention import Retention
from .errors import (
    AppendError,
    ClosedError,
    CorruptionError,
    DataLossError,
    NotALogError,
    PositionError,
    SubscriberExistsError,
    UnsupportedVersionError,
)
from .log import Durability, Log, Tail

_logger = logging.getLogger("logspool.fold")

MARKER = "JOURNAL"
OPS_DIR = "ops"
SNAPSHOT_LOCK = "snapshot.lock"
SNAPSHOT_SUBSCRIBER = "snapshot"
SNAPSHOT_PREFIX = "snapshot."
SNAPSHOTS_KEPT = 2


def snapshot_name(next_lsn: int) -> str:
    return f"{SNAPSHOT_PREFIX}{next_lsn:016x}"


def parse_snapshot_name(name: str) -> int | None:
    if not name.startswith(SNAPSHOT_PREFIX) or len(name) != len(SNAPSHOT_PREFIX) + 16:
        return None
    try:
        return int(name[len(SNAPSHOT_PREFIX) :], 16)
    except ValueError:
        return None


class FoldState(Protocol):
    """What a folded state offers the store: the next lsn to apply, and the fold step."""

    next_lsn: int

    def apply(self, lsn: int, timestamp_ns: int, op: Any) -> Any: ...


S = TypeVar("S", bound=FoldState)
OpT = TypeVar("OpT")


class FoldedStore(Generic[S, OpT]):
    """The machinery shared by the folded stores: opening, catching up, deciding, snapshots.

    A subclass sets the class attributes and implements the ``_``-prefixed hooks below.
    """

    KIND = ""  # the marker's kind
    VERSION = 1  # the newest store format this code reads
    VERSION_CREATED = 1  # what a new store's marker says (raised by ``_require_version``)
    WHAT = "store"  # in messages: "job journal", "key-value store"
    SEGMENT_SIZE_MAX_DEFAULT = limits.JOB_SEGMENT_SIZE_MAX_DEFAULT
    SNAPSHOT_SIZE_MAX = limits.JOB_SNAPSHOT_SIZE_MAX
    # Whether an op may stand for many entries (the journal's batch ops): then the work an open
    # would redo is counted in bytes of ops too (``_maybe_snapshot``). The key-value store's ops
    # hold one key each, so its records already count the work; counting a large value's bytes
    # would snapshot its whole state, in entries, for the bytes of one key.
    FOLD_WORK_IN_BYTES = True

    # --- hooks ------------------------------------------------------------------------------------
    def _new_state(self, snapshot: bytes | None, path: str) -> S:
        """The state a snapshot file's bytes hold (CorruptionError if they do not read back), or
        the empty state."""
        raise NotImplementedError

    def _read_snapshot(self, path: str) -> S:
        """The state the snapshot file ``path`` holds (a store may read it as a stream)."""
        return self._new_state(self._fs.read_file(path, self.SNAPSHOT_SIZE_MAX), path)

    def _encode_op(self, op: OpT) -> bytes:
        raise NotImplementedError

    def _decode_op(self, payload: bytes, where: str) -> OpT:
        raise NotImplementedError

    def _exact(self, op: OpT) -> bool:
        """Whether ``op`` is, by its type and its fields' types alone, exactly what its own
        bytes decode to (then ``_Writer.write_many`` applies it as it is, without decoding it
        back). False unless a store says which of its ops are."""
        return False

    def _before_snapshot(self) -> None:
        """Under the mutex, caught up, before a snapshot's copy of the state (or its fork): what
        the store drops first (the key-value store's old tombstones)."""

    def _freeze(self, in_place: bool = False) -> tuple[int, object]:
        """Under the mutex, caught up: the state's next lsn and what ``_encode_snapshot`` needs;
        ``in_place``: in a forked child (``_snapshot_forks``), whose state nothing else changes,
        so it may be read where it is instead of copied."""
        raise NotImplementedError

    def _snapshot_forks(self) -> bool:
        """Whether snapshots are written by a forked child (``_forked``: the mutex held for the
        fork, not for a copy of the state, and the encoding off this process's GIL): in the
        background (``compact_in_background``), where the I/O seam reaches the same files from a
        child (a test's seam keeps what it simulates in this process)."""
        return self._compact_in_background and self._fs.shared_with_children() and _forked.available()

    def _encode_in_child(self) -> bytes | Iterable[bytes]:
        return self._encode_snapshot(self._freeze(in_place=True)[1])

    def _encode_snapshot(self, frozen: object) -> bytes | Iterable[bytes]:
        """The snapshot file's bytes, whole or as a stream of pieces."""
        raise NotImplementedError

    def _snapshot_written(self, next_lsn: int, path: str) -> None:
        """Called once the snapshot ``path`` is durable (before the op log is compacted)."""

    def _state_size(self) -> int:
        """How many entries the state holds (a snapshot is written once the op log since the last
        one is at least twice this, and ``snapshot_ops_min``)."""
        raise NotImplementedError

    # --- opening ----------------------------------------------------------------------------------
    def _open_store(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool,
        durability: Durability,
        segment_size_max: int | None,
        snapshot_ops_min: int,
        lock_timeout_s: float,
        fs: FileSystem | None,
        clock: Callable[[], int] | None,
        compact_in_background: bool = False,
    ) -> None:
        if not isinstance(compact_in_background, bool):
            raise TypeError(f"compact_in_background must be True or False, not {compact_in_background!r}")
        self._compact_in_background = compact_in_background
        self._compactor: threading.Thread | None = None
        self._closing = False  # (under the mutex: no compactor starts once close has begun)
        self.path = os.fspath(path)
        # The time decisions are made at (ns since the epoch): the wall clock, shared by every
        # process on the machine; tests give a clock they move by hand.
        self._clock = clock or time.time_ns
        self._fs = fs or REAL
        if (
            isinstance(snapshot_ops_min, bool)
            or not isinstance(snapshot_ops_min, int)
            or snapshot_ops_min < 1
        ):
            raise ValueError(f"snapshot_ops_min must be a positive integer, not {snapshot_ops_min!r}")
        self._snapshot_ops_min = snapshot_ops_min
        self._always = durability == "always"
        self._mutex = threading.RLock()
        self._closed = False
        self._ops_lost = 0
        self._stale = False  # the state holds ops that are not in the log (see _Writer)
        self._others_write = False  # the last decision found ops it had not applied
        self._writer: _Writer[S, OpT] | None = None  # the decision under way (under _mutex: ours)
        created = self._open_marker(create)
        self._log = Log(
            os.path.join(self.path, OPS_DIR),
            durability=durability,
            create=create,
            # fixed when the op log is created: the store's default then, the stored value after
            segment_size_max=segment_size_max or (self.SEGMENT_SIZE_MAX_DEFAULT if created else None),
            lock_timeout_s=lock_timeout_s,
            fs=self._fs,
        )
        try:
            if created:
                # The marker is the commit point of a creation: written last, so a crash before it
                # leaves a directory the next creation completes (and that is not a store yet).
                self._set_up_compaction()
                self._write_marker(self.VERSION_CREATED)
            self._state: S = self._new_state(None, self.path)
            self._reader: Reader | None = None
            self._waiters: list[Reader] = []  # readers that waited for ops, kept for the next wait
            self._snapshot_lsn = 0
            self._fold_bytes = 0  # bytes of ops applied since the snapshot loaded (the fold's work)
            self._load()
            self._catch_up()
            self._remove_stale_snapshot_temps()
        except BaseException:
            self._log.close()
            raise

    def _remove_stale_snapshot_temps(self) -> None:
        """Remove the temporary snapshot files of processes that are gone: a crash while one was
        written, or a forked writer whose parent died after the writer said it was done and
        before it named the file (``_forked``). A live process's are its own."""
        for name in self._fs.listdir(self.path):
            pid = temp_owner(name) if name.startswith(".snapshot.") else None
            if pid is not None and not process_alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    self._fs.unlink(os.path.join(self.path, name))

    def _write_marker(self, version: int) -> None:
        body = {"kind": self.KIND, "version": version}
        replace_file(self._fs, self.path, MARKER, json.dumps(body).encode() + b"\n")
        self._version = version

    def _require_version(self, version: int) -> None:
        """Inside a decision (under the writer lock), before it writes an op that only store
        format ``version`` holds: raise the marker to it, durably, before the op is written. A
        store keeps the lowest version that holds what it holds, so older code opens it until
        then, and refuses it at open after, rather than meeting an op it does not know."""
        if self._version < version:
            # Another process may have raised it since this handle read it: never lower it.
            found = self._read_marker() or 0
            if found >= version:
                self._version = found
            else:
                self._write_marker(version)

    def _ensure_version(self, version: int) -> None:
        """``_require_version`` for an op written without a decision (a put): takes the writer
        lock the first time only (once a handle has seen the marker at ``version``)."""
        if self._version < version:
            with self._mutex, self._log.exclusive(sync=False):
                self._require_version(version)

    def _read_marker(self) -> int | None:
        """The version ``DIR/JOURNAL`` says, or None if there is none (CorruptionError if it is
        not a marker, NotALogError if of another kind, UnsupportedVersionError if too new)."""
        marker = os.path.join(self.path, MARKER)
        try:
            raw = self._fs.read_file(marker, limits.META_SIZE_MAX)
        except FileNotFoundError:
            return None
        try:
            body = json.loads(raw)
            kind, version = body["kind"], body["version"]
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptionError(marker, 0, f"not a {MARKER} marker: {err}") from err
        if kind != self.KIND:
            raise NotALogError(self.path, f"the marker says {kind!r}, not a {self.WHAT}")
        if not isinstance(version, int) or version > self.VERSION:
            raise UnsupportedVersionError(marker, version if isinstance(version, int) else -1, self.VERSION)
        return version

    def _open_marker(self, create: bool) -> bool:
        """Check ``DIR/JOURNAL``; True if there is none and this call is to create the store (the
        caller writes the marker once the op log is set up)."""
        self._version = self.VERSION_CREATED
        version = self._read_marker()
        if version is None:
            if not create:
                raise NotALogError(
                    self.path, f"no {self.WHAT} here (no {MARKER} file), and it was not to be created"
                )
            try:
                self._fs.mkdir(self.path)
                # the new directory's name must survive a power cut before anything in it matters
                self._fs.fsync_dir(os.path.dirname(os.path.abspath(self.path)))
            except OSError as err:
                raise NotALogError(self.path, f"cannot create the {self.WHAT} directory: {err}") from err
            # (another process creating the store at the same time leaves these names)
            own = (MARKER, OPS_DIR, SNAPSHOT_LOCK)
            extra = [
                n for n in self._fs.listdir(self.path) if n not in own and not n.startswith(f".{MARKER}.")
            ]
            if extra:
                raise NotALogError(self.path, f"not a {self.WHAT} and not empty (holds {sorted(extra)[:3]})")
            return True
        self._version = version
        return False

    def _set_up_compaction(self) -> None:
        """The op log keeps what the older kept snapshot needs; retention removes the rest."""
        with contextlib.suppress(SubscriberExistsError):
            self._log.add_subscriber(SNAPSHOT_SUBSCRIBER, 0)
        self._log.set_retention(Retention(consumed=True))

    def _snapshot_lsns(self) -> list[int]:
        """The snapshots in the directory, newest first."""
        found = (parse_snapshot_name(n) for n in self._fs.listdir(self.path))
        return sorted((lsn for lsn in found if lsn is not None), reverse=True)

    def _load(self) -> None:
        """Load the newest snapshot that reads back whole; the caller catches up from the op log."""
        state, reader, start = self._newest()
        if self._reader is not None:
            self._reader.close()
        self._reader = reader
        self._state = state if state is not None else self._new_state(None, self.path)
        self._snapshot_lsn = start
        self._fold_bytes = 0

    def _newest(self) -> tuple[S | None, Reader, int]:
        """The newest snapshot that reads back whole (None: none, the op log holds every op), a
        reader of the op log from the lsn it ends at, and that lsn."""
        for _ in range(16):  # bounded: each turn follows a compaction that raced with us
            state = None
            listed = self._snapshot_lsns()
            for lsn in listed:
                path = os.path.join(self.path, snapshot_name(lsn))
                try:
                    state = self._read_snapshot(path)
                    break
                except FileNotFoundError:
                    continue  # removed by a newer snapshot's cleanup: look again
                except CorruptionError as err:
                    _logger.error("%s: snapshot unreadable, trying an older one: %s", self.path, err)
            start = state.next_lsn if state is not None else 0
            if state is not None and start > self._log.next_lsn:
                # The snapshot holds ops the op log does not: they were written but not yet
                # fsynced when it was taken (a decision's fsync follows it), and a power loss
                # took them. They were never acknowledged; trusting it would skip the next ops
                # appended at those lsns. An older snapshot, or the op log from its start, holds
                # only durable ops (the op log keeps every op above the older kept snapshot).
                _logger.warning(
                    "%s: snapshot %s is ahead of the op log (next lsn %d): ops in it were lost "
                    "before they were durable; using an older one",
                    self.path,
                    snapshot_name(start),
                    self._log.next_lsn,
                )
                older = [lsn for lsn in listed if lsn < start]
                state = None
                for lsn in older:
                    try:
                        state = self._read_snapshot(os.path.join(self.path, snapshot_name(lsn)))
                        break
                    except (FileNotFoundError, CorruptionError) as err:
                        _logger.error("%s: older snapshot unreadable: %s", self.path, err)
                start = state.next_lsn if state is not None else 0
            try:
                reader = self._log.reader(start)
            except PositionError as err:
                if state is None and self._snapshot_lsns() == listed:  # (not a racing compaction)
                    raise CorruptionError(
                        self._log.path,
                        0,
                        f"the op log starts at lsn {err.first_lsn} and no readable snapshot covers the ops "
                        f"before it ({len(listed)} snapshots unreadable)",
                    ) from err
                continue  # a newer snapshot was written and compacted past ours: load that one
            return state, reader, start
        raise CorruptionError(self.path, 0, "no snapshot and op log position agree after 16 tries")

    # --- catching up ------------------------------------------------------------------------------
    def _catch_up(self) -> None:
        """Apply every op in the log that this handle has not applied. Under ``_mutex``."""
        self._check_open()
        if self._stale and self._writer is None:
            # A decision's ops were applied but not all written (its write failed): the state is
            # ahead of the log. Start again from disk. (Inside a decision its ops not written yet
            # are the state's own: a read within it, ``get`` in ``modify``'s function, keeps them.)
            self._load()
            self._stale = False
        for _ in range(16):  # bounded: each turn follows a compaction that removed what we needed
            reader = self._reader
            assert reader is not None
            try:
                state = self._state
                where = self._log.path
                for rec in reader:
                    if rec.lsn < state.next_lsn:
                        continue  # written and applied by this handle (see _Writer)
                    try:
                        op = self._decode_op(rec.payload, where)
                    except (CorruptionError, UnsupportedVersionError):
                        # again, naming the record (not formatted for every op that reads back)
                        self._decode_op(rec.payload, f"{where}: lsn {rec.lsn}")
                        raise
                    if rec.lsn != state.next_lsn:  # ops quarantined by a repair of the op log
                        self._lost(state.next_lsn, rec.lsn)
                        state.next_lsn = rec.lsn
                    state.apply(rec.lsn, rec.timestamp, op)
                    self._fold_bytes += len(rec.payload)
                if reader.gaps:
                    reader.gaps.clear()
                break
            except DataLossError:
                self._load()  # compaction removed segments we had not read: a snapshot covers them
        else:
            raise CorruptionError(self.path, 0, "could not catch up with the op log after 16 reloads")

    def _state_at(self, lsn: int | None) -> S | None:
        """The state with every op below ``lsn`` the op log holds applied (None: every op),
        built aside (this handle's state and reader untouched) from the newest snapshot and the
        op log; None if the newest snapshot is past ``lsn`` (it holds ops this handle has not
        applied). Under ``_mutex``."""
        for _ in range(16):  # bounded: each turn follows a compaction that raced with the read
            state, reader, start = self._newest()
            try:
                if lsn is not None and start > lsn:
                    return None
                if state is None:
                    state = self._new_state(None, self.path)
                for rec in reader:
                    if lsn is not None and rec.lsn >= lsn:
                        break
                    state.next_lsn = rec.lsn  # (past ops quarantined by a repair: counted already)
                    state.apply(
                        rec.lsn, rec.timestamp, self._decode_op(rec.payload, f"{self.path}: lsn {rec.lsn}")
                    )
            except DataLossError:
                continue  # compacted past the snapshot read: the newer one holds what went
            finally:
                reader.close()
            if lsn is not None:
                state.next_lsn = lsn  # (the ops below it the log lacks were quarantined by a repair)
            return state
        raise CorruptionError(self.path, 0, "no snapshot and op log position agree after 16 tries")

    def _catch_up_some(self) -> bool:
        """While waiting for the writer lock (under ``_mutex``): apply what its holders wrote so
        far, so that less is left to read once we hold it. True if there was some."""
        before = self._state.next_lsn
        self._catch_up()
        return self._state.next_lsn != before

    def _lost(self, first: int, next_lsn: int) -> None:
        self._ops_lost += next_lsn - first
        _logger.error(
            "%s: ops %d..%d are missing from the op log (quarantined by repair): what they "
            "changed may be missing or changed back",
            self.path,
            first,
            next_lsn - 1,
        )

    def _current(self) -> S:
        with self._mutex:
            self._catch_up()
            return self._state

    @contextlib.contextmanager
    def _decide(self, *, durable: bool = True, timeout_s: float | None = None) -> Iterator[_Writer[S, OpT]]:
        """The state, current, with the writer lock held: read, decide, write ops that everyone
        will apply in this order. The fsync comes after the locks are released (group commit);
        ``durable=False`` returns without waiting for it (the op rides a later fsync).
        ``timeout_s``: how long to wait for the writer lock (LockedError; None: the store's)."""
        try:
            with self._mutex:
                self._check_open()
                if self._others_write:
                    # Others wrote before our last decision: fold what they wrote so far before taking
                    # the writer lock, so that this runs while they hold it, not while they wait.
                    self._catch_up()
                with self._log.exclusive(timeout_s, sync=False, idle=self._catch_up_some) as tail:
                    base, start = tail.end
                    reader = self._reader
                    # Under the writer lock the tail is final: a reader already there has nothing
                    # to read (no pread, no look for a next segment).
                    self._others_write = self._state.next_lsn != tail.next_lsn
                    if reader is None or self._others_write or not reader.at(base, start):
                        self._catch_up()
                        base, start = tail.end
                    first = tail.next_lsn
                    writer = _Writer(self, tail)
                    outer, self._writer = self._writer, writer
                    try:
                        yield writer
                    finally:
                        self._writer = outer
                        # One write for the decision's ops. Also after an error in the decision: the
                        # ops it made before are applied, and stay made, as each was when written.
                        writer.flush()
                    reader = self._reader
                    end_base, end = tail.end
                    if writer.written and reader is not None and end_base == base:
                        # The ops just written are applied: the reader need not parse them back.
                        reader.skip_written(base, start, end, first, tail.next_lsn)
            if writer.written and self._always and durable:
                self._log.sync()  # the decision is returned only once its op is durable
            self._maybe_snapshot()  # outside the writer lock: compaction takes it itself
        except AppendError as err:
            explained = self._append_failed(err)
            if explained is None:
                raise
            raise explained from err

    def _write_alone(self, items: Sequence[OpT], apply: Callable[[int, int, OpT], object]) -> bool:
        """Under ``_mutex``, for a handle that holds the op log's writer lock for its life
        (``single_writer``): the decision of ``items`` without the decision's layers (a
        daemon's commit round of plain SETs: ``_decide`` and ``_Writer`` cost it four fifths of
        its time; docs/DESIGN.md). The ops were made by the caller, under the mutex, from the
        current state; each is one whose bytes decode to it exactly (``_exact``: they are
        applied as made, not decoded back). They are written with one write
        (``Log.append_alone``), then applied by ``apply`` (the state's ``apply`` or a cheaper
        one to the same effect), each at its lsn with its record's timestamp. False, nothing
        written or applied, whenever ``_decide`` would have more to do than that: the store
        closed, its state to be rebuilt (``_stale``), a decision open, others' ops to fold, the
        reader not at the log's end, a recovery or a rotation due (the caller takes
        ``_decide`` then). Durable with the next ``sync``."""
        if self._closed or self._stale or self._writer is not None or self._others_write:
            return False
        reader = self._reader
        if reader is None:
            return False
        state = self._state
        encode = self._encode_op
        payloads = [encode(op) for op in items]
        first = state.next_lsn
        where = [0, 0]

        def ready(base: int, start: int, next_lsn: int) -> bool:
            where[0], where[1] = base, start
            return next_lsn == first and reader.at(base, start)

        try:
            done = self._log.append_alone(payloads, ready)
        except AppendError as err:
            explained = self._append_failed(err)
            if explained is None:
                raise
            raise explained from err
        if done is None:
            return False
        timestamp, end_base, end = done
        # Written: applied now. Until every op is, the state is not the log's (one that fails
        # halfway leaves it to be rebuilt from disk, ``_catch_up``).
        self._stale = True
        for lsn, op in enumerate(items, first):
            apply(lsn, timestamp, op)
        self._stale = False
        self._fold_bytes += sum(map(len, payloads))
        if end_base == where[0]:  # (else rotated by age as it wrote: the reader reads them back)
            reader.skip_written(where[0], where[1], end, first, state.next_lsn)
        return True

    def _append_failed(self, err: AppendError) -> AppendError | None:
        """A write of a decision failed: the error to raise instead (a subclass explains what
        frees space, ``kv.Store``), or None for ``err`` itself."""
        return None

    def _append(self, op: OpT) -> int:
        """Append an op that needs no decision (it is applied by the fold like any other)."""
        self._check_open()
        return self._log.append(self._encode_op(op))

    def _append_many(self, items: list[OpT]) -> list[int]:
        self._check_open()
        return self._log.append_many([self._encode_op(op) for op in items])

    def _wait_for_ops(self, timeout_s: float) -> None:
        """Sleep until an op is appended after what this handle has applied, or ``timeout_s``."""
        if timeout_s <= 0:
            return
        with self._mutex:
            self._check_open()
            start = self._state.next_lsn
            # A reader kept from an earlier wait, with its directory watch: setting up an inotify
            # watch and taking it down again cost ~5 and ~15 ms on this machine's kernel, more
            # than a short wait itself (benchmarks/RESULTS.md, issue 7).
            waiter = self._waiters.pop() if self._waiters else None
        try:
            if waiter is None:
                waiter = self._log.reader(start)
            else:
                waiter.seek(start)
            waiter.next(timeout=timeout_s)
        except PositionError:
            if waiter is not None:
                waiter.close()
            return  # compacted past us: there is news
        except BaseException:
            if waiter is not None:
                waiter.close()
            raise
        with self._mutex:
            if self._closed:
                waiter.close()
            else:
                self._waiters.append(waiter)

    # --- snapshots --------------------------------------------------------------------------------
    def _snapshot_due(self) -> bool:
        # The work an open would redo: ops, or the bytes of ops folded since the snapshot in op
        # units, whichever is more (a batch op holds thousands of puts in one record: counting
        # records alone let 1,200,000 batched jobs pass without a snapshot, 14 s to open).
        behind = self._state.next_lsn - self._snapshot_lsn
        if self.FOLD_WORK_IN_BYTES:
            behind = max(behind, self._fold_bytes // limits.SNAPSHOT_OP_BYTES)
        return behind >= self._snapshot_ops_min and behind >= 2 * self._state_size()

    def _maybe_snapshot(self) -> None:
        """After a decision: a snapshot if one is due, at the end of the decision, or with
        ``compact_in_background`` in a thread of its own (one at a time), so that the decisions
        after it do not wait for it (only for its fork, or its copy of the state under the
        mutex: ``snapshot``)."""
        if not self._snapshot_due():
            return
        if not self._compact_in_background:
            self._snapshot_when_due()
            return
        with self._mutex:
            running = self._compactor
            if self._closing or self._closed or (running is not None and running.is_alive()):
                return
            self._compactor = threading.Thread(target=self._compact, name=f"{self.KIND}-compact", daemon=True)
            self._compactor.start()

    def _compact(self) -> None:
        try:
            self._snapshot_when_due()  # (an OSError is logged there: the next decision tries again)
        except Exception as err:  # (ClosedError: closed meanwhile; the next open snapshots)
            _logger.error("%s: background snapshot failed: %s", self.path, err)

    def _snapshot_when_due(self) -> None:
        while self._snapshot_due():  # bounded: each turn raises _snapshot_lsn or returns
            newest = self._snapshot_lsns()[:1]
            if newest and newest[0] > self._snapshot_lsn:  # another process wrote one: count from it
                self._snapshot_lsn = newest[0]
                self._fold_bytes = 0  # (what it covers is not known here: counted from now)
                continue
            try:
                self.snapshot(wait=False)
            except OSError as err:  # the op that got us here succeeded; compaction can wait
                _logger.error("%s: snapshot failed: %s", self.path, err)
            return

    def snapshot(self, *, wait: bool = True) -> int | None:
        """Write a snapshot of the state now and compact the op log below the older kept one.
        Returns its lsn, or None if another process is writing one (and ``wait`` is False).
        Durability: the snapshot is fsynced (and its name in the directory) before any op it
        covers is removed. Any thread or process (one at a time, by ``DIR/snapshot.lock``); not
        inside a decision of the same store (RuntimeError: a function given to ``modify``)."""
        with self._mutex:
            if self._writer is not None:  # (this thread's: a decision holds the mutex throughout)
                # Its ops are applied and not written: a snapshot of the state would hold ops
                # the op log does not (and compact the log past its end).
                raise RuntimeError(
                    f"{self.path}: snapshot() inside a decision of the same store (a function "
                    "given to modify): call it after the decision"
                )
        fd = self._fs.open(os.path.join(self.path, SNAPSHOT_LOCK), os.O_RDWR | os.O_CREAT)
        try:
            if not self._fs.lock(fd, limits.LOCK_TIMEOUT_S_DEFAULT if wait else 0.0):
                return None
            child = None
            with self._mutex:
                self._check_open()
                self._snapshot_lsn = self._state.next_lsn  # no second attempt from _catch_up
                self._catch_up()
                self._before_snapshot()
                next_lsn = self._state.next_lsn
                name = snapshot_name(next_lsn)
                if self._snapshot_forks():
                    # The child encodes the state as it is at the fork: the mutex is held for
                    # the fork alone, not for a copy of the state (_forked).
                    try:
                        child = _forked.write_in_child(
                            self._fs, self.path, name, self._encode_in_child, keep=(fd,)
                        )
                    except OSError as err:  # (ENOMEM, EAGAIN: no fork now; the copy will do)
                        _logger.warning(
                            "%s: no fork for the snapshot (%s): copying the state", self.path, err
                        )
                if child is None:
                    frozen = self._freeze()[1]
                self._snapshot_lsn = next_lsn
                self._fold_bytes = 0
            # The ops the snapshot holds durable before it is: a decision writes its ops, then
            # fsyncs after its locks are released (a daemon's round, ``durable=False``), so the
            # state may hold ops not yet on disk; a snapshot ahead of the op log after a power
            # loss would hide the ops appended next at those lsns (``_load`` skips one anyway).
            try:
                self._log.sync()
            except BaseException:
                if child is not None:  # reaped, its file removed
                    with contextlib.suppress(OSError):
                        child.wait()
                    with contextlib.suppress(FileNotFoundError):
                        self._fs.unlink(child.tmp)
                raise
            # temp, fsync, rename, fsync dir. A crash anywhere leaves the older snapshots and
            # the whole op log above them: nothing is removed until this is durable.
            if child is None:
                replace_file(self._fs, self.path, name, self._encode_snapshot(frozen))
            else:
                try:
                    child.wait()
                    install_temp(self._fs, self.path, child.tmp, name)
                except BaseException:  # (reaped, its file removed: nothing of it is left)
                    child.abandon()
                    raise
            self._snapshot_written(next_lsn, os.path.join(self.path, name))
            kept = self._snapshot_lsns()[:SNAPSHOTS_KEPT]
            # The op log must keep every op above the older kept snapshot (the fallback if the
            # newest cannot be read); retention removes whole segments below this position.
            self._log.rewind_subscriber(SNAPSHOT_SUBSCRIBER, kept[-1])
            for lsn in self._snapshot_lsns()[SNAPSHOTS_KEPT:]:
                with contextlib.suppress(FileNotFoundError):
                    self._fs.unlink(os.path.join(self.path, snapshot_name(lsn)))
            self._fs.fsync_dir(self.path)
            self._log.enforce_retention()
            return next_lsn
        finally:
            self._fs.close(fd)  # closing releases the flock

    # --- closing ----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(self.path, f"{self.WHAT} is closed")

    def close(self) -> None:
        """Close the store, after a snapshot running in the background is written. Idempotent."""
        with self._mutex:
            self._closing = True  # (a decision ending now starts no compactor)
            compactor = self._compactor
        if compactor is not None:
            compactor.join()  # (outside the mutex: it takes the mutex itself)
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            if self._reader is not None:
                self._reader.close()
            for waiter in self._waiters:
                waiter.close()
            self._waiters.clear()
            self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Writer(Generic[S, OpT]):
    """Makes ops inside ``FoldedStore._decide``: each is applied at once, as every other process
    will read it (decoded from its own bytes, at the lsn it will have, with the timestamp its record
    will carry), and all are written together, in one write, when the decision ends. Under the
    writer lock, after a catch-up: nobody appends in between, so the lsns are known beforehand.
    If the write fails, the state is ahead of the log and is rebuilt from disk before its next
    use (``FoldedStore._stale``); the reader skips the ops once they are written."""

    def __init__(self, store: FoldedStore[S, OpT], tail: Tail) -> None:
        self._store = store
        self._tail = tail
        self._payloads: list[bytes] = []
        self._timestamp = 0
        self.written = False

    def write(self, op: OpT) -> object:
        """Make ``op`` (applied now, written when the decision ends); returns what the fold's
        ``apply`` returned."""
        return self.write_many([op])[0]

    def write_many(
        self, items: list[OpT], apply: Callable[[int, int, OpT], object] | None = None
    ) -> list[object]:
        """Make ``items`` (as ``write``). ``apply``: the state's function that applies them, to
        the same effect as its ``apply`` (a cheaper one for ops its caller knows: ``State.apply_plain``)."""
        if not items:
            return []
        store = self._store
        encode = store._encode_op
        payloads = self._tail.check([encode(op) for op in items])  # before applying any
        timestamp = self._stamp()
        state = store._state
        if apply is None:
            apply = state.apply
        out = []
        store._stale = True  # until the write: an apply that fails halfway leaves it so too
        path = store.path
        exact = store._exact
        pending = self._payloads.append
        for made, payload in zip(items, payloads, strict=True):
            pending(payload)
            # Applied as every other process will read it: decoded back from its own bytes,
            # unless the op is one whose bytes decode to it exactly (``_exact``: a kept SET of
            # bytes; a fifth of a SET's decision)
            op = made
            if not exact(made):
                try:
                    op = store._decode_op(payload, path)
                except CorruptionError:  # (the message names the lsn: built only when it is needed)
                    store._decode_op(payload, f"{path}: lsn {state.next_lsn}")
                    raise
            out.append(apply(state.next_lsn, timestamp, op))
        return out

    def room(self) -> int:
        """How many bytes of records the decision may still write before its write rotates the
        op log's segment (``Tail.room``, less the ops made so far)."""
        pending = sum(map(len, self._payloads)) + len(self._payloads) * fmt.RECORD_OVERHEAD
        return self._tail.room() - pending

    def _stamp(self) -> int:
        """The timestamp of the decision's records (one for all, not below the log's last)."""
        if not self._timestamp:
            now, last = time.time_ns(), self._tail.timestamp
            self._timestamp = now if now > last else last
        return self._timestamp

    def begin_applied(self) -> tuple[int, int]:
        """For an op the caller applies itself, piece by piece, through the fold's own steps
        (each piece's choice depends on the ones before: a TAKE_MANY's picks): the lsn and the
        timestamp the op will have. Then ``write_applied`` writes it, before any other op."""
        self._store._stale = True  # until the write
        return self._store._state.next_lsn, self._stamp()

    def write_applied(self, op: OpT) -> None:
        """Write ``op``, applied already by the caller (``begin_applied``) exactly as the fold
        applies it. Its bytes are decoded back and must give the op again."""
        store = self._store
        state = store._state
        [payload] = self._tail.check([store._encode_op(op)])
        if store._decode_op(payload, f"{store.path}: lsn {state.next_lsn}") != op:
            raise AssertionError(f"{op!r} does not read back from its own bytes")  # pragma: no cover
        self._payloads.append(payload)
        state.next_lsn += 1

    def replay(self, state: S, each: Callable[[], None]) -> None:
        """Apply to ``state`` (built aside at the lsn of the first op not written yet:
        ``FoldedStore._state_at``) the ops made and not written yet, as they were applied;
        ``each`` called after each."""
        store = self._store
        first = store._state.next_lsn - len(self._payloads)
        assert state.next_lsn == first, (state.next_lsn, first)
        for lsn, payload in enumerate(self._payloads, first):
            state.apply(lsn, self._timestamp, store._decode_op(payload, f"{store.path}: lsn {lsn}"))
            each()

    def unwritten(self) -> int:
        """How many ops the decision made that are not written yet."""
        return len(self._payloads)

    def unwritten_payload(self, lsn: int) -> bytes | None:
        """The payload of the op at ``lsn`` if the decision made it and has not written it yet."""
        first = self._store._state.next_lsn - len(self._payloads)
        return self._payloads[lsn - first] if first <= lsn < first + len(self._payloads) else None

    def flush(self) -> None:
        """Write the ops made since the last flush (their records share one timestamp)."""
        payloads, self._payloads = self._payloads, []
        if not payloads:
            return
        store = self._store
        first = store._state.next_lsn - len(payloads)
        lsns = self._tail.append_many(payloads, timestamp=self._timestamp)
        assert lsns[0] == first, (lsns[0], first)
        store._fold_bytes += sum(map(len, payloads))
        self.written = True
        store._stale = False
