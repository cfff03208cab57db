"""The log: a directory of segments, written by many threads and processes, read without locks.

Guarantees (docs/DURABILITY.md has the full argument):
- ``durability="always"`` (default): ``append`` returns after the record is fsynced. Concurrent
  appenders in one process share one fsync (group commit: the first to need a sync becomes the
  leader and covers everyone whose write came before its fsync began); threads appending through
  one handle queue, and the thread with the write role writes them all in one write.
- ``"interval"``: a background thread fsyncs at most every ``sync_interval_ms``; a power failure
  loses at most the records appended in that window (plus one fsync's duration).
- ``"os"``: the page cache only: survives a crash of the process, not of the machine.
- Lsns start at 0 and are contiguous across segments and processes. Writers serialise on an
  exclusive flock of ``DIR/lock``, held for one write (or, with ``single_writer=True``, from open
  to close); readers take no lock.
- An fsync or write error that cannot be undone makes the handle fail-stop (FailedError).

``Log`` is the facade: it checks the options, wires the parts, and keeps the public methods.
The parts, each with its state and invariants at the top of its file: ``_handle.HandleState``
(closed, failed, usable), ``_directory`` (meta, names, listing), ``_sync.Syncer`` (DIR/sync: the
mark, the role, gates and hints), ``_active.ActiveSegment`` (the active segment, its index and
the writer lock), ``_recovery.Recovery`` (recovery and catch-up), ``_writer.Writer`` (appends,
the write queue, group commit, the flush thread) and ``_writer.Tail`` (appends inside
``exclusive()``). Subscribers, retention and readers are ``logspool._subscribers``,
``_retention`` and ``_reader``.

Locks of one handle, in the order they are taken (a thread holding one takes only locks further
down the list, never one above it):

1. the write role: ``Writer._wq_busy`` (a flag, changed under 4): the one thread that writes
   the write queue's next batch. Held across 2, 3 and the fsync (5-7).
2. ``ActiveSegment.lock`` (thread lock): the writer state of the handle: every field of
   ``ActiveSegment`` but ``written`` (``fd``, ``idx_fd``, ``base``, ``end``, ``alloc_end``,
   ``next_lsn``, ``last_ts``, ``index_due``, ``index_ok``, ``deadline_ns``,
   ``needs_recovery``, ``rotated``, ``single``), ``Writer.exclusive_owner`` and
   ``_batch_first``, and ``Recovery``'s view of the boot.
3. the flock of ``DIR/lock`` (``ActiveSegment.lock_fd``; for the handle's life with
   ``single_writer``): the same across processes: the segments' ends, their index files, the
   tail hint in ``DIR/sync``. Always taken with 2 held (``ActiveSegment.locked``).
4. ``Writer._wq_mutex`` (thread lock): the write queue (``wq``, ``_wq_busy``, ``_wq_expected``,
   ``_wq_gate``). A leaf: held for a few statements, with or without 2 and 3, and nothing is
   taken under it.
5. the sync role: ``Syncer._running``, set and waited for under ``Syncer._cond`` (a condition;
   it guards ``_running``, ``_waiters`` and ``synced_next``, and ``ActiveSegment.written``'s
   reset when the files close): the one thread of the process that fsyncs or changes the
   mark. Taken with or without 2 and 3 (rotation and recovery hold them; group commit does
   not); ``_cond`` itself is never held across an fsync.
6. a gate: an OFD lock on one byte of ``DIR/sync`` (FORMAT.md §8.1): the process that gathers
   before the next fsync. Taken with 5 held.
7. the flock of ``DIR/sync`` (``Syncer._fd``): the mark, the gathering hint and the boot id;
   ``LOCK_SH`` to read, ``LOCK_EX`` to change, held through the fsync it claims. Taken with 5
   held, except by recovery's reads of the mark and its setting of the boot id (under 2 and 3).

Not locks: ``ActiveSegment.written`` is replaced whole under 2 and read by the syncer without
it; ``Syncer.durable_lsn`` is raised under 2 (records adopted) and under 5's condition (an fsync
done), and any value up to what an fsync proved is safe to write into a record.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Literal

from .. import _codec, limits
from .. import _format as fmt
from .._fs import REAL, FileSystem
from .._reader import OnDataLoss, Position, Reader
from .._retention import Retention, RetentionReport, read_policy, write_policy
from .._retention import enforce as enforce_retention
from .._subscribers import (
    Checkpoints,
    Subscriber,
    SubscriberInfo,
    check_name,
    is_transient,
    subscriber_info,
)
from ..errors import AppendError, LockedError, SubscriberExistsError, SubscriberNotFoundError
from ._active import ActiveSegment
from ._directory import LogInfo, list_segments, open_meta, segment_infos
from ._handle import HandleState
from ._recovery import Recovery
from ._sync import Syncer, WouldWait
from ._writer import Tail, Writer, _Pending

_logger = logging.getLogger("logspool")

Durability = Literal["always", "interval", "os"]
_DURABILITIES = ("always", "interval", "os")

# Every open handle, so that a forked child marks them unusable (the hot path tests one flag,
# not os.getpid(); HandleState.check_usable then names fork as the reason).
_HANDLES: weakref.WeakSet[Log] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for handle in list(_HANDLES):
        handle._state.usable = False
        handle._active.forget_lock_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Log:
    """A handle on one log directory. Thread-safe; one handle per process (not across fork).

    Use ``logspool.open`` to make one. Appends from many threads and many processes interleave
    safely; every method says its durability and who may call it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "always",
        sync_interval_ms: int = limits.SYNC_INTERVAL_MS_DEFAULT,
        readonly: bool = False,
        create: bool = True,
        segment_size_max: int | None = None,
        index_interval: int | None = None,
        record_size_max: int | None = None,
        lock_timeout_s: float = limits.LOCK_TIMEOUT_S_DEFAULT,
        single_writer: bool = False,
        segment_age_max_s: float | None = None,
        compression: str | None = None,
        compression_level: int | None = None,
        fs: FileSystem | None = None,
    ) -> None:
        self.path = os.fspath(path)
        _codec.check(compression, compression_level)
        if durability not in _DURABILITIES:
            raise ValueError(f"durability must be one of {_DURABILITIES}, not {durability!r}")
        if not isinstance(sync_interval_ms, int) or sync_interval_ms < 1:
            raise ValueError(f"sync_interval_ms must be a positive integer, not {sync_interval_ms!r}")
        self.durability: Durability = durability
        if segment_age_max_s is not None and (
            isinstance(segment_age_max_s, bool)
            or not isinstance(segment_age_max_s, int | float)
            or not 0 < segment_age_max_s < 1e9
        ):
            raise ValueError(
                f"segment_age_max_s must be a positive number of seconds, not {segment_age_max_s!r}"
            )
        self.readonly = readonly
        if not isinstance(single_writer, bool):
            raise TypeError(f"single_writer must be True or False, not {single_writer!r}")
        if single_writer and readonly:
            raise ValueError("single_writer=True needs a handle that writes, not readonly=True")
        # The handle holds the writer flock from open to close: no other process appends (they
        # wait, or fail with LockedError), so appends skip the flock, the size check and the
        # sync lock (docs/DESIGN.md, "single writer"). Readers, subscribers and retention go on.
        self.single_writer = single_writer
        self._fs = fs or REAL
        self._lock_timeout_s = lock_timeout_s
        self._state = HandleState(self.path, readonly=readonly)
        # The last error of an automatic retention pass (after a rotation), if it failed: the
        # append that rotated succeeded, so the error is logged and kept here, not raised.
        self.retention_error: BaseException | None = None
        self.meta = open_meta(
            self._fs,
            self.path,
            create=create and not readonly,
            segment_size_max=segment_size_max,
            index_interval=index_interval,
            record_size_max=record_size_max,
            compression=compression,
            compression_level=compression_level,
        )
        self.record_size_max = self.meta.record_size_max
        self._syncer = Syncer(self._fs, self.path, self.record_size_max)
        self._active = ActiveSegment(
            self._fs,
            self.meta,
            self._syncer,
            self._state,
            gather=durability == "always",
            segment_age_max_ns=None if segment_age_max_s is None else int(segment_age_max_s * 1e9),
        )
        _HANDLES.add(self)  # (once the parts a forked child touches exist)
        self._recovery = Recovery(self._fs, self.path, self._active, self._syncer, durability=durability)
        self._active.catch_up = self._recovery.catch_up
        level = None
        if self.meta.compression is not None and not readonly:
            level = self.meta.compression_level or limits.ZSTD_LEVEL_DEFAULT
        self._writer = Writer(
            self._fs,
            self._active,
            self._recovery.catch_up,
            self._syncer,
            self._state,
            durability=durability,
            compression_level=level,
            sync_interval_s=sync_interval_ms / 1000.0,
            after_rotation=self._retain_after_rotation,
        )
        # The hot call, one frame shorter: the instance's append is the writer's (the class's
        # ``append`` below documents it, and is what it does).
        self.append = self._writer.append  # type: ignore[method-assign]
        if not readonly:
            self._open_writer()
            if durability == "interval":
                self._writer.start_flusher()

    def _open_writer(self) -> None:
        """Open the lock and sync files and recover the log, under the writer lock (taken for
        the handle's life with ``single_writer``)."""
        active = self._active
        active.open_lock_file()
        self._syncer.open()
        if self.single_writer:
            active.hold_for_life(self._lock_timeout_s)
            try:
                self._recovery.recover()
            except BaseException:
                active.release_for_life()
                raise
            return
        with self._writer.locked(self._lock_timeout_s):
            self._recovery.recover()

    @property
    def _wq(self) -> list[_Pending]:
        """The appends waiting in the write queue (read by tests/crash/test_write_queue.py)."""
        return self._writer.wq

    # --- appending --------------------------------------------------------------------------------
    def append(self, payload: bytes) -> int:
        """Append one record and return its lsn.

        Durability: with ``"always"`` returns after the record is fsynced (sharing the fsync with
        concurrent appenders); ``"interval"`` and ``"os"`` return once it is in the page cache.
        Concurrency: any thread; any number of processes with their own handles. With
        ``"always"``, threads of one handle that append at once are written together: one thread
        writes the records queued behind it in one write and one fsync (docs/DESIGN.md, "write
        queue").
        """
        return self._writer.append(payload)

    def append_many(self, payloads: Iterable[bytes]) -> list[int]:
        """Append records in order under one lock hold and one fsync; return their lsns.

        All or nothing on error: if the write fails, none of the batch stays in the log, before
        or after a reopen. (A batch is written into one segment with one write: if it
        does not fit in the active segment, that one is sealed first; a batch larger than a
        segment gets a segment of its own. ValueError if it is larger than a segment may be.)
        Durability and concurrency as ``append``.
        """
        return self._writer.append_many(payloads)

    def append_alone(
        self, payloads: list[bytes], ready: Callable[[int, int, int], bool]
    ) -> tuple[int, int, int] | None:
        """For a handle that holds the writer lock for its life (``single_writer``), a state
        machine's shortest way down (a daemon's commit round of plain writes): append
        ``payloads`` in order, as one write, unless that would rotate the active segment (by
        size or by age) or ``ready(base, start, next_lsn)`` (where they would go, called under
        the writer lock just before the write) says no. Returns (the records' timestamp, the
        segment and offset where they end), or None, nothing written, for any other handle, a
        recovery due, a rotation, or no from ``ready``: the caller takes ``exclusive()``
        instead. Errors and durability as ``Tail.append_many`` (durable with the next ``sync``;
        all or nothing). The segment the records went to is the ``base`` ``ready`` was given
        unless the clock passed the segment's age between the look and the write."""
        return self._writer.append_alone(payloads, ready)

    def sync(self, *, gather: bool = True, wait: bool = True) -> bool:
        """Make every record this handle has written durable (fsync). Any thread. True on
        return: durable.

        ``gather``: with durability ``"always"``, the fsync may first wait, at most about the
        cost of one fsync, for the records of the writers the last fsync covered (other
        processes and threads appending again), so that one fsync covers them too (docs/DESIGN.md,
        "gathering across processes"). False for a caller that writes nothing while it waits
        and wants its own records durable at once: a single thread that writes batches and
        then syncs them (a daemon's commit round) would otherwise wait, after each batch smaller
        than the one before, for records only it could write.

        ``wait=False``: for a caller that must never wait for another thread or process (a
        daemon's event loop). If another thread of this handle is fsyncing, or another process
        holds the sync file's lock (its fsync under way), return False at once, nothing done:
        call ``sync()`` from a thread that may wait. (It still does its own fsync, and ignores
        ``gather``.)"""
        if self.readonly:
            return True
        return self._writer.sync(gather, wait)

    # --- exclusive appends for state machines ------------------------------------------------------
    def exclusive(
        self, timeout_s: float | None = None, *, sync: bool = True, idle: Callable[[], bool] | None = None
    ) -> _Exclusive:
        """``with log.exclusive() as tail``: hold the writer lock: no other thread or process
        appends until the block ends.

        The ``Tail`` says the next lsn; a state machine reads up to it, decides, and appends
        through ``tail.append`` knowing nobody appended in between. Durability as ``append``:
        with ``"always"`` the block's records are fsynced when it ends, before it returns. With
        ``sync=False`` the caller calls ``sync()`` itself (after releasing its own locks, so that
        its threads share one fsync). ``idle``: called while another process holds the lock
        (True if it did some work, such as reading what that process writes; else the wait
        sleeps a little before it looks again).

        ``timeout_s=0``: for a caller that must never wait (a daemon's event loop): LockedError
        at once if the lock is held, and also if adopting what other processes wrote would wait
        for another thread's or process's fsync (their rotation crossed, a torn tail to cut) or
        needs a recovery first: a thread that may wait takes it then.
        """
        return _Exclusive(self, timeout_s if timeout_s is not None else self._lock_timeout_s, sync, idle)

    # --- cutover ----------------------------------------------------------------------------------
    def cutover(self) -> int:
        """Seal the active segment and start the next one (BinLog's end-of-day cut).

        Returns the base lsn of the new segment. If the active segment holds no record, nothing is
        done and its base lsn is returned. Durability: the sealed segment is fsynced unless "os".
        Concurrency: any thread or process.
        """
        active = self._active
        with self._writer.locked(self._lock_timeout_s):
            self._recovery.catch_up()
            if active.end > fmt.SEGMENT_HEADER_SIZE:
                active.rotate()
            base = active.base
        if active.rotated:
            self._retain_after_rotation()
        return base

    # --- subscribers ------------------------------------------------------------------------------
    def _checkpoints(self) -> Checkpoints:
        return Checkpoints(self.path, self._fs, self.record_size_max)

    def subscribe(
        self,
        name: str,
        start: Position | None = None,
        *,
        since: datetime | float | int | None = None,
        auto_commit: bool = False,
        on_data_loss: OnDataLoss = "fail",
    ) -> Subscriber:
        """A reader whose position is kept under ``name`` (see ``Subscriber``).

        A durable subscriber that exists resumes at its committed position (``start`` and
        ``since`` only apply to a new one, whose start is committed at once; the default start is
        ``"earliest"``). Names starting with ``~`` are transient: no checkpoint, and by default
        they start at ``"latest"``.
        If retention removed records the subscriber had not read: ``DataLossError``, or with
        ``on_data_loss="skip"`` it goes on from the earliest record and lists the gap in ``gaps``.
        Any thread or process; one thread at a time per Subscriber object.
        """
        self._check_open()
        name = check_name(name)
        if start is None:  # the default: a durable subscriber reads everything, a transient one what comes
            start = "latest" if is_transient(name) and since is None else "earliest"
        return Subscriber(
            self._checkpoints(),
            name,
            start=start,
            since=since,
            auto_commit=auto_commit,
            on_data_loss=on_data_loss,
        )

    def add_subscriber(
        self, name: str, start: Position = "earliest", *, since: datetime | float | int | None = None
    ) -> int:
        """Create the durable subscriber ``name`` at ``start`` (or ``since``) and return its lsn.

        Durability: returns after its checkpoint is fsynced. SubscriberExistsError if it exists.
        """
        self._check_open()
        name = self._durable_name(name)
        with self._checkpoints() as cps:
            if cps.read(name) is not None:
                raise SubscriberExistsError(self.path, name)
            return cps.write(name, cps.resolve(start, since)).lsn

    def remove_subscriber(self, name: str) -> None:
        """Delete the durable subscriber ``name`` (it no longer holds back retention)."""
        self._check_open()
        self._checkpoints().remove(self._durable_name(name))

    def rewind_subscriber(
        self, name: str, start: Position = "earliest", *, since: datetime | float | int | None = None
    ) -> int:
        """Move the durable subscriber ``name`` to ``start`` (an lsn, "earliest", "latest") or to
        the first record at or after ``since``; return its new lsn. Durable on return. A process
        reading as that subscriber keeps its own position until it reopens (or commits over it)."""
        self._check_open()
        name = self._durable_name(name)
        with self._checkpoints() as cps:
            cp = cps.read(name)
            if cp is None:
                raise SubscriberNotFoundError(self.path, name)
            return cps.write(name, cps.resolve(start, since), cp.created_ns).lsn

    def copy_subscriber(self, source: str, target: str) -> int:
        """Create ``target`` at the position of ``source``; return that lsn. Durable on return."""
        self._check_open()
        source, target = self._durable_name(source), self._durable_name(target)
        with self._checkpoints() as cps:
            cp = cps.read(source)
            if cp is None:
                raise SubscriberNotFoundError(self.path, source)
            if cps.read(target) is not None:
                raise SubscriberExistsError(self.path, target)
            return cps.write(target, cp.lsn).lsn

    def subscribers(self) -> list[SubscriberInfo]:
        """Every durable subscriber with its lag (records, bytes, age). Any thread; no lock."""
        info = self.info()
        cps = self._checkpoints()
        return [subscriber_info(cps, cp, info.first_lsn, info.next_lsn) for cp in cps.all()]

    def _durable_name(self, name: str) -> str:
        name = check_name(name)
        if is_transient(name):
            raise ValueError(f"{name!r} is a transient subscriber name ('~'): it has no checkpoint")
        return name

    # --- retention --------------------------------------------------------------------------------
    @property
    def retention(self) -> Retention | None:
        """The stored retention policy (applied by every writer after each rotation), or None."""
        return read_policy(self._fs, self.path)

    def set_retention(self, policy: Retention | None) -> None:
        """Store ``policy`` for this log (None: keep everything). Durable on return. Takes effect
        at the next rotation of any writer, or at once with ``enforce_retention()``."""
        self._check_open()
        if policy is not None and not isinstance(policy, Retention):
            raise TypeError(f"policy must be a logspool.Retention or None, not {type(policy).__name__}")
        write_policy(self._fs, self.path, policy)

    def enforce_retention(self, policy: Retention | None = None, *, dry_run: bool = False) -> RetentionReport:
        """Apply ``policy`` (default: the stored one) now; with ``dry_run``, only report what
        would go. Durability: removals are fsynced in the directory before return. Any thread or
        process, concurrently with writers and readers."""
        self._check_open()
        if policy is None:
            policy = self.retention
        if policy is None:
            return RetentionReport(dry_run)
        return enforce_retention(self._fs, self.path, self._checkpoints(), policy, dry_run=dry_run)

    def _retain_after_rotation(self) -> None:
        self._active.rotated = False
        try:
            self.enforce_retention()
        except Exception as err:  # the append succeeded; report the pass's failure, don't raise it
            self.retention_error = err
            _logger.error("%s: retention after rotation failed: %s", self.path, err, exc_info=True)

    # --- reading ----------------------------------------------------------------------------------
    def reader(
        self,
        start: Position = "earliest",
        *,
        since: datetime | float | int | None = None,
    ) -> Reader:
        """A reader positioned at ``start`` (an lsn, "earliest" or "latest") or at ``since``.

        ``since`` is a datetime (naive means UTC) or seconds since the epoch: the reader starts at
        the first record whose timestamp is at or after it. Readers take no lock, never return a
        partial record, and can block at the tail with ``next(timeout=...)``. Any thread may make
        one; one reader is used by one thread at a time.
        """
        self._check_open()
        return Reader(self.path, self._fs, self.record_size_max, start=start, since=since)

    def read(
        self,
        start: Position = "earliest",
        *,
        since: datetime | float | int | None = None,
    ) -> Iterator[fmt.Record]:
        """Iterate over the records from ``start`` (or ``since``) to the current end, not waiting."""
        reader = self.reader(start, since=since)
        try:
            yield from reader
        finally:
            reader.close()

    def _check_open(self) -> None:
        self._state.check_open()

    @property
    def next_lsn(self) -> int:
        """The lsn the next append will get, as seen now on disk. Any thread."""
        self._check_open()
        return self.info().next_lsn

    def info(self) -> LogInfo:
        """Segments, sizes and the lsn range, read from disk now (no lock). Any thread."""
        self._check_open()
        bases = list_segments(self._fs, self.path)
        segments = segment_infos(self.path, bases)
        next_lsn = bases[-1] if bases else 0
        end = segments[-1].size if segments else 0
        if bases:  # (the head: from the newest segment's last index entry, as a "latest" reader)
            probe = Reader(self.path, self._fs, self.record_size_max, start="latest")
            try:
                next_lsn = probe.position
                base, offset = probe.offset
                if segments and base == segments[-1].base_lsn:  # (else rotated meanwhile)
                    end = min(offset, end)  # (the file's size was read first: it may have grown)
            finally:
                probe.close()
        return LogInfo(
            path=self.path,
            first_lsn=bases[0] if bases else 0,
            next_lsn=next_lsn,
            size=sum(s.size for s in segments),
            segments=tuple(segments),
            meta=self.meta,
            end=end,
        )

    # --- closing ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the handle. With "interval" durability, fsync what is pending first. Idempotent."""
        state = self._state
        if state.closed:
            return
        self._writer.close()
        active = self._active
        with active.lock:
            if state.usable:
                active.trim_zeros()
            active.end_hold()  # (its thread ends; the flag in DIR/sync is cleared while mapped)
            state.closed = True
            state.usable = False
            if active.fd >= 0 or active.idx_fd >= 0:
                active.close_fds()
            self._syncer.close()
            active.close_lock()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<logspool.Log {self.path!r} durability={self.durability}>"


