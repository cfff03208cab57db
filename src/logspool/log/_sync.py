"""The sync file, ``DIR/sync``: the one module that reads or changes it (FORMAT.md §8.1).

The file is the writers' shared state across processes: the **mark** (every byte of every
segment before it has been fsynced), the **boot id** (the boot in which a writer last recovered
the newest segment whole), the **gathering hint** and its two **gates** (who fsyncs next, and
when), and the **tail hint** (where the last record written is). Its users:

- a writer handle: ``Syncer`` (one per handle): the mark raised after each fsync, lowered
  before each cut; the gathered fsync across processes; the boot id, the tail hint; making the
  mark durable;
- readers: ``MarkView``, the mark through a read-only shared mapping;
- ``verify`` and ``repair``: ``read_mark``; ``lower_mark`` and ``forget_boot`` for repair.

Invariants (each user relies on them; all are kept here):

- The mark is raised only after the fsync it claims, and only under the file's exclusive flock,
  which the fsyncing process holds until its fsync is done. So a process that reads it under the
  shared flock sees either the mark before an fsync or the mark after it, never a mark that
  claims bytes no fsync covered; and any copy of it that reaches the disk claims no more than
  the truth: readers, recovery, ``verify`` and ``repair`` take it as proof.
- Before a segment is cut (a torn tail, a failed write's rollback, repair), the mark is lowered
  to the cut, under the exclusive flock, before the truncate and again after it (a syncer that
  measured the records before the truncate may have raised it in between).
- A syncer raises the mark to the end of the whole, valid records it found before its fsync
  began (never to the file's size: the preallocated zeros are no records).
- Within a process, one thread at a time holds the *sync role* (a flock belongs to an open file
  description, which the threads share: it cannot order them). Whoever fsyncs, or changes the
  mark, holds the role. ``synced_next`` (every lsn below it is fsynced, as far as this handle
  knows) only grows, and never past what a completed fsync covered.
- The gathering hint, the gates and the tail hint are advisory: any value in them is safe. They
  decide who fsyncs and when, or spare a catch-up a parse; they never decide what is durable.
- The tail hint is read and written only under the writer lock (``DIR/lock``), not this file's
  flock. The boot id is written only under this file's exclusive flock. The writer-wanted flag
  is set by anyone about to wait for the writer lock and cleared by its holder before it gives
  the lock back; a stale value only makes a holder give the lock back once too soon, or keep it
  until its hold ends by time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator

from .. import _format as fmt
from .. import _segment as seg
from .. import limits
from .._fs import FileSystem
from .._watch import DirectoryWatch
from ..errors import FailedError

PROVEN_ALL = 1 << 62  # "every byte of the segment": the mark is in a later segment
_ZERO_HEADER = bytes(fmt.RECORD_HEADER_SIZE)
_SYNC_LOOKAHEAD = 4096  # how far a syncer looks for records others wrote after its own


def proven_offset(mark: tuple[int, int], base: int) -> int:
    """The offset in segment ``base`` below which ``mark`` proves every byte fsynced: the mark's
    offset in that segment, all of it if the mark is in a later segment, 0 if in an earlier one."""
    mark_base, offset = mark
    if mark_base == base:
        return offset
    return PROVEN_ALL if mark_base > base else 0


def proven_text(proven: int) -> str:
    """How far a proven offset reaches, for a message: "its end" or "offset N"."""
    return "its end" if proven == PROVEN_ALL else f"offset {proven}"


# --- from outside a writer: verify, repair, readers ------------------------------------------------
def read_mark(fs: FileSystem, root: str) -> tuple[tuple[int, int], bytes]:
    """The sync mark of the log at ``root``, read under the sync file's shared flock (so it is
    never a torn mix of two marks), and the boot the newest segment was last recovered in
    (b"": none known). ((0, 0), b""), "nothing known", if there is no sync file."""
    try:
        fd = fs.open(os.path.join(root, fmt.SYNC_NAME), os.O_RDONLY)
    except (FileNotFoundError, PermissionError):
        return (0, 0), b""
    try:
        fs.lock_shared(fd)
        try:
            raw = fs.pread(fd, fmt.SYNC_FILE_SIZE, 0)
        finally:
            fs.unlock(fd)
    finally:
        fs.close(fd)
    if len(raw) < fmt.SYNC_FILE_SIZE:
        return (0, 0), b""
    return fmt.read_sync_mark(raw), fmt.read_sync_boot(raw)


def lower_mark(fs: FileSystem, root: str, base: int, offset: int) -> None:
    """Repair, before cutting segment ``base`` at ``offset``: the writers' sync mark must not
    claim bytes written there later as durable. Durable on return."""

    def lower(view: mmap.mmap) -> None:
        if fmt.read_sync_mark(view) > (base, offset):
            fmt.write_sync_mark(view, base, offset)

    _change(fs, root, lower)


def forget_boot(fs: FileSystem, root: str) -> None:
    """Repair, before changing segments: the next writer recovers the newest segment whole, not
    from its last index entry, and no writer trusts the tail hint. Durable on return."""

    def forget(view: mmap.mmap) -> None:
        fmt.write_sync_boot(view, b"")
        fmt.clear_sync_tail(view)  # (it may name records repair changes)

    _change(fs, root, forget)


def _change(fs: FileSystem, root: str, change: Callable[[mmap.mmap], None]) -> None:
    """Apply ``change`` to the sync file's mapping under its exclusive flock (if it exists), and
    make it durable before returning."""
    try:
        fd = fs.open(os.path.join(root, fmt.SYNC_NAME), os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        if fs.size(fd) < fmt.SYNC_FILE_SIZE:
            return
        fs.lock_blocking(fd)
        try:
            view = fs.map_shared(fd, min(fs.size(fd), fmt.SYNC_FILE_SIZE_TAIL))
            try:
                change(view)
                # Durable before repair goes on: a mark lowered over bytes repair cuts must
                # not come back after a power loss and prove records written there later.
                fs.msync(view)
                fs.fsync(fd)
            finally:
                view.close()
        finally:
            fs.unlock(fd)
    finally:
        fs.close(fd)


class WouldWait(BlockingIOError):
    """A syncer's wait refused (``Syncer.refusing_waits``): an OSError, so that a catch-up it
    stops half-way leaves the handle to recover first at its next write, as after any failed
    read of the log's end."""


