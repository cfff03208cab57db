"""The active segment: the file appends go to, its index, this handle's view of where the
records end, and the writer lock that guards them (FORMAT.md §5, §7, §8).

Longer than 600 lines on purpose: the state below and every operation that changes it under the
writer lock (writes, preallocation, rotation, cuts, holds) keep one set of invariants; split,
each part would change fields whose invariants the other states.

State, all under the writer lock (``lock``, the thread lock, with the flock of ``DIR/lock``,
which a single writer holds for the handle's life, and any writer may hold between its writes
while nobody else asks for it: a *hold*, below):

- ``fd``, ``idx_fd``: the active segment and its index, open; ``base``: its base lsn.
- ``end``: where its records end, as this handle last saw them (a record boundary);
  ``alloc_end``: the file is at least this long (zeros past ``end``, preallocated).
- ``next_lsn``: the lsn the next record gets; ``last_ts``: the last record's timestamp.
- ``index_due``: the offset from which the next record is due an index entry; ``index_ok``:
  False once writing the index failed (derived data: lookups scan; the next open rebuilds it).
- ``deadline_ns``: when the segment is due for rotation by age (per handle).
- ``written``: what the next fsync must cover, (fd, next lsn, base, end): replaced whole, and
  read by the syncer without the writer lock.
- ``needs_recovery``: a failure left this view unsure: recover before the next write.
- ``rotated``: a rotation happened; the facade applies retention once the locks are released.

- ``held``: this handle keeps the flock between writes (a hold); ``writes`` counts the writes
  made during it (the hold's thread tells idleness by it).

Who writes them: this module (writing, rotating, cutting) and ``_recovery`` (what an open
finds, and what other processes appended since this handle last wrote), both under the lock.

Invariants:

- Past ``end`` the segment holds zeros (preallocated) or records other processes appended
  since this handle last looked; a writer adopts those (``catch_up``) before it writes.
- A write lands at ``end`` with one pwrite. A failed or short one is cut back to ``end`` (the
  sync mark lowered before and after the truncate), or, if even that fails, the handle stops
  (FailedError): nothing partial stays visible.
- A batch (``whole``) is written into one segment with one pwrite: in the log whole or not at
  all (after a failed write; a reader may see a prefix while it is copied). A batch written by
  ``write_batch`` is published at once: its first record's CRC, complemented until the rest is
  written and fsynced, is the one write that makes it readable (FORMAT.md §7.1).
  Timestamps never decrease; the records after a seal are not stamped before it.
- Holds: the flock is kept after a write only if it was free when taken (nobody waited), this
  handle wrote within limits.WRITER_HOLD_BURST_S before, and the writer-wanted flag of
  ``DIR/sync`` is clear. While held, nobody else writes the log, so a write skips the flock and
  the check of the segment's end. It is given back (the flag cleared first) after any write that
  finds the flag set, by the hold's thread when the flag is set, after limits.WRITER_HOLD_IDLE_S
  without a write or limits.WRITER_HOLD_MAX_S in all, after any failed write, and on close. A
  writer that finds the flock taken sets the flag before it waits, and again each time it looks
  (the holder clears it when it gives the lock back). After a hold given back because a writer
  asked (or because it was old), none starts for limits.WRITER_HOLD_MAX_S: a waiter that looks
  from time to time must find the lock free between two writes. A forked child closes its copy.
- Index entries are written after the records they name, at the first record at or past each
  multiple of the index interval (§5.2).
- Rotation: cut the preallocated zeros, write the seal, fsync the segment and its index
  (whatever the durability: every segment before the sync mark's is durable), create the next
  segment with its header and preallocation, fsync it, create its index, fsync the directory.
  A sealed segment ends with its seal.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Protocol, cast

from .. import _format as fmt
from .. import _segment as seg
from .. import limits
from .._fs import FileSystem
from ..errors import AppendError, CorruptionError, FailedError, LockedError, ReadOnlyError
from ._directory import index_path, segment_path
from ._handle import HandleState
from ._sync import Syncer

_NEVER_NS = 1 << 63
_ZEROS = bytes(limits.ZERO_AHEAD_SIZE)
_ZERO_AHEAD_LOW = limits.ZERO_AHEAD_SIZE // 2  # (zero more once less than this is left ahead)
_RECORD_RESIDUE = 0x2144DF1C  # the CRC-32 of a whole record, trailer included (FORMAT.md §4.2)
_HOLD_BURST_NS = int(limits.WRITER_HOLD_BURST_S * 1e9)
_HOLD_MAX_NS = int(limits.WRITER_HOLD_MAX_S * 1e9)


def _nothing() -> None:
    """The catch-up before the wiring sets the real one."""


class BatchStart(NamedTuple):
    """Where a batch framed by its caller starts (``ActiveSegment.write_framed``): its first
    lsn, the records' timestamp and durable mark, the offset of its first record, where the next
    index entry is due and the index interval (FORMAT.md §5.2)."""

    lsn: int
    timestamp: int
    durable_lsn: int
    offset: int
    index_due: int
    index_interval: int


class Framed(Protocol):
    """Records framed by a batch's caller, back to back (``data``, ``count`` of them, the last
    ``last_size`` bytes long), with the index entries they owe, encoded (``index``), and where
    the next entry is due after them (``due``)."""

    @property
    def data(self) -> bytes | memoryview: ...
    @property
    def count(self) -> int: ...
    @property
    def last_size(self) -> int: ...
    @property
    def index(self) -> bytes: ...
    @property
    def due(self) -> int: ...


def _check_framed(data: memoryview, count: int, last_size: int, lsn: int, ts: int) -> None:
    """A block of framed records, checked at its ends before it is written: its first record at
    0 and its last at ``len(data) - last_size`` are whole, carry lsns ``lsn`` and ``lsn + count
    - 1`` and timestamp ``ts``, and their CRCs are right (the CRC of a whole record, trailer
    included, is the residue of §4.2). A framer that fails this is our bug."""
    last = len(data) - last_size
    for at, expected in ((0, lsn), (last, lsn + count - 1)):
        assert at >= 0 and at + fmt.RECORD_OVERHEAD <= len(data), (at, len(data))
        length, _flags, got_lsn, got_ts, _durable = fmt.RECORD_HEADER.unpack_from(data, at)
        end = at + fmt.RECORD_OVERHEAD + length
        assert end <= len(data) and (at != last or end == len(data)), (at, length, len(data))
        assert (got_lsn, got_ts) == (expected, ts), (got_lsn, expected, got_ts, ts)
        assert fmt.crc32(data[at:end]) == _RECORD_RESIDUE, (at, got_lsn)


class ActiveSegment:
    """The active segment of one handle and the writer lock. The methods that write or change
    the state are called under the writer lock (``locked``); ``written`` may be read by any
    thread."""

    __slots__ = (
        "_age_max_ns",
        "_fs",
        "_gather",
        "_handle",
        "_hold_paused_until_ns",
        "_hold_started_ns",
        "_hold_thread",
        "_last_write_ns",
        "_root",
        "_syncer",
        "alloc_end",
        "base",
        "catch_up",
        "deadline_ns",
        "end",
        "fd",
        "held",
        "idx_fd",
        "index_due",
        "index_interval",
        "index_ok",
        "last_ts",
        "lock",
        "lock_fd",
        "needs_recovery",
        "next_lsn",
        "plain_end_max",
        "rotated",
        "segment_size_max",
        "single",
        "size_max",
        "version",
        "writes",
        "written",
        "zeroed_end",
    )

    def __init__(
        self,
        fs: FileSystem,
        meta: fmt.Meta,
        syncer: Syncer,
        handle: HandleState,
        *,
        gather: bool,
        segment_age_max_ns: int | None,
    ) -> None:
        self._fs = fs
        self._root = handle.path
        self._syncer = syncer
        self._handle = handle
        self._gather = gather  # appends wait for their fsync ("always"): a syncer may gather
        self.size_max = meta.record_size_max
        self.index_interval = meta.index_interval
        self.segment_size_max = meta.segment_size_max
        # New segments carry the lowest format version that holds what is written in them.
        self.version = fmt.VERSION_1 if meta.compression is None else fmt.VERSION_2
        # A record of payload size n starting at offset o fits without rotation if o + n is at
        # most this (room is kept for the seal record; see write_records).
        self.plain_end_max = meta.segment_size_max - 2 * fmt.RECORD_OVERHEAD
        # Rotation by age (optional, per handle): a segment holding records is sealed by the first
        # append from this handle after it is this old (BinLog's daily cut, without a cron job).
        self._age_max_ns = segment_age_max_ns
        self.deadline_ns = _NEVER_NS
        self.lock = threading.Lock()
        self.lock_fd = -1
        self.single = False  # True while the flock is held for the handle's life
        self.held = False  # True while the flock is kept between writes (a hold)
        self.writes = 0
        self._hold_started_ns = 0
        self._hold_paused_until_ns = 0  # no hold before this: a writer asked (see end_hold)
        self._hold_thread: threading.Thread | None = None
        self._last_write_ns = 0
        self.fd = -1
        self.idx_fd = -1
        self.base = 0
        self.end = 0
        self.alloc_end = 0
        # Zeros written over the preallocated space up to here, past ``end`` (``_zero_ahead``;
        # only by a handle whose appends wait for their fsync); 0 in a new segment.
        self.zeroed_end = 0
        self.next_lsn = 0
        self.last_ts = 0
        self.index_due = 0
        self.index_ok = True
        self.written = (-1, 0, 0, 0)
        self.needs_recovery = False
        self.rotated = False
        # The catch-up (``_recovery.Recovery.catch_up``), for a rotation that finds the next
        # segment made already by a peer killed mid-creation.
        self.catch_up: Callable[[], None] = _nothing

    # --- the writer lock ----------------------------------------------------------------------
    def open_lock_file(self) -> None:
        lock_path = os.path.join(self._root, fmt.LOCK_NAME)
        try:
            self.lock_fd = self._fs.open(lock_path, os.O_RDWR | os.O_CREAT)
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise ReadOnlyError(
                self._root, f"cannot open {lock_path} for writing ({err}); open with readonly=True"
            ) from err

    def hold_for_life(self, timeout_s: float) -> None:
        """Take the flock for the handle's life (``single_writer``), or raise LockedError. (A
        holder is asked to give it back, as for a write: ``take_flock``.)"""
        self.take_flock(timeout_s)
        self.single = True

    def release_for_life(self) -> None:
        """Give back a lifetime flock (an open that failed after taking it)."""
        self.single = False
        self._fs.unlock(self.lock_fd)

    def close_lock(self) -> None:
        """On close: release a lifetime flock (explicitly: a forked child may share the fd) and
        close the lock file."""
        self.end_hold()
        if self.single and self.lock_fd >= 0:
            self.single = False
            self._fs.unlock(self.lock_fd)
        if self.lock_fd >= 0:
            self._fs.close(self.lock_fd)
        self.lock_fd = -1

    def forget_lock_in_child(self) -> None:
        """In a forked child: the copy of a single writer's (or a hold's) lock fd shares the
        parent's flock: closed (not unlocked), so that the lock ends with the parent, not with
        the last child. (The hold's thread is not in the child.)"""
        self._hold_thread = None
        if (self.single or self.held) and self.lock_fd >= 0:
            fd, self.lock_fd, self.single, self.held = self.lock_fd, -1, False, False
            os.close(fd)

    def locked(self, timeout_s: float | None, idle: Callable[[], bool] | None = None) -> _Locked:
        """``with a.locked(...)``: hold the thread lock and the process flock; the caller catches
        up inside. ``idle``: as ``FileSystem.lock``. ``timeout_s=0``: no wait at all, for the
        thread lock either (LockedError if another thread holds it: an event loop takes a log's
        lock so)."""
        return _Locked(self, timeout_s, idle)

    # --- holds: the flock kept between writes ----------------------------------------------------
    def take_flock(self, timeout_s: float | None = None, idle: Callable[[], bool] | None = None) -> bool:
        """Under ``lock``, not held: take the flock of ``DIR/lock``. True if it was taken by
        another writer first (this one asked for it and waited). LockedError after ``timeout_s``."""
        fs = self._fs
        if fs.lock(self.lock_fd, 0):
            return False
        want = self._syncer.want_writer_lock
        want()
        if timeout_s is None:
            fs.lock_blocking(self.lock_fd)
            return True

        def asking() -> bool:  # each look at the lock asks again (a holder clears the flag)
            want()
            return idle() if idle is not None else False

        if not fs.lock(self.lock_fd, timeout_s, asking):
            raise LockedError(self._root, timeout_s)
        return True

    def after_write(self, waited: bool) -> None:
        """Under ``lock``, after a write for which the flock was taken (``take_flock``): keep it
        (start a hold) if this handle writes in a burst and nobody asked for it; else give it
        back. Only where appends do not wait for an fsync ("os", "interval"): next to an fsync a
        flock costs nothing, and a hold would make a peer's group commit wait."""
        now = time.monotonic_ns()
        last, self._last_write_ns = self._last_write_ns, now
        syncer = self._syncer
        if (
            waited
            or self._gather
            or now - last > _HOLD_BURST_NS
            or now < self._hold_paused_until_ns
            or not syncer.mapped
            or syncer.writer_lock_wanted()
        ):
            if not waited and syncer.writer_lock_wanted():
                syncer.clear_writer_wanted()  # stale, or its waiter gets the lock now
                self._hold_paused_until_ns = now + _HOLD_MAX_NS
            self._fs.unlock(self.lock_fd)
            return
        self.held = True
        self._hold_started_ns = now
        if self._hold_thread is None:
            self._hold_thread = threading.Thread(target=self._watch_hold, name="logspool-hold", daemon=True)
            self._hold_thread.start()

    def end_hold(self, *, pause: bool = False) -> None:
        """Under ``lock``: give back a held flock (the writer-wanted flag cleared first: whoever
        set it is waiting, and gets the lock now). ``pause``: another writer asked, or may wait
        without asking (the hold was old): no hold for limits.WRITER_HOLD_MAX_S, so that this
        handle takes and gives back the flock on each write and the waiter, which looks at the
        lock from time to time, finds it free (a holder that took it again at once, between two
        of its looks, would keep it from it for good)."""
        if self.held:
            self.held = False
            self._last_write_ns = 0  # the next write takes the flock and gives it back
            if pause:
                self._hold_paused_until_ns = time.monotonic_ns() + _HOLD_MAX_NS
            self._syncer.clear_writer_wanted()
            self._fs.unlock(self.lock_fd)

    def _watch_hold(self) -> None:
        """The hold's thread: gives the flock back when another writer asks for it, when this
        handle stops writing, or when the hold is old; ends when the hold does. It looks without
        the lock (taking it only to end the hold), so the writes it watches do not wait for it."""
        seen = -1
        for _ in range(1 << 40):  # bounded: a hold ends within limits.WRITER_HOLD_MAX_S
            time.sleep(limits.WRITER_HOLD_IDLE_S)
            writes = self.writes
            old = time.monotonic_ns() - self._hold_started_ns > _HOLD_MAX_NS
            if self.held and writes != seen and not old and not self._syncer.writer_lock_wanted():
                seen = writes
                continue
            with self.lock:
                asked = self._syncer.writer_lock_wanted()
                if self.held and self.writes != seen and not old and not asked:
                    seen = self.writes  # (it changed since: still busy)
                    continue
                self._hold_thread = None
                try:
                    self.end_hold(pause=asked or old)
                except BaseException:
                    self.held = False
                return
        raise AssertionError("unreachable")  # pragma: no cover

    # --- segments -----------------------------------------------------------------------------
    def create_segment(self, base: int, created_ns: int) -> bool:
        """Create segment ``base`` with its header and empty index. Under the writer lock. False
        if it exists already."""
        path = segment_path(self._root, base)
        try:
            fd = self._fs.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        except FileExistsError:
            return False  # left by a crash mid-creation; recovery rewrites a missing header
        try:
            self._fs.write(fd, fmt.encode_segment_header(base, created_ns, self.version))
            self._preallocate(fd, fmt.SEGMENT_HEADER_SIZE, fmt.SEGMENT_HEADER_SIZE)
            # Always fsynced, whatever the durability: other handles of the log may be "always"
            # and rely on every segment before theirs being durable (the sync mark). (The new
            # size, zeros included, is made durable by the same fsync.)
            self._created_sync(lambda: self._fs.fsync(fd))  # crash before: no header, rewritten on open
        finally:
            self._fs.close(fd)
        idx = self._fs.open(index_path(self._root, base), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        try:
            self._fs.write(idx, fmt.encode_index_header(base, self.index_interval))
        finally:
            self._fs.close(idx)
        self._created_sync(lambda: self._fs.fsync_dir(self._root))  # else the new name can be lost
        return True

    def _created_sync(self, sync: Callable[[], None]) -> None:
        """An fsync of a segment's creation; if it fails, the handle fails for good, as for any
        fsync (fsyncgate): the segment exists, and a retry would find it (``create_segment``
        answers False) and append into it, acknowledging records whose segment's name may never
        reach the disk (a failed directory fsync, then a power cut: acknowledged records lost,
        found by tests/crash/test_fsync_failure.py)."""
        try:
            sync()
        except OSError as err:
            self._handle.fail(err)
            raise FailedError(self._root, f"fsync failed while creating a segment: {err}") from err

    def set_deadline(self, created_ns: int) -> None:
        age = self._age_max_ns
        self.deadline_ns = _NEVER_NS if age is None else created_ns + age

    def switch_to(self, base: int) -> None:
        """Make segment ``base`` the active one (its header already written)."""
        self.close_fds()
        self.fd = self._fs.open(segment_path(self._root, base), os.O_RDWR)
        self.base = base
        self.end = fmt.SEGMENT_HEADER_SIZE
        self.alloc_end = self._fs.size(self.fd)
        self.zeroed_end = 0
        self.index_due = 0
        self.open_index()

    def close_fds(self) -> None:
        """Close the active segment's fds once no fsync of them is under way."""
        with self._syncer.quiet():
            for fd in (self.fd, self.idx_fd):
                if fd >= 0:
                    self._fs.close(fd)
            self.fd = self.idx_fd = -1
            # Every caller has made the segment durable first (rotation, recovery, close): a
            # syncer that finds no fd has nothing left to fsync.
            self.written = (-1, *self.written[1:])

    # --- the index ------------------------------------------------------------------------------
    def open_index(self) -> None:
        """Under the writer lock: open the active segment's index, checking its header first.

        A writer never appends to an index whose header it has not checked: a peer killed
        between creating the index file and writing its header (or before creating it at all)
        leaves an empty or missing file, and entries appended to it would start at offset 0.
        The index is derived data, so such a file is started again from its header; whoever
        switched to the segment then writes the entries its records imply (recovery and the
        catch-up across a seal both do: ``rewrite_index_if_needed``)."""
        fs = self._fs
        path = index_path(self._root, self.base)
        fd = fs.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        self.idx_fd = fd
        self.index_ok = True
        try:
            ibase, interval = fmt.decode_index_header(fs.pread(fd, fmt.INDEX_HEADER_SIZE, 0), path)
            if ibase == self.base and interval == self.index_interval:
                return
        except CorruptionError:
            pass  # (an UnsupportedVersionError, a newer writer's index, is left to propagate)
        try:
            fs.truncate(fd, 0)  # derived data: a crash here leaves it empty, checked again here
            fs.write(fd, fmt.encode_index_header(self.base, self.index_interval))
        except OSError:
            self.index_ok = False  # lookups scan; the next writer to open it tries again

    def rewrite_index_if_needed(self, due: list[seg.RecordInfo], index_pos: int = 0) -> bool:
        """Make the active segment's index exactly what its records imply (after recovery):
        ``due``, the records due an entry from a scan, have theirs from ``index_pos`` in the
        index file on (0: the header first, and ``due`` holds every entry). True if it had to
        be rewritten there."""
        entries = b"".join(fmt.encode_index_entry(i.lsn, i.timestamp, i.offset) for i in due)
        if index_pos == 0:
            entries = fmt.encode_index_header(self.base, self.index_interval) + entries
        current = self._fs.pread(self.idx_fd, len(entries) + 1, index_pos)
        if current != entries:
            # The index is derived: no fsync needed, a crash here is repaired the same way.
            self._fs.truncate(self.idx_fd, index_pos)
            self._fs.write(self.idx_fd, entries)
            return True
        return False

    # --- writing ------------------------------------------------------------------------------
    def write_records(
        self,
        payloads: tuple[bytes, ...] | list[bytes],
        flags: tuple[int, ...] | list[int] | None = None,
        timestamp: int | None = None,
        *,
        whole: bool = True,
    ) -> int:
        """Under the writer lock: frame, rotate when full, write. Returns the first lsn.
        ``flags`` are the records' flags (FLAG_ZSTD for a compressed payload), or None for 0;
        ``timestamp``: the records' timestamp, chosen by the caller (not below the last one).
        ``whole``: the records are one batch, written into one segment with one write (in the
        log whole or not at all); else separate appends (the write queue's), which fill each
        segment and go on in the next."""
        if flags is None:
            flags = [0] * len(payloads)
        encode = fmt.encode_record
        count = len(payloads)
        size = sum(map(len, payloads)) + count * fmt.RECORD_OVERHEAD
        if whole and size > limits.SEGMENT_SIZE_LIMIT - fmt.SEGMENT_HEADER_SIZE - fmt.RECORD_OVERHEAD:
            raise ValueError(
                f"a batch of {count} records takes {size} bytes, more than a segment may hold "
                f"({limits.SEGMENT_SIZE_LIMIT}): append it in smaller batches"
            )
        # Room is kept for the seal record, so a sealed segment is at most segment_size_max bytes
        # (unless a single record, or a batch, is larger than that: it then has a segment of its
        # own).
        size_max = self.segment_size_max - fmt.RECORD_OVERHEAD
        interval = self.index_interval
        ts = self._stamp(timestamp)
        durable = self._syncer.durable_lsn
        # A batch is written whole into one segment, with one pwrite, so that it is in the log
        # whole or not at all (a failed write is cut back): if it does not fit in the active
        # segment, that one is sealed first, and a batch larger than a segment gets a segment
        # of its own, larger than segment_size_max, as a single larger record does.
        if whole and self.end + size > size_max and self.end > fmt.SEGMENT_HEADER_SIZE:
            self.rotate(ts)
        first = self.next_lsn
        i = 0
        while i < count:  # bounded: each turn writes at least one record
            lsn = self.next_lsn
            offset = self.end
            chunk: list[bytes] = []
            index: list[bytes] = []
            due = self.index_due
            while i < count:
                rec = encode(lsn, ts, durable, payloads[i], flags[i])
                if not whole and offset + len(rec) > size_max and offset > fmt.SEGMENT_HEADER_SIZE:
                    break  # (separate appends of the write queue: each is whole on its own)
                if offset >= due:
                    index.append(fmt.encode_index_entry(lsn, ts, offset))
                    due = (offset // interval + 1) * interval
                chunk.append(rec)
                offset += len(rec)
                lsn += 1
                i += 1
            if chunk:
                self._write_chunk(
                    b"".join(chunk) if len(chunk) > 1 else chunk[0], offset, lsn, len(chunk[-1])
                )
                self.index_due = due
                if index:
                    self._write_index_entry_bytes(b"".join(index))
                self.last_ts = ts
            if i < count:
                self.rotate(ts)
        return first

    def write_batch(
        self,
        chunks: Iterable[Sequence[bytes]],
        size: int,
        prepare: Callable[[Sequence[bytes]], tuple[list[bytes], list[int] | None]],
        timestamp: int | None = None,
    ) -> int:
        """Under the writer lock: append the records of ``chunks`` as one batch that readers see
        at once or not at all, and that a crash leaves whole or absent (FORMAT.md §7.1). Returns
        the first lsn. ``size``: at most how many bytes the framed records take (ValueError,
        and nothing appended, if they take more); ``prepare``: a chunk's payloads checked (and
        compressed) with their flags; ``timestamp``: as ``write_records``.

        The first record is written with its CRC complemented (readers stop there: a record
        whose CRC fails at the end of the newest segment is one being written, §9.2), then the
        rest of the batch in as many writes as the chunks make, then the segment is fsynced,
        then the right CRC is written: 4 bytes that make the whole batch readable at once. The
        index entries and the tail hint follow (a reader at "latest" starts at the last entry;
        a catch-up trusts the hint), so neither names a record before it is published."""
        if size > limits.SEGMENT_SIZE_LIMIT - fmt.SEGMENT_HEADER_SIZE - fmt.RECORD_OVERHEAD:
            raise ValueError(
                f"a batch of {size} bytes is more than a segment may hold ({limits.SEGMENT_SIZE_LIMIT}): "
                "append it in smaller batches"
            )
        ts = self._stamp(timestamp)
        # One segment holds the whole batch (as write_records(whole=True)): sealed first if the
        # batch does not fit; a batch larger than a segment gets a larger segment of its own.
        if (
            self.end + size > self.segment_size_max - fmt.RECORD_OVERHEAD
            and self.end > fmt.SEGMENT_HEADER_SIZE
        ):
            self.rotate(ts)
        start = self.end
        first = lsn = self.next_lsn
        durable = self._syncer.durable_lsn
        interval = self.index_interval
        due = self.index_due
        index: list[bytes] = []
        limit = start + size
        if limit > self.alloc_end:
            self.alloc_end = self._preallocate(self.fd, start, limit)
        fs, fd = self._fs, self.fd
        pack_header, pack_crc, crc32 = fmt.RECORD_HEADER.pack, fmt.RECORD_TRAILER.pack, fmt.crc32
        overhead = fmt.RECORD_OVERHEAD
        offset = start
        head_crc_at = -1
        head_crc = b""
        last_size = 0
        # Until ``end`` and ``next_lsn`` describe the published batch, this view is unsure: an
        # exception of any kind between here and there (a KeyboardInterrupt in the fsync, say)
        # makes the next write recover the segment's end first, which cuts an unpublished batch
        # or adopts a published one; never a write over the batch's first record.
        self.needs_recovery = True
        try:
            for chunk in chunks:  # bounded by the caller's chunks; each write by ``limit``
                items, flags = prepare(chunk)
                if not items:
                    continue
                if head_crc_at < 0:
                    rec = fmt.encode_record(lsn, ts, durable, items[0], flags[0] if flags else 0)
                    if offset + len(rec) > limit:
                        raise ValueError(f"the batch takes more than the {size} bytes announced")
                    if offset >= due:
                        index.append(fmt.encode_index_entry(lsn, ts, offset))
                        due = (offset // interval + 1) * interval
                    head_crc_at, head_crc = offset + len(rec) - 4, rec[-4:]
                    pending = rec[:-4] + bytes(b ^ 0xFF for b in head_crc)
                    # Alone, first: a crash during the rest leaves this whole record with a
                    # complemented CRC, which the next writer cuts with all that follows (§9);
                    # a crash during this write leaves a torn tail and nothing after it.
                    fs.pwrite(fd, pending, offset)
                    offset += len(rec)
                    last_size = len(rec)
                    lsn += 1
                    items = items[1:]
                    flags = flags[1:] if flags else None
                # The records of the chunk, framed into one buffer (``fmt.encode_record``
                # written out: the CRC of the header carried on over the payload, no
                # concatenation per record; about 0.5 us a record against 0.75).
                buf = bytearray()
                at = offset
                for payload, flag in zip(items, flags or itertools.repeat(0), strict=False):  # (items)
                    if at >= due:
                        index.append(fmt.encode_index_entry(lsn, ts, at))
                        due = (at // interval + 1) * interval
                    n = len(payload)
                    header = pack_header(n, flag, lsn, ts, durable)
                    buf += header
                    buf += payload
                    buf += pack_crc(crc32(payload, crc32(header)))
                    at += overhead + n
                    lsn += 1
                if buf:
                    last_size = len(items[-1]) + overhead
                    if offset + len(buf) > limit:
                        raise ValueError(f"the batch takes more than the {size} bytes announced")
                    fs.pwrite(fd, bytes(buf), offset)  # crash: an unpublished batch, cut on recovery
                    offset += len(buf)
        except OSError as err:
            raise self.undo_write(err, "writing a batch") from err
        except BaseException:
            try:
                self.cut(start)  # nothing of the batch stays (it was never readable)
            except OSError as err2:
                self._handle.fail(err2)  # (the next writer's recovery cuts it)
            raise
        if lsn == first:
            self.needs_recovery = False  # (nothing was written)
            return first
        self._publish_batch(head_crc, head_crc_at, offset, lsn, ts, due, b"".join(index), last_size)
        return first

    def _publish_batch(
        self,
        head_crc: bytes,
        head_crc_at: int,
        end: int,
        next_lsn: int,
        ts: int,
        due: int,
        index: bytes,
        last_size: int,
    ) -> None:
        """Steps 4-6 of FORMAT.md §7.1, once a batch's records are written up to ``end`` (its
        first record's CRC, ``head_crc``, complemented at ``head_crc_at``): fsync, publish,
        then this view, the index entries and the tail hint."""
        fs, fd = self._fs, self.fd
        try:
            # The batch durable before the 4 bytes that publish it: after a power loss the
            # batch is whole (the CRC reached the disk, and the rest was there before it) or
            # unpublished (cut by the next writer). Not through the syncer: the sync mark must
            # not pass the unpublished head.
            fs.fsync(fd)
        except OSError as err:
            # As a failed group commit: pages of this segment may be lost (fsyncgate), so the
            # handle stops; the unpublished batch is cut by the next writer's recovery.
            self._handle.fail(err)
            raise FailedError(self._root, f"fsync failed while writing a batch: {err}") from err
        try:
            fs.pwrite(fd, head_crc, head_crc_at)  # published: every reader sees the whole batch
        except OSError as err:
            raise self.undo_write(err, "publishing a batch") from err
        self.end = end
        self.next_lsn = next_lsn
        self.last_ts = ts
        self.index_due = due
        self.needs_recovery = False
        self.mark_written()
        if index:
            self._write_index_entry_bytes(index)
        if not self.single:
            self._syncer.publish_tail(self.base, end - last_size, next_lsn - 1, end)

    def write_framed(
        self, size: int, frame: Callable[[BatchStart], Iterable[Framed]], timestamp: int | None = None
    ) -> int:
        """Under the writer lock: as ``write_batch``, for records the caller frames itself
        (``frame``, given where the batch starts, yields them a block at a time, each with the
        index entries it owes): the same checks, rotation, writes and publish (FORMAT.md §7.1),
        and the same bytes when the caller frames as ``fmt.encode_record`` does. ``size``: at
        most how many bytes the framed records take, as for ``write_batch`` (ValueError, and
        nothing appended, if they take more).
        Each block's first and last records are checked (whole, CRC right, lsns in order)
        before they are written: a wrong framer is our bug, never written to the log."""
        if size > limits.SEGMENT_SIZE_LIMIT - fmt.SEGMENT_HEADER_SIZE - fmt.RECORD_OVERHEAD:
            raise ValueError(
                f"a batch of {size} bytes is more than a segment may hold ({limits.SEGMENT_SIZE_LIMIT}): "
                "append it in smaller batches"
            )
        ts = self._stamp(timestamp)
        if (
            self.end + size > self.segment_size_max - fmt.RECORD_OVERHEAD
            and self.end > fmt.SEGMENT_HEADER_SIZE
        ):
            self.rotate(ts)  # one segment holds the whole batch (as write_batch)
        start = self.end
        first = lsn = self.next_lsn
        limit = start + size
        if limit > self.alloc_end:
            self.alloc_end = self._preallocate(self.fd, start, limit)
        fs, fd = self._fs, self.fd
        offset = start
        head_crc_at = -1
        head_crc = b""
        last_size = 0
        due = self.index_due
        index: list[bytes] = []
        blocks = frame(BatchStart(first, ts, self._syncer.durable_lsn, start, due, self.index_interval))
        self.needs_recovery = True  # (as in write_batch: unsure until the batch is published)
        try:
            for block in blocks:  # bounded by the caller's blocks; each write by ``limit``
                data = memoryview(block.data).cast("B")
                if not block.count:
                    continue
                if offset + len(data) > limit:
                    raise ValueError(f"the batch takes more than the {size} bytes announced")
                _check_framed(data, block.count, block.last_size, lsn, ts)
                at = 0
                if head_crc_at < 0:
                    # The first record alone, its CRC complemented (as in write_batch).
                    head_size = fmt.RECORD_OVERHEAD + fmt.RECORD_HEADER.unpack_from(data)[0]
                    head_crc_at, head_crc = offset + head_size - 4, bytes(data[head_size - 4 : head_size])
                    fs.pwrite(fd, bytes(data[: head_size - 4]) + bytes(b ^ 0xFF for b in head_crc), offset)
                    at = head_size
                if at < len(data):
                    # (A view: os.pwrite takes any buffer, and the block is not copied again.)
                    # Crash: an unpublished batch, cut on recovery.
                    fs.pwrite(fd, cast("bytes", data[at:]), offset + at)
                offset += len(data)
                lsn += block.count
                last_size = block.last_size
                due = block.due
                index.append(block.index)
        except OSError as err:
            raise self.undo_write(err, "writing a batch") from err
        except BaseException:
            try:
                self.cut(start)  # nothing of the batch stays (it was never readable)
            except OSError as err2:
                self._handle.fail(err2)  # (the next writer's recovery cuts it)
            raise
        if lsn == first:
            self.needs_recovery = False  # (nothing was written)
            return first
        self._publish_batch(head_crc, head_crc_at, offset, lsn, ts, due, b"".join(index), last_size)
        return first

    def _stamp(self, timestamp: int | None) -> int:
        """Under the writer lock, before a write: the records' timestamp (``timestamp``, checked
        by the caller not to be below the last, or now; timestamps never decrease), after the
        active segment was rotated if it is due by age."""
        now = time.time_ns()
        ts = now if now > self.last_ts else self.last_ts
        if timestamp is not None:
            ts = timestamp
        if now >= self.deadline_ns:
            if self.end > fmt.SEGMENT_HEADER_SIZE:
                self.rotate(ts)  # rotation by age
            else:
                self.set_deadline(now)  # an empty segment's age starts with its first record
        return ts

    def write_at_end(self, data: bytes, what: str, *, grow: bool = True) -> None:
        """Write ``data`` at the end of the active segment's records (into the zeros preallocated
        there; ``grow=False``: preallocate no more), or leave the segment as it was."""
        end = self.end
        try:
            if grow and end + len(data) > self.alloc_end:
                self.alloc_end = self._preallocate(self.fd, end, end + len(data))
            self._fs.pwrite(self.fd, data, end)
        except OSError as err:
            raise self.undo_write(err, what) from err
        if grow and self._gather and end + len(data) + _ZERO_AHEAD_LOW > self.zeroed_end:
            self._zero_ahead(end + len(data))  # (not after a seal: nothing follows it)

    def _zero_ahead(self, end: int) -> None:
        """Under the writer lock, after a write that ends at ``end``: write zeros over the
        preallocated space after it, up to ``limits.ZERO_AHEAD_SIZE`` past what was zeroed
        (never past ``alloc_end``: the file keeps its size). Only zeros lie there (the writer
        lock's holder alone writes past the records), so this changes no byte a reader or a
        recovery sees; it makes the blocks the next appends write into written blocks, whose
        fsync journals nothing (limits.py). A failure is left alone: the appends after it cost
        what they did without it."""
        start = max(self.zeroed_end, end)
        stop = min(start + limits.ZERO_AHEAD_SIZE, self.alloc_end)
        if stop <= start:
            return  # (up to the preallocated space's end: the next preallocation goes on)
        try:
            # (``alloc_end`` is what this handle made sure of; the file itself says, if another
            # handle cut its zeros since: a write past its end would lengthen it)
            stop = min(stop, self._fs.size(self.fd))
            if stop > start:
                self._fs.pwrite(self.fd, _ZEROS[: stop - start], start)
        except OSError:
            return
        self.zeroed_end = stop

    def undo_write(self, err: OSError, what: str) -> Exception:
        """After a failed write at ``end``: part of it may be in the file. Cut it back so that
        nothing partial is ever visible (AppendError); if even that fails, stop (FailedError:
        the next writer's catch-up cuts the torn tail). Returns the error to raise."""
        try:
            self.cut(self.end)
        except OSError as err2:
            self._handle.fail(err2)
            return FailedError(self._root, f"{what} failed ({err}), not undone ({err2})")
        return AppendError(self._root, f"{what}: {err}")

    def _preallocate(self, fd: int, end: int, need: int) -> int:
        """Make segment ``fd`` at least ``need`` bytes long (zeros past its records, which end at
        ``end``), and some more: up to PREALLOCATE_SIZE past ``end``, within the segment's size
        limit. Returns how long it now is for sure. If the space cannot be had (ENOSPC, or a file
        system without fallocate), nothing is preallocated: the write appends, as it would
        without preallocation, and meets the error itself if there is one."""
        target = max(need, min(end + limits.PREALLOCATE_SIZE, self.segment_size_max))
        try:
            self._fs.allocate(fd, end, target - end)
        except OSError:
            return end
        return target

    def _write_chunk(self, data: bytes, end: int, next_lsn: int, last_size: int) -> None:
        """Write records ``data``, which end at ``end`` (the last of them ``last_size`` bytes
        long), the next lsn after them ``next_lsn``."""
        self.write_at_end(data, "writing records")
        self.end = end
        self.next_lsn = next_lsn
        self.mark_written()
        if not self.single:
            self._syncer.publish_tail(self.base, end - last_size, next_lsn - 1, end)

    def _write_index_entry_bytes(self, data: bytes) -> None:
        if not self.index_ok:
            return
        try:
            self._fs.write(self.idx_fd, data)
        except OSError:
            # The index is derived data: a failed entry only makes lookups scan further. Stop
            # indexing this segment from this handle; recovery rebuilds the index on next open.
            self.index_ok = False

    def rotate(self, ts: int = 0) -> None:
        """Under the writer lock: seal the active segment and start the next one. ``ts``: the
        timestamp of a batch of records that goes on in the next segment (its seal and creation
        time then, so that neither is later than the records after them); by default, now.

        Order (docs/FORMAT.md §6): seal record; fsync the old segment; create the new one with its
        header; fsync it; fsync the directory. A crash at any step leaves either the old segment
        unsealed (recovery goes on appending to it) or sealed without a successor (recovery
        creates it) or both (nothing to do).
        """
        if not ts:
            now = time.time_ns()
            ts = now if now > self.last_ts else self.last_ts
        seal = fmt.encode_record(self.next_lsn, ts, self._syncer.durable_lsn, b"", fmt.FLAG_SEAL)
        if self._fs.size(self.fd) > self.end:
            # A sealed segment ends with its seal: cut the preallocated zeros first (nothing of
            # ours is there, so the sync mark, which never passes the records, stays as it is).
            try:
                self._fs.truncate(self.fd, self.end)
            except OSError as err:
                raise AppendError(self._root, f"sealing the segment: {err}") from err
            self.alloc_end = self.end
        self.write_at_end(seal, "sealing the segment", grow=False)
        self.end += len(seal)
        # The records after the seal are not stamped before it, nor before the next segment's
        # creation time, even if the wall clock steps back meanwhile (FORMAT.md §4.3).
        self.last_ts = max(self.last_ts, ts)
        # fsynced whatever the durability (one fsync a segment): a handle with durability
        # "always" elsewhere counts on every segment before the sync mark's being durable.
        self.sync_whole()
        try:
            created = self.create_segment(self.next_lsn, ts)
            self.switch_to(self.next_lsn)
        except OSError as err:
            # The seal is durable and the next segment may be missing or half-made: the next
            # append recovers first (as an opening writer would: it creates the segment).
            self.needs_recovery = True
            raise AppendError(self._root, f"starting segment {self.next_lsn}: {err}") from err
        if not created:
            self.catch_up()  # (left by a crash mid-creation: it holds no record, but make sure)
        self.set_deadline(ts)  # (if the segment existed, its own time is close enough)
        self.mark_written()
        self.rotated = True  # applied once the locks are released

    def mark_written(self) -> None:
        """After a write or catch-up under the writer lock: what the next fsync must cover."""
        self.written = (self.fd, self.next_lsn, self.base, self.end)

    def cut(self, offset: int) -> None:
        """Under the writer lock: truncate the active segment at ``offset``, with the sync mark
        lowered to it before and after (FORMAT.md §8.1). After as well: a leader in another
        handle may have measured the size, cut bytes included, before the truncate, and raised
        the mark over them after the first lowering; the next record written there would then be
        acknowledged without an fsync (tests/crash/test_group_commit.py)."""
        self._syncer.lower(self.base, offset)
        self._syncer.clear_tail()  # (it may name a record cut here)
        self.alloc_end = offset
        self.zeroed_end = 0
        self._fs.truncate(self.fd, offset)
        self._syncer.lower(self.base, offset)

    def sync_whole(self) -> None:
        """fsync the active segment (and its index) whole, as the syncer, then mark it durable."""
        syncer = self._syncer
        syncer.take_role()
        synced = 0
        try:
            fds = (self.idx_fd,) if self.index_ok else ()
            syncer.sync_segment_through(
                self.fd,
                self.base,
                self.end,
                self.next_lsn,
                *fds,
                single=self.single,
                gather=self._gather,
            )
            syncer.persist()  # (one a segment: the seal proves its segment whole)
            synced = self.next_lsn
        except OSError as err:
            self._handle.fail(err)
            raise FailedError(self._root, f"fsync failed while sealing a segment: {err}") from err
        finally:
            syncer.leave_role(synced)

    def trim_zeros(self) -> None:
        """On close, under ``lock``: cut the preallocated zeros after the records, so a closed log
        is as long as what it holds. Only if the writer flock is free now (else another writer is
        at work and its handle trims when it closes) and nobody wrote past this handle's end.
        Zeros left by a failure here are harmless: they read as "no record"."""
        fs = self._fs
        if self.fd < 0:
            return
        mine = self.single or self.held
        if not mine and not fs.lock(self.lock_fd, 0):
            return
        try:
            end = self.end
            head = fs.pread(self.fd, fmt.RECORD_HEADER_SIZE, end)
            if head and head.count(0) == len(head):
                fs.truncate(self.fd, end)  # zeros only: the sync mark is below them
                self.alloc_end = end
        except OSError:
            pass
        finally:
            if not mine:
                fs.unlock(self.lock_fd)


class _Locked:
    """``ActiveSegment.locked``: a class, not a generator (every write and decision of a log
    enters one: a generator's context manager cost ~1 us more an entry, in the daemon's commit
    rounds more, their caches cold after each fsync; benchmarks/RESULTS.md, issue 34)."""

    __slots__ = ("_a", "_flock", "_idle", "_timeout_s")

    def __init__(self, a: ActiveSegment, timeout_s: float | None, idle: Callable[[], bool] | None) -> None:
        self._a = a
        self._timeout_s = timeout_s
        self._idle = idle
        self._flock = False  # taken for this hold only (else held for the handle's life, or between writes)

    def __enter__(self) -> None:
        a = self._a
        if not a.lock.acquire(blocking=self._timeout_s != 0):
            raise LockedError(a._root, 0)
        try:
            if not a._handle.usable:  # (one flag: check_usable's fork test is a getpid call)
                a._handle.check_usable()
            if not (a.single or a.held):
                a.take_flock(self._timeout_s, self._idle)
                self._flock = True
            hook = a._handle.on_write  # (once the write may go on: not while it waits a flock)
            if hook is not None:
                hook()
        except BaseException:
            if self._flock:
                a._fs.unlock(a.lock_fd)
            a.lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        a = self._a
        try:
            if self._flock:
                a._fs.unlock(a.lock_fd)
            elif a.held and a._syncer.writer_lock_wanted():
                a.end_hold(pause=True)
        finally:
            a.lock.release()