def open(
    path: str | os.PathLike[str],
    *,
    durability: Durability = "always",
    sync_interval_ms: int = limits.SYNC_INTERVAL_MS_DEFAULT,
    readonly: bool = False,
    create: bool = True,
    segment_size_max: int | None = None,
    index_interval: int | None = None,
    record_size_max: int | None = None,
    lock_timeout_s: float = limits.LOCK_TIMEOUT_S_DEFAULT,
    single_writer: bool = False,
    segment_age_max_s: float | None = None,
    compression: str | None = None,
    compression_level: int | None = None,
    fs: FileSystem | None = None,
) -> Log:
    """Open (and by default create) the log at ``path``. The options are those of ``Log``, with
    the same defaults."""
    return Log(
        path,
        durability=durability,
        sync_interval_ms=sync_interval_ms,
        readonly=readonly,
        create=create,
        segment_size_max=segment_size_max,
        index_interval=index_interval,
        record_size_max=record_size_max,
        lock_timeout_s=lock_timeout_s,
        single_writer=single_writer,
        segment_age_max_s=segment_age_max_s,
        compression=compression,
        compression_level=compression_level,
        fs=fs,
    )


# One signature in two places: open's options are Log's, with the same defaults (checked here, at
# import, so that an option added to one and not the other fails every test).
assert open.__kwdefaults__ == Log.__init__.__kwdefaults__, "open() and Log() take other options"