class MarkView:
    """A reader's view of the mark: a read-only shared mapping of ``DIR/sync``, made on first
    use. Takes no lock (readers never do): a read is repeated until two agree. One thread."""

    def __init__(self, fs: FileSystem, root: str) -> None:
        self._fs = fs
        self._root = root
        self._view: mmap.mmap | None = None

    def read(self) -> tuple[int, int]:
        """The writers' mark; (0, 0) if there is none (or it kept changing under the reads)."""
        view = self._view
        if view is None:
            try:
                fd = self._fs.open(os.path.join(self._root, fmt.SYNC_NAME), os.O_RDONLY)
            except (FileNotFoundError, PermissionError):
                return (0, 0)
            try:
                if self._fs.size(fd) < fmt.SYNC_FILE_SIZE:
                    return (0, 0)
                view = self._view = mmap.mmap(fd, fmt.SYNC_FILE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                self._fs.close(fd)
        mark = fmt.read_sync_mark(view)
        for _ in range(100):  # bounded: a store of 24 bytes is over in nanoseconds
            again = fmt.read_sync_mark(view)
            if again == mark:
                return mark
            mark = again
        return (0, 0)

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None


# --- a writer handle -----------------------------------------------------------------------------------
class Syncer:
    """A writer handle's part in the sync protocol: its mapping of ``DIR/sync``, the sync role
    among its threads, and what it knows to be durable.

    One syncer at a time: one thread of this process (the role, ``take_role``) and one process
    of all (the file's exclusive flock, or a gate while it gathers). A syncer whose writes the
    mark already covers returns without an fsync: that is group commit across processes.
    Concurrency: any thread of the handle; the methods that change the mark or fsync are called
    with the role held (``take_role``/``leave_role``, or ``await_durable``'s lead).
    """

    def __init__(self, fs: FileSystem, root: str, record_size_max: int) -> None:
        self._fs = fs
        self._root = root
        self._size_max = record_size_max
        self._fd = -1
        self._map: mmap.mmap | None = None
        # When this handle last made the mark durable (time.monotonic(); 0.0: never).
        self._persisted_s = 0.0
        # The recent cost of one fsync, which bounds a gathering wait (here and in the write
        # queue of the handle's threads).
        self.fsync_cost_s = 0.0
        self._gather_watch: DirectoryWatch | None = None  # made by the first gathering syncer
        # The sync role among the handle's threads, and what they know is durable.
        self._cond = threading.Condition(threading.Lock())
        self._running = False
        self._waiters = 0
        self.synced_next = 0  # under _cond: every lsn below it is fsynced (this handle knows)
        self._refusing = 0  # the thread whose waits raise WouldWait (``refusing_waits``; 0: none)
        # The highest lsn known durable, by this handle's fsyncs or by the durable_lsn of the
        # records it adopted: put in every record header the handle writes (FORMAT.md §4.2).
        self.durable_lsn = 0

    def open(self) -> None:
        """Open (creating it if missing) and map the sync file; a file shorter than this
        release's is extended under the exclusive flock (only ever grown, never cut)."""
        fs = self._fs
        self._fd = fs.open(os.path.join(self._root, fmt.SYNC_NAME), os.O_RDWR | os.O_CREAT)
        if fs.size(self._fd) < fmt.SYNC_FILE_SIZE_TAIL:
            fs.lock_blocking(self._fd)
            try:
                if fs.size(self._fd) < fmt.SYNC_FILE_SIZE_TAIL:  # only ever grown, never cut
                    fs.truncate(self._fd, fmt.SYNC_FILE_SIZE_TAIL)
            finally:
                fs.unlock(self._fd)
        self._map = fs.map_shared(self._fd, fmt.SYNC_FILE_SIZE_TAIL)
        self._persisted_s = time.monotonic()

    def close(self) -> None:
        """Unmap and close (the role is not held: the handle is closing, its fsyncs are done)."""
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._gather_watch is not None:
            self._gather_watch.close()
            self._gather_watch = None
        if self._fd >= 0:
            self._fs.close(self._fd)
            self._fd = -1

    # --- a caller that must not wait ----------------------------------------------------------
    @contextlib.contextmanager
    def refusing_waits(self) -> Iterator[None]:
        """Within the block, on this thread, a wait for the role (another thread of the handle
        fsyncing) or for the sync file's flock (another process fsyncing) raises ``WouldWait``
        instead (a catch-up on a daemon's event loop: ``Log.exclusive(timeout_s=0)``)."""
        self._refusing = threading.get_ident()
        try:
            yield
        finally:
            self._refusing = 0

    def may_wait(self) -> None:
        """``WouldWait`` if this thread refuses waits (``refusing_waits``): before a step that
        may wait through calls that do not look (a recovery)."""
        if self._refusing == threading.get_ident():
            raise WouldWait(errno.EAGAIN, "a recovery would wait for the log's fsyncs")

    def _lock(self, shared: bool) -> None:
        """Take the sync file's flock, exclusive or shared; ``WouldWait`` if it is held and this
        thread refuses waits."""
        fs = self._fs
        if self._refusing != threading.get_ident():
            (fs.lock_shared if shared else fs.lock_blocking)(self._fd)
        elif not (fs.try_lock_shared(self._fd) if shared else fs.lock(self._fd, 0.0)):
            raise WouldWait(errno.EAGAIN, "another process is fsyncing the log")

    # --- the role among the handle's threads ----------------------------------------------------
    def take_role(self) -> None:
        with self._cond:
            self._wait_while_syncing()
            self._running = True

    def leave_role(self, synced_next: int) -> None:
        """Give up the role; ``synced_next``: every lsn below it is now known durable (0: none)."""
        with self._cond:
            self._running = False
            if synced_next > self.synced_next:
                self.synced_next = synced_next
            # Later records carry this: it proves to recovery that these were durable.
            if synced_next > self.durable_lsn:
                self.durable_lsn = synced_next
            if self._waiters:
                self._cond.notify_all()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Hold the role's condition with no fsync of this handle under way (to close the
        files a syncer would fsync)."""
        with self._cond:
            self._wait_while_syncing()
            yield

    def await_durable(
        self, end: int, failure: Callable[[], BaseException | None], wait: bool = True
    ) -> bool | None:
        """Wait until every lsn below ``end`` is known durable, or until no fsync of this handle
        is under way. False: durable. True: the caller now holds the role and leads an fsync
        (then ``leave_role``). ``failure()``: the handle's failure; FailedError once it is set
        (checked before each wait). ``wait=False``: None instead of a wait (another thread of
        the handle has the role)."""
        with self._cond:
            for _ in range(1 << 30):  # bounded: each wait ends with an fsync finishing
                err = failure()
                if err is not None:
                    raise FailedError(self._root, f"log handle failed: {err}")
                if self.synced_next >= end:
                    return False
                if not self._running:
                    self._running = True
                    return True
                if not wait:
                    return None
                self._wait_for_sync()
            raise AssertionError("an fsync never finished")

    def _wait_while_syncing(self) -> None:
        """Under ``_cond``: wait until this process has no syncer running."""
        for _ in range(1 << 30):  # bounded by the fsync in progress finishing
            if not self._running:
                return
            if self._refusing == threading.get_ident():
                raise WouldWait(errno.EAGAIN, "another thread is fsyncing the log")
            self._wait_for_sync()
        raise AssertionError("an fsync never finished")

    def _wait_for_sync(self) -> None:
        """Under ``_cond``: wait for the running syncer to finish (counted, so the syncer skips
        the notify when nobody waits: the single-writer path costs less)."""
        self._waiters += 1
        try:
            self._cond.wait()
        finally:
            self._waiters -= 1

    # --- the mark ---------------------------------------------------------------------------
    def proven_end(self, base: int) -> int:
        """The offset of segment ``base`` below which the mark proves every byte fsynced (read
        under the shared flock: never a torn mix of two marks)."""
        sync_map = self._map
        if sync_map is None:
            return 0
        # With the role: a flock belongs to the open file description the threads share, so
        # taking it shared here while this handle's syncer holds it exclusive (during its fsync)
        # would convert that lock, and the unlock below would drop it mid-fsync.
        self.take_role()
        try:
            self._lock(shared=True)
            try:
                mark = fmt.read_sync_mark(sync_map)
            finally:
                self._fs.unlock(self._fd)
        finally:
            self.leave_role(0)
        return proven_offset(mark, base)

    def mark_unlocked(self) -> tuple[int, int]:
        """The mark, read without the flock (within a boot the shared memory is exact; a torn
        read can only be lower or higher than both marks it mixes: for a rewrite of bytes that
        are already there, either is safe)."""
        assert self._map is not None  # a writer maps it on open
        return fmt.read_sync_mark(self._map)

    def lower(self, base: int, offset: int) -> None:
        """Before cutting segment ``base`` at ``offset`` (under the writer lock): the mark must
        not claim bytes written there later as durable. Takes the role."""
        self.take_role()
        try:
            self._lock(shared=False)
            try:
                sync_map = self._map
                assert sync_map is not None  # a writer maps it on open
                if fmt.read_sync_mark(sync_map) > (base, offset):
                    fmt.write_sync_mark(sync_map, base, offset)
            finally:
                self._fs.unlock(self._fd)
        finally:
            self.leave_role(0)

    def persist(self) -> None:
        """Make the mark durable (msync and fsync of DIR/sync), so that what it proves fsynced is
        known after a power loss too: damage below it is then reported, never cut (FORMAT.md
        §9). Done on a clean close, at each rotation, and by a syncer at most every
        limits.SYNC_MARK_PERSIST_S: never an extra fsync per append. Any copy of the mark that
        reaches the disk is safe: it is raised only after the fsync it claims."""
        sync_map = self._map
        if sync_map is None:
            return
        self._persisted_s = time.monotonic()
        self._fs.msync(sync_map)
        self._fs.fsync(self._fd)

    # --- the boot id and the tail hint ----------------------------------------------------------
    def boot(self) -> bytes:
        """The boot in which a writer last recovered the newest segment whole (b"": none)."""
        assert self._map is not None  # a writer maps it on open
        return fmt.read_sync_boot(self._map)

    def set_boot(self, boot: bytes) -> None:
        """After recovering the newest segment whole: remember the boot it was done in."""
        fs = self._fs
        sync_map = self._map
        assert sync_map is not None  # a writer maps it on open
        self.take_role()  # (as proven_end: never flock the shared description under a syncer)
        try:
            fs.lock_blocking(self._fd)
            try:
                if fmt.read_sync_mark(sync_map) == (0, 0):
                    fmt.write_sync_mark(sync_map, 0, 0)  # the magic: the boot is read only with it
                fmt.write_sync_boot(sync_map, boot)
            finally:
                fs.unlock(self._fd)
        finally:
            self.leave_role(0)

    def publish_tail(self, base: int, offset: int, lsn: int, end: int) -> None:
        """Under the writer lock, after a write: tell the next writer where our last record is
        (the tail hint, FORMAT.md §8.1), so its catch-up checks that record instead of parsing
        all we wrote. (A process killed before this leaves the hint behind the records: the next
        writer checks it, finds records after it, and parses those.)"""
        if self._map is not None:
            fmt.write_sync_tail(self._map, base, offset, lsn, end)

    def tail(self) -> fmt.TailHint | None:
        """Under the writer lock: the tail hint (None: the file is not mapped)."""
        if self._map is None:
            return None
        return fmt.read_sync_tail(self._map)

    def want_writer_lock(self) -> None:
        """Before waiting for the writer lock: ask a handle that keeps it between writes to give
        it back (the writer-wanted flag, FORMAT.md §8.1)."""
        if self._map is not None:
            fmt.set_sync_wanted(self._map, True)

    def writer_lock_wanted(self) -> bool:
        """Whether another writer waits for the writer lock (False: the file is not mapped)."""
        return self._map is not None and fmt.read_sync_wanted(self._map)

    def clear_writer_wanted(self) -> None:
        """Under the writer lock, before giving it back: the waiters are served."""
        if self._map is not None:
            fmt.set_sync_wanted(self._map, False)

    @property
    def mapped(self) -> bool:
        return self._map is not None

    def clear_tail(self) -> None:
        """Under the writer lock, before a cut: the hint may name a record cut there."""
        if self._map is not None:
            fmt.clear_sync_tail(self._map)

    # --- fsync across processes -------------------------------------------------------------------
    def sync_through(
        self, fd: int, base: int, end: int, lsn: int, *, single: bool, gather: bool, wait: bool = True
    ) -> bool:
        """With the role: make segment ``base`` (open as ``fd``) durable to offset ``end``
        (where the record of ``lsn`` goes), unless another process's fsync already did; and the
        mark durable if this handle has not made it so for limits.SYNC_MARK_PERSIST_S. False
        only with ``wait=False`` (``sync_segment_through``'s)."""
        if not self.sync_segment_through(fd, base, end, lsn, single=single, gather=gather, wait=wait):
            return False
        if time.monotonic() - self._persisted_s >= limits.SYNC_MARK_PERSIST_S:
            self.persist()
        return True

    def sync_segment_through(
        self, fd: int, base: int, end: int, lsn: int, *fds: int, single: bool, gather: bool, wait: bool = True
    ) -> bool:
        """With the role: make segment ``base`` (open as ``fd``) durable to offset ``end``
        (where the record of ``lsn`` goes), unless another process's fsync already did. ``fds``:
        more files to fsync with it. ``single``: this handle holds the writer lock for its life;
        ``gather``: its appends wait for their fsync (durability "always"), so it may gather.
        ``wait=False``: for a caller that must not wait for another process (a daemon's event
        loop): False, nothing done, if the sync flock or the gate is held by another process
        now (its fsync is under way: the caller hands this call to a thread that may wait).
        True: durable.

        The mark is read under a shared flock of DIR/sync and changed under the exclusive one,
        which the fsyncing process holds until its fsync is done. So the processes waiting for
        that fsync all wake together when it ends and see at once whether it covered them; only
        those it did not cover go on, one at a time, to the exclusive lock and an fsync of their
        own. Holding the lock across the fsync also orders it with ``lower``: a mark is never
        raised over bytes cut while the fsync ran.
        """
        fs = self._fs
        sync_map = self._map
        assert sync_map is not None  # a writer maps it on open; it is unmapped on close only
        if single:
            # Nobody else writes while this handle holds the writer flock for its life: no other
            # fsync can have covered these bytes, and the mark is raised to ``end``, this handle's
            # own last write, not to the size (so a cut can never be under it). The sync lock is
            # taken only to change the mark, for a writer handle opened before this one.
            # (Even with ``wait=False`` the flock is waited for: no other writer fsyncs under it,
            # so only a moment's reading of the mark, ``read_mark``, can hold it.)
            self._timed_fsync(fd)
            for other in fds:
                fs.fdatasync(other)  # (the index: appended to; fdatasync makes its size durable)
            fs.lock_blocking(self._fd)
            try:
                if fmt.read_sync_mark(sync_map) < (base, end):
                    fmt.write_sync_mark(sync_map, base, end)
            finally:
                fs.unlock(self._fd)
            return True
        for _ in range(1 << 30):  # bounded: each turn ends with another process's fsync done
            if wait:
                fs.lock_shared(self._fd)
            elif not fs.try_lock_shared(self._fd):
                return False
            try:
                if fmt.read_sync_mark(sync_map) >= (base, end):
                    return True
                gather_covered, gather_target, epoch = fmt.read_sync_gather(sync_map)
            finally:
                fs.unlock(self._fd)
            # The syncer's role is a gate (a lock on one of two bytes, by the parity of the
            # fsync's epoch), not the sync flock: the flock is held only to read or change the
            # mark (and through the fsync), so a writer never queues for it behind a syncer
            # that gathers. Those that find the gate of their epoch taken were written before
            # its syncer's fsync begins (it moves the epoch on first): they sleep on that gate,
            # which the next epoch's syncer does not take. With no target (a writer alone, or
            # batches), no gate: the flock alone orders the syncers, as it always did.
            gate = epoch & 1 if gather_target and gather else -1
            if gate < 0 or fs.try_gate(self._fd, gate):
                break
            if not wait:
                return False
            fs.lock_gate(self._fd, gate, fcntl.F_RDLCK)
            fs.lock_gate(self._fd, gate, fcntl.F_UNLCK)
        else:
            raise AssertionError("another process's fsync never finished")
        try:
            if lsn < gather_target and gate >= 0:
                self._gather_processes(fd, end, lsn, gather_target)
            if wait:
                fs.lock_blocking(self._fd)
            elif not fs.lock(self._fd, 0.0):
                return False
            try:
                mark = fmt.read_sync_mark(sync_map)
                if mark >= (base, end):
                    return True
                gather_covered, gather_target, epoch = fmt.read_sync_gather(sync_map)
                fmt.write_sync_gather(sync_map, gather_covered, gather_target, epoch + 1)
                # Everything written by anyone up to now is covered: the records others wrote
                # after ours too, found whole in the file before the fsync starts (not the
                # file's size, which counts the preallocated zeros).
                covered, covered_lsn = self._records_end(fd, end, lsn)
                self._timed_fsync(fd)
                for other in fds:
                    fs.fdatasync(other)
                if mark < (base, covered):
                    fmt.write_sync_mark(sync_map, base, covered)
                # The hint for the next syncer: the writers of the records this fsync covered
                # append again; it waits for as many records after those written meanwhile.
                # Only if others write too (the fsync covered more than one record, or some
                # were written during it), and the fsync is slow enough to pay for a wait.
                count = covered_lsn - gather_covered
                target = 0
                if 0 < count <= limits.GATHER_RECORDS_MAX and self.fsync_cost_s >= limits.GATHER_FSYNC_S_MIN:
                    written = self._records_end(fd, covered, covered_lsn)[1]
                    if count > 1 or written > covered_lsn:
                        target = written + count
                fmt.write_sync_gather(sync_map, covered_lsn, target, epoch + 1)
            finally:
                fs.unlock(self._fd)
        finally:
            if gate >= 0:
                fs.lock_gate(self._fd, gate, fcntl.F_UNLCK)
        return True

    def _timed_fsync(self, fd: int) -> None:
        """fsync the segment's data (``fdatasync``), keeping the recent cost of one, which bounds
        a gathering wait. fdatasync, not fsync: a record is written in place, into preallocated
        zeros, so the file's size and blocks do not change and only its times would be journaled
        with it (a second write a flush, for nothing recovery reads); a write past the
        preallocation does change the size, which fdatasync makes durable with the data, as it
        does the extents written for the first time (Redis's ``appendfsync always`` is an
        fdatasync too). Measured: 8% less server CPU a durable SET (benchmarks/RESULTS.md)."""
        start = time.perf_counter()
        self._fs.fdatasync(fd)
        self.fsync_cost_s = 0.75 * self.fsync_cost_s + 0.25 * (time.perf_counter() - start)

    def _gather_processes(self, fd: int, end: int, lsn: int, target: int) -> None:
        """The syncer, before it takes the sync flock and fsyncs: wait until the records below
        ``target`` are written (the writers the last fsync covered, appending again), for at
        most the recent cost of an fsync (2 ms cap), looking again after each write (the watch
        polls in short steps, then, for a handle that has gathered long, is woken by inotify:
        docs/DESIGN.md, "gathering across processes")."""
        wait = min(self.fsync_cost_s, limits.GATHER_WAIT_S_MAX)
        if wait <= 0.0 or target - lsn > limits.GATHER_RECORDS_MAX:
            return
        watch = self._gather_watch
        if watch is None:
            watch = self._gather_watch = DirectoryWatch(self._root)
        watch.reset_backoff()
        deadline = time.perf_counter() + wait
        for _ in range(limits.GATHER_RECORDS_MAX + 1):  # each turn sees a write, or times out
            watch.drain()
            if self._records_end(fd, end, lsn)[1] >= target:
                return
            left = deadline - time.perf_counter()
            if left <= 0.0:
                return
            watch.wait(left)

    def _records_end(self, fd: int, end: int, lsn: int) -> tuple[int, int]:
        """The end of the whole, valid records that follow offset ``end`` of segment ``fd`` (the
        record of ``lsn`` first), within one chunk, and the lsn after them; (``end``, ``lsn``) if
        there are none. A record counted here is wholly in the file now: an fsync started after
        this covers it."""
        if self._fs.pread(fd, fmt.RECORD_HEADER_SIZE, end) == _ZERO_HEADER:
            return end, lsn  # the common case: nothing after ours
        data = self._fs.pread(fd, _SYNC_LOOKAHEAD, end)
        stop = seg.parse(data, 0, lsn, self._size_max, None, None, end)
        return stop.pos, stop.lsn