class _Exclusive:
    """``Log.exclusive``: a class, not a generator (a commit round of the daemon enters one;
    see ``_active._Locked``)."""

    __slots__ = ("_first", "_locked", "_log", "_sync", "_waits")

    def __init__(
        self, log: Log, timeout_s: float | None, sync: bool, idle: Callable[[], bool] | None
    ) -> None:
        self._log = log
        self._sync = sync
        self._first = -1
        self._waits = timeout_s != 0
        self._locked = log._writer.locked(timeout_s, idle)

    def __enter__(self) -> Tail:
        log = self._log
        writer, active = log._writer, log._active
        self._locked.__enter__()
        try:
            # (a handle that holds the writer flock for its life, or since its last write, is the
            # only writer: nothing to adopt, as on append's hot path; a read of the end less)
            if active.needs_recovery or not (active.single or active.held):
                if self._waits:
                    log._recovery.catch_up()
                else:
                    self._catch_up_now()
            self._first = active.next_lsn
            writer.exclusive_owner = threading.get_ident()
            return Tail(active, writer)
        except BaseException:
            self._locked.__exit__(*sys.exc_info())
            raise

    def _catch_up_now(self) -> None:
        """``timeout_s=0``: the catch-up, refusing every wait (``Syncer.refusing_waits``): a
        refused one leaves the handle to recover first at its next write (``WouldWait`` is an
        OSError: ``Recovery.catch_up``), which a thread that may wait then does."""
        log = self._log
        if log._active.needs_recovery:
            raise LockedError(log.path, 0)  # (a recovery takes the sync role and flock, waiting)
        try:
            with log._syncer.refusing_waits():
                log._recovery.catch_up()
        except AppendError as err:
            if isinstance(err.__cause__, WouldWait):
                raise LockedError(log.path, 0) from err
            raise

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        log = self._log
        writer, active = log._writer, log._active
        writer.exclusive_owner = None
        self._locked.__exit__(exc_type, *exc)
        if exc_type is not None:
            return  # (as the records written: durable with the next fsync)
        if self._sync and log.durability == "always" and active.next_lsn > self._first:
            writer.await_durable(active.written[1])
        if active.rotated:
            log._retain_after_rotation()
