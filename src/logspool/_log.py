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

Invariants of the writer state (all under ``_lock`` and the flock, except where noted):
- ``_seg_end`` is the size of the active segment as this handle last saw it, at a record boundary.
- ``_next_lsn`` is the lsn the next record appended gets.
- What is durable, the sync role among threads and the sync file: ``_sync.Syncer``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Literal

from . import _codec, limits
from . import _format as fmt
from . import _quarantine as quarantine
from . import _segment as seg
from ._fs import REAL, FileSystem
from ._reader import OnDataLoss, Position, Reader
from ._retention import Retention, RetentionReport, read_policy, write_policy
from ._retention import enforce as enforce_retention
from ._subscribers import (
    Checkpoints,
    Subscriber,
    SubscriberInfo,
    check_name,
    is_transient,
    subscriber_info,
)
from ._sync import Syncer, proven_text
from .errors import (
    AppendError,
    ClosedError,
    CorruptionError,
    FailedError,
    LockedError,
    ReadOnlyError,
    RecordTooLargeError,
    SubscriberExistsError,
    SubscriberNotFoundError,
)
from .log._directory import (
    LogInfo,
    index_path,
    list_segments,
    open_meta,
    segment_infos,
    segment_path,
)

_logger = logging.getLogger("logspool")
_NEVER_NS = 1 << 63
_ZERO_HEADER = bytes(fmt.RECORD_HEADER_SIZE)  # what a writer finds at its end when nobody wrote
_SYNC_LOOKAHEAD = 4096  # how far a syncer looks for records others wrote after its own
_CATCH_UP_READ = 4096  # what a catch-up reads at least (one syscall for a few records)
_SCAN_CHUNK = 1 << 20  # what recovery and catch-up read at most at once (unless a record is longer)

Durability = Literal["always", "interval", "os"]
_DURABILITIES = ("always", "interval", "os")


def _checked_payloads(payloads: Iterable[object], size_max: int) -> list[bytes]:
    """The payloads as bytes, after checking every type and size (before anything is written)."""
    items = [_as_bytes(p) for p in payloads]
    for item in items:
        if len(item) > size_max:
            raise RecordTooLargeError(len(item), size_max)
    return items


def _as_bytes(payload: object) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise TypeError(f"payload must be bytes, bytearray or memoryview, not {type(payload).__name__}")


class _Pending:
    """An append waiting in a handle's write queue for the thread with the write role."""

    __slots__ = ("data", "error", "flags", "lead", "lsn", "wake")

    def __init__(self, data: bytes, flags: int) -> None:
        self.data = data
        self.flags = flags
        self.wake = threading.Lock()  # held until the leader has done with this append
        self.wake.acquire()
        self.lsn = -1
        self.error: BaseException | None = None
        self.lead = False  # woken to take the write role, not written


# Every open handle, so that a forked child marks them unusable (the hot path tests one flag,
# not os.getpid(); _check_usable then names fork as the reason).
_HANDLES: weakref.WeakSet[Log] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for handle in list(_HANDLES):
        handle._usable = False
        if handle._single and handle._lock_fd >= 0:
            # The child's copy of a single writer's lock fd shares the parent's flock: closed
            # (not unlocked), so that the lock ends with the parent, not with the last child.
            fd, handle._lock_fd, handle._single = handle._lock_fd, -1, False
            os.close(fd)


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
        # Rotation by age (optional, per handle): a segment holding records is sealed by the first
        # append from this handle after it is this old (BinLog's daily cut, without a cron job).
        self._segment_age_max_ns = None if segment_age_max_s is None else int(segment_age_max_s * 1e9)
        self._seg_deadline_ns = _NEVER_NS
        self.readonly = readonly
        if not isinstance(single_writer, bool):
            raise TypeError(f"single_writer must be True or False, not {single_writer!r}")
        if single_writer and readonly:
            raise ValueError("single_writer=True needs a handle that writes, not readonly=True")
        # The handle holds the writer flock from open to close: no other process appends (they
        # wait, or fail with LockedError), so appends skip the flock, the size check and the
        # sync lock (docs/DESIGN.md, "single writer"). Readers, subscribers and retention go on.
        self.single_writer = single_writer
        self._single = False  # True once the lifetime flock is held
        self._fs = fs or REAL
        self._sync_interval_s = sync_interval_ms / 1000.0
        self._lock_timeout_s = lock_timeout_s
        self._pid = os.getpid()
        self._closed = False
        self._failure: BaseException | None = None
        # False once the handle cannot append (closed, failed, read-only, or in a forked child):
        # the one test on the append hot path; _check_usable then says why.
        self._usable = not readonly
        _HANDLES.add(self)
        self._lock = threading.Lock()
        self._exclusive_owner: int | None = None
        # The write queue (threads of this handle appending at once; see append): one thread has
        # the write role (``_wq_busy``), the others wait in ``_wq`` to be written by it.
        self._wq_mutex = threading.Lock()
        self._wq: list[_Pending] = []
        self._wq_busy = False
        # Gathering (docs/DESIGN.md, "the write queue gathers"): the threads of the batch just
        # acknowledged that have not appended again yet, and the gate a leader waits on for them
        # (released by the last to come back), for at most the fsync's recent cost.
        self._wq_expected = 0
        self._wq_gate: threading.Lock | None = None
        self._queued = durability == "always"
        self._batch_first = -1  # under _lock: the first lsn of the batch being written
        self._lock_fd = -1
        self._seg_fd = -1
        self._idx_fd = -1
        self._seg_base = 0
        self._seg_end = 0
        # The active segment's file is at least this long (zeros past _seg_end, preallocated):
        # a write that ends below it lands in place (docs/DESIGN.md, "preallocated segments").
        self._alloc_end = 0
        self._next_lsn = 0
        self._last_ts = 0
        self._index_due = 0
        self._index_ok = True
        # The syncer's view of the last write: (segment fd, next lsn, segment base, end offset).
        self._written = (-1, 0, 0, 0)
        # Whether the last recovery ran in the boot that wrote the newest segment's bytes.
        self._recovered_same_boot = False
        # Set when a failure left this handle unsure of the active segment: recover before the
        # next write (under the writer lock).
        self._needs_recovery = False
        self._flusher: threading.Thread | None = None
        self._retention_due = False
        # The last error of an automatic retention pass (after a rotation), if it failed: the
        # append that rotated succeeded, so the error is logged and kept here, not raised.
        self.retention_error: BaseException | None = None
        self._flusher_stop = threading.Event()
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
        # New segments carry the lowest format version that holds what is written in them.
        self._segment_version = fmt.VERSION_1 if self.meta.compression is None else fmt.VERSION_2
        # Set when the log was created with compression: payloads are compressed before the lock
        # is taken, and stored compressed when that makes them smaller (docs/FORMAT.md §4.4).
        self._compressor: _codec.Compressor | None = None
        if self.meta.compression is not None and not readonly:
            self._compressor = _codec.Compressor(self.meta.compression_level or limits.ZSTD_LEVEL_DEFAULT)
        # A record of payload size n starting at offset o fits without rotation if o + n is at
        # most this (room is kept for the seal record; see _write_records).
        self._plain_end_max = self.meta.segment_size_max - 2 * fmt.RECORD_OVERHEAD
        if not readonly:
            self._open_writer()
            if durability == "interval":
                self._flusher = threading.Thread(
                    target=self._flush_loop, name=f"logspool-sync:{self.path}", daemon=True
                )
                self._flusher.start()

    # --- the writer -----------------------------------------------------------------------------
    def _open_writer(self) -> None:
        lock_path = os.path.join(self.path, fmt.LOCK_NAME)
        try:
            self._lock_fd = self._fs.open(lock_path, os.O_RDWR | os.O_CREAT)
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise ReadOnlyError(
                self.path, f"cannot open {lock_path} for writing ({err}); open with readonly=True"
            ) from err
        self._syncer.open()
        if self.single_writer:
            if not self._fs.lock(self._lock_fd, self._lock_timeout_s):
                raise LockedError(self.path, self._lock_timeout_s)
            self._single = True
            try:
                self._recover()
            except BaseException:
                self._single = False
                self._fs.unlock(self._lock_fd)
                raise
            return
        with self._writer_locked(self._lock_timeout_s):
            self._recover()

    @contextlib.contextmanager
    def _writer_locked(
        self, timeout_s: float | None, idle: Callable[[], bool] | None = None
    ) -> Iterator[None]:
        """Hold the thread lock and the process flock; the caller catches up inside. ``idle``:
        as ``FileSystem.lock``."""
        if self._exclusive_owner is not None:
            self._refuse_inside_exclusive()
        with self._lock:
            self._check_usable()
            if self._single:  # held for the handle's life
                yield
                return
            if timeout_s is None:
                self._fs.lock_blocking(self._lock_fd)
            elif not self._fs.lock(self._lock_fd, timeout_s, idle):
                raise LockedError(self.path, timeout_s)
            try:
                yield
            finally:
                self._fs.unlock(self._lock_fd)

    def _refuse_inside_exclusive(self) -> None:
        if self._exclusive_owner == threading.get_ident():
            raise RuntimeError("append through the Tail given by exclusive(), not the Log, inside it")

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise FailedError(self.path, f"log handle failed: {self._failure}; reopen the log")
        if self._closed:
            raise ClosedError(self.path)
        if self.readonly:
            raise ReadOnlyError(self.path, "the log was opened with readonly=True")
        if os.getpid() != self._pid:
            raise ClosedError(self.path, "a Log handle cannot be used across fork; open a new one")

    def _failure_now(self) -> BaseException | None:
        return self._failure

    def _fail(self, err: BaseException) -> None:
        """Stop this handle for good (fsyncgate: never retry an fsync, never ack past it)."""
        if self._failure is None:
            self._failure = err
        self._usable = False

    def _seg_path(self, base: int) -> str:
        return segment_path(self.path, base)

    def _idx_path(self, base: int) -> str:
        return index_path(self.path, base)

    def _recover(self) -> None:
        """Under the writer lock: find the newest segment, check its records, cut a torn tail.

        Reads the newest segment in chunks of at most _SCAN_CHUNK bytes (memory flat in its
        size). Within the boot in which a writer last recovered the log, the scan starts at the
        record of the index's last entry (FORMAT.md §9: what the page cache holds cannot have
        lost a byte): reopening costs the records appended since that entry, not the segment.
        After a reboot, or when that record does not check out, it reads the segment whole.
        """
        fs = self._fs
        bases = list_segments(fs, self.path)
        if not bases:
            self._create_segment(0, time.time_ns())
            bases = [0]
        base = bases[-1]
        path = self._seg_path(base)
        fd = fs.open(path, os.O_RDWR)
        try:
            header = self._checked_segment_header(fd, base)
            size = fs.size(fd)
        except BaseException:
            fs.close(fd)
            raise
        self._seg_fd = fd
        self._seg_base = base
        self._seg_end = fmt.SEGMENT_HEADER_SIZE
        self._next_lsn = base
        self._last_ts = header.created_ns
        self._set_segment_deadline(header.created_ns)
        self._index_due = 0
        self._open_index()
        boot = fs.boot_id()
        same_boot = bool(boot) and self._syncer.boot() == boot
        self._recovered_same_boot = same_boot
        start = self._trusted_start(size) if same_boot else None
        index_pos = 0  # where the index entries the scan implies begin (0: the header too)
        if start is not None:
            offset, lsn, index_pos = start
            self._next_lsn, self._index_due = lsn, offset  # (the record there is due an entry)
        else:
            offset = fmt.SEGMENT_HEADER_SIZE
        data = fs.pread(fd, _SCAN_CHUNK, offset)
        due, index_pos = self._scan_from(
            data, offset, partial=offset + len(data) < size, index_pos=index_pos, recovering=True
        )
        # The scan may have cut a tail or crossed a seal: index what is now the active segment
        # (from the records the scan parsed: no second parse).
        self._rewrite_index_if_needed(due, index_pos)
        if not same_boot and boot:
            self._syncer.set_boot(boot)  # the segment and its index agree now, in this boot
        # The sync mark never claims more than this segment holds (a copied or restored directory
        # may carry a mark from elsewhere).
        self._syncer.lower(self._seg_base, self._seg_end)
        self._alloc_end = fs.size(self._seg_fd)
        self._redirty_unsynced_tail()
        if self.durability != "os":
            # Records other handles wrote without fsync ("os") become durable here, so the mark
            # this handle writes into later records (durable_lsn) is true.
            self._sync_segment_for_rotation()
        self._mark_written()

    def _checked_segment_header(self, fd: int, base: int) -> fmt.SegmentHeader:
        """Under the writer lock: the header of segment ``base`` (open as ``fd``), written again
        if a crash while creating the segment left it missing (a 0-byte file, or zeros: no record
        can be there yet). Recovery and a catch-up that crosses a seal both come here, so a live
        handle meets every state a peer killed mid-rotation can leave exactly as a fresh open
        does. CorruptionError if the header is bad and anything but zeros follows it (damage)."""
        fs = self._fs
        path = self._seg_path(base)
        data = fs.pread(fd, fmt.SEGMENT_HEADER_SIZE, 0)
        try:
            header = fmt.decode_segment_header(data, path)
        except CorruptionError:
            if self._nonzero_after(fd, fmt.SEGMENT_HEADER_SIZE, fs.size(fd)):
                raise
            if self._syncer.proven_end(base) > fmt.SEGMENT_HEADER_SIZE:
                raise CorruptionError(
                    path, 0, "segment header gone, but the sync mark proves records fsynced in it"
                ) from None
            # A crash while creating the segment: its header never reached the disk and it
            # holds no record. Write the header again (the name gives the base lsn).
            self._syncer.lower(base, 0)
            fs.truncate(fd, 0)  # crash here: an empty segment, handled the same way again
            fs.pwrite(fd, fmt.encode_segment_header(base, time.time_ns(), self._segment_version), 0)
            fs.fsync(fd)  # crash before: the header may be lost again, rewritten again
            header = fmt.decode_segment_header(fs.pread(fd, fmt.SEGMENT_HEADER_SIZE, 0), path)
        if header.base_lsn != base:
            raise CorruptionError(path, 16, f"header base lsn {header.base_lsn}, name says {base}")
        return header

    def _check_proven_end(self, stop: seg.Stop) -> None:
        """Recovery found the active segment's records ending cleanly at ``stop`` (the end of the
        file, or zeros to it): CorruptionError if the sync mark proves records fsynced past it
        (acknowledged records were cut off or zeroed after they were written)."""
        proven = self._syncer.proven_end(self._seg_base)
        if stop.pos < proven:
            shown = proven_text(proven)
            raise CorruptionError(
                self._seg_path(self._seg_base),
                stop.pos,
                f"the records end at lsn {stop.lsn}, but the sync mark proves the segment fsynced "
                f"to {shown}: acknowledged records from lsn {stop.lsn} on are missing",
            )

    def _quarantine_tail(self, cut: int, stop: seg.Stop) -> None:
        """Before recovery or a catch-up cuts the active segment at ``cut``: copy the bytes from
        there to the last non-zero one into quarantine/ (nothing that was a record is ever
        removed without a copy) and say so in the log's logger."""
        fs = self._fs
        size = fs.size(self._seg_fd)
        chunks = [
            fs.pread(self._seg_fd, min(_SCAN_CHUNK, size - p), p) for p in range(cut, size, _SCAN_CHUNK)
        ]
        tail = b"".join(chunks).rstrip(b"\0")  # (the zeros after it are preallocated space)
        if not tail:
            return  # zeros only: preallocated space, or a tail that never got its data
        rel = quarantine.save(fs, self.path, self._seg_base, cut, tail)
        _logger.warning(
            "%s: offset %d: cut %d bytes from lsn %d (%s), never proven durable; a copy is in %s",
            self._seg_path(self._seg_base),
            cut,
            len(tail),
            stop.lsn,
            stop.reason or stop.kind,
            rel,
        )

    def _nonzero_after(self, fd: int, offset: int, size: int) -> bool:
        """Whether any byte of ``fd`` from ``offset`` to ``size`` is not zero (read in chunks)."""
        for pos in range(offset, size, _SCAN_CHUNK):  # bounded by the size
            if any(self._fs.pread(fd, min(_SCAN_CHUNK, size - pos), pos)):
                return True
        return False

    def _trusted_start(self, size: int) -> tuple[int, int, int] | None:
        """Where recovery may start within the boot in which the log was last recovered whole:
        (offset, lsn, position in the index file) of the active segment's last index entry,
        if the record it names is there, whole, with its lsn and timestamp; else None.

        Within a boot, an index entry vouches for every record before it: its writer wrote
        them, in order, before the entry, and nothing written can be lost until the power is. (A
        cut within the boot removes a torn tail, which no entry names, since entries are written
        after their records; repair forgets the boot. An entry left past the records by anything
        else fails the check of its record.)"""
        fs = self._fs
        pos = fs.size(self._idx_fd) - fmt.INDEX_ENTRY_SIZE
        pos -= (pos - fmt.INDEX_HEADER_SIZE) % fmt.INDEX_ENTRY_SIZE
        if pos < fmt.INDEX_HEADER_SIZE:
            return None
        raw = fs.pread(self._idx_fd, fmt.INDEX_HEADER_SIZE, 0) + fs.pread(
            self._idx_fd, fmt.INDEX_ENTRY_SIZE, pos
        )
        try:
            idx_base, interval = fmt.decode_index_header(raw, self._idx_path(self._seg_base))
        except CorruptionError:
            return None
        entries = fmt.decode_index_entries(raw)
        if idx_base != self._seg_base or interval != self.meta.index_interval or not entries:
            return None
        entry = entries[0]
        if not fmt.SEGMENT_HEADER_SIZE <= entry.offset < size or entry.lsn < self._seg_base:
            return None
        head = fs.pread(self._seg_fd, fmt.RECORD_HEADER_SIZE, entry.offset)
        length = int.from_bytes(head[:4], "little")
        if len(head) < fmt.RECORD_HEADER_SIZE or length > self.record_size_max:
            return None
        rec = head + fs.pread(self._seg_fd, length + fmt.RECORD_TRAILER_SIZE, entry.offset + len(head))
        infos: list[seg.RecordInfo] = []
        seg.parse(rec, 0, entry.lsn, self.record_size_max, None, infos, entry.offset)
        if not infos or infos[0].timestamp != entry.timestamp:
            return None
        return entry.offset, entry.lsn, pos

    def _redirty_unsynced_tail(self) -> None:
        """Write the active segment's bytes past the sync mark again, unchanged (in chunks).

        After a failed fsync, Linux marks the pages it could not write clean (fsyncgate): reads
        return them, no later fsync writes them. The handle that saw the error stopped; a handle
        opened afterwards in the same boot would adopt those records, write after them, and its
        fsyncs would leave a hole on disk. Writing the bytes again makes their pages dirty, so
        the next fsync really writes them. The mark (shared memory) is exact within a boot.
        """
        mark_base, mark_offset = self._syncer.mark_unlocked()
        start = mark_offset if mark_base == self._seg_base else fmt.SEGMENT_HEADER_SIZE
        if start >= self._seg_end:
            return
        path = self._seg_path(self._seg_base)
        fd = self._fs.open(path, os.O_WRONLY)  # not O_APPEND: pwrite must land at its offset
        try:
            for pos in range(start, self._seg_end, _SCAN_CHUNK):  # bounded by the records' end
                tail = self._fs.pread(self._seg_fd, min(_SCAN_CHUNK, self._seg_end - pos), pos)
                self._fs.pwrite(fd, tail, pos)  # the same bytes: a crash here changes nothing
        finally:
            self._fs.close(fd)

    def _scan_from(
        self, data: bytes, base: int, *, partial: bool = False, index_pos: int = -1, recovering: bool = False
    ) -> tuple[list[seg.RecordInfo], int]:
        """Adopt the records of the active segment in ``data``, which holds its bytes from file
        offset ``base`` to the end (``partial``: only the first part of them; the rest is read
        in chunks of at most _SCAN_CHUNK bytes), cutting a torn tail. Follows seals into the
        next segment. Returns the records that are due an index entry (§5.2) in the segment it
        ends in, from ``base`` (or from its start, once it crossed a seal), and ``index_pos``,
        where their entries go in its index file (0 once it crossed a seal: from the header; -1,
        a catch-up: unknown). ``recovering``: zeros end the records only if they run to the end
        of the file (a catch-up trusts the zeros it finds: within a boot, a write is never kept
        past a part that was lost)."""
        offset = 0
        infos: list[seg.RecordInfo] = []
        due: list[seg.RecordInfo] = []
        interval = self.meta.index_interval
        for _ in range(1 << 40):  # bounded: one turn per chunk read or segment crossed
            stop = seg.parse(data, offset, self._next_lsn, self.record_size_max, None, infos, base)
            durable = self._syncer.durable_lsn
            index_due = self._index_due
            for info in infos:
                if info.durable_lsn > durable:
                    durable = info.durable_lsn
                if info.offset >= index_due:
                    # The process that wrote the record wrote its index entry.
                    due.append(info)
                    index_due = (info.offset // interval + 1) * interval
            self._syncer.durable_lsn, self._index_due = durable, index_due
            self._next_lsn = stop.lsn  # past a gap record too
            if infos:
                self._last_ts = max(self._last_ts, infos[-1].timestamp)
                infos.clear()
            if stop.kind == seg.END and not partial:
                if recovering:
                    self._check_proven_end(stop)
                self._seg_end = stop.pos
                return due, index_pos
            if (
                stop.kind == seg.ZERO
                and seg.zeros_from(data, stop.pos - base)
                and (not partial or base + len(data) - stop.pos >= fmt.RECORD_HEADER_SIZE)
            ):
                # The zeros past the records: space preallocated by a writer (or a zero-filled
                # tail a crash left). No record, nothing to cut: later records go there. (In a
                # part read, a whole zero header must be there: a few zeros at its end may be
                # the start of a record's header, a seal's zero length.)
                size = self._fs.size(self._seg_fd)
                if not (recovering and partial and self._nonzero_after(self._seg_fd, base + len(data), size)):
                    if recovering:
                        self._check_proven_end(stop)
                    self._seg_end = stop.pos
                    return due, index_pos
                # Bytes after the zeros: a hole (a power loss, or damage), judged below on them all.
                data = self._fs.pread(self._seg_fd, size - stop.pos, stop.pos)
                offset, base, partial = 0, stop.pos, False
                continue
            if stop.kind == seg.SEAL:
                # Sealed by another process (or by a crash mid-rotation): move to the next one.
                seal_end = stop.pos + fmt.RECORD_OVERHEAD
                self._seg_end = stop.pos
                if len(data) + base > seal_end and seg.zeros_from(data, seal_end - base):
                    # Preallocated zeros a crash left after the seal (the writer cuts them before
                    # it writes the seal): a sealed segment ends with its seal.
                    self._fs.truncate(self._seg_fd, seal_end)
                next_base = stop.next_lsn
                next_path = self._seg_path(next_base)
                if not self._fs.exists(next_path):
                    # A crash between the seal and the next segment: the sealed segment's index
                    # may not have been fsynced with it. Make it whole and durable first.
                    if index_pos < 0 or self._rewrite_index_if_needed(due, index_pos):
                        self._fs.fsync(self._idx_fd)  # (a catch-up: the entries its writer wrote)
                    self._create_segment(next_base, max(self._last_ts, time.time_ns()))
                self._switch_to(next_base)
                # (A peer killed while creating it may have left it without its header.)
                header = self._checked_segment_header(self._seg_fd, next_base)
                self._last_ts = max(self._last_ts, header.created_ns)  # (as the sealing writer)
                self._alloc_end = self._fs.size(self._seg_fd)
                data = self._fs.pread(self._seg_fd, _SCAN_CHUNK, 0)
                self._set_segment_deadline(header.created_ns)
                offset, base, due, index_pos = fmt.SEGMENT_HEADER_SIZE, 0, [], 0
                partial = len(data) == _SCAN_CHUNK
                continue
            if partial:
                # The parse stopped at the end of the part read: read on, four times as much
                # up to a chunk (or what the record needs). Or it stopped at damage, which is
                # judged by the bytes after it: read them all.
                rest = self._fs.size(self._seg_fd) - stop.pos
                want = rest
                if stop.kind in (seg.END, seg.INCOMPLETE):
                    grown = min(4 * len(data), _SCAN_CHUNK)
                    want = min(rest, max(grown, stop.need + fmt.RECORD_HEADER_SIZE))
                data = self._fs.pread(self._seg_fd, want, stop.pos)
                offset, base, partial = 0, stop.pos, want < rest
                continue
            cut = seg.judge_damage(
                self._seg_path(self._seg_base),
                data,
                stop,
                self._syncer.durable_lsn,
                self.record_size_max,
                base,
                proven_end=self._syncer.proven_end(self._seg_base),
                # (a catch-up reads what peers wrote in this boot; recovery knows from the sync file)
                same_boot=self._recovered_same_boot or not recovering,
            )
            # Never proven durable: a crash left it half-written. Cut it (and anything after
            # it), keeping a copy of its bytes first.
            self._quarantine_tail(cut, stop)
            self._cut_active(cut)  # crash here: the same cut is made on next open
            self._sync_if_durable(self._seg_fd)
            self._seg_end = cut
            return [info for info in due if info.offset < cut], index_pos
        raise AssertionError("segment chain did not end")

    def _catch_up(self, head: bytes | None = None) -> None:
        """Under the writer lock: adopt what other processes appended since we last wrote; or,
        after a failure that left this handle's view of the active segment unsure (a rotation
        or a catch-up that failed half-way), recover the newest segment as an opening writer
        does. An OSError here is an AppendError: nothing was appended, and the next call
        recovers first."""
        try:
            if self._needs_recovery:
                self._close_segment_fds()
                self._recover()
                self._needs_recovery = False
                return
            self._catch_up_from(head)
        except OSError as err:
            self._needs_recovery = True
            raise AppendError(self.path, f"reading the log's end: {err}") from err

    def _catch_up_from(self, head: bytes | None = None) -> None:
        """Under the writer lock: adopt what other processes appended since we last wrote.

        The space past the records is zeros (preallocated), so what tells that others wrote is
        the record header at our end offset (``head``, if the caller read it), not the file's
        size."""
        fs = self._fs
        end = self._seg_end
        if head is None:
            head = fs.pread(self._seg_fd, fmt.RECORD_HEADER_SIZE, end)
        if head == _ZERO_HEADER:
            return  # the common case: nobody else wrote
        if head and self._adopt_tail_hint():
            return
        if not head:
            size = fs.size(self._seg_fd)
            if size == end:
                self._alloc_end = end  # nobody wrote, and the zeros were cut (a handle closed)
                return
            # Someone cut the segment under us (repair, or recovery of a tail we had not
            # written): start again from the segment's beginning.
            self._close_segment_fds()
            self._recover()
            return
        # The bytes written since, and the header after them, in one read of at least a page:
        # catching up costs what the others appended and a page at most. The header read says
        # how long the first record is; if more follow, the scan reads on in growing chunks.
        length = int.from_bytes(head[:4], "little")
        want = max(
            fmt.RECORD_OVERHEAD + min(length, self.record_size_max) + fmt.RECORD_HEADER_SIZE,
            _CATCH_UP_READ,
        )
        data = fs.pread(self._seg_fd, want, end)
        due, index_pos = self._scan_from(data, end, partial=len(data) == want)
        if index_pos == 0 and self._index_ok:
            # Crossed a seal: the new segment's index must hold exactly what its records imply
            # (a peer killed mid-rotation may have left it without a header or without entries).
            try:
                self._rewrite_index_if_needed(due)
            except OSError:
                self._index_ok = False  # derived data: lookups scan; the next open rebuilds it
        if self._alloc_end < self._seg_end:
            self._alloc_end = self._seg_end  # (the others preallocated; allocate() says how far)
        self._mark_written()

    def _adopt_tail_hint(self) -> bool:
        """Under the writer lock, others having written after our end: adopt the end of their
        records from the tail hint (FORMAT.md §8.1) if the record it names is there, whole and
        valid, after our end, in our segment. Then, if more follows it (a writer of an earlier
        release, or one killed before it published), catch up from there. False: no usable hint
        (catch up by parsing from our end)."""
        hint = self._syncer.tail()
        if (
            hint is None
            or hint.base_lsn != self._seg_base
            or hint.offset < self._seg_end
            or hint.lsn < self._next_lsn
            or not fmt.RECORD_OVERHEAD <= hint.end - hint.offset <= fmt.RECORD_OVERHEAD + self.record_size_max
        ):
            return False
        data = self._fs.pread(self._seg_fd, hint.end - hint.offset + fmt.RECORD_HEADER_SIZE, hint.offset)
        infos: list[seg.RecordInfo] = []
        stop = seg.parse(data, 0, hint.lsn, self.record_size_max, None, infos, hint.offset)
        if len(infos) != 1 or stop.pos != hint.end:
            return False  # not the record it names: stale (the log was cut) or torn
        info = infos[0]
        self._next_lsn = hint.lsn + 1
        self._seg_end = hint.end
        if info.durable_lsn > self._syncer.durable_lsn:
            self._syncer.durable_lsn = info.durable_lsn
        if info.timestamp > self._last_ts:
            self._last_ts = info.timestamp
        # What a parse of every record would leave (§5.2): the last record's offset decides it.
        interval = self.meta.index_interval
        self._index_due = (info.offset // interval + 1) * interval
        if self._alloc_end < hint.end:
            self._alloc_end = hint.end
        self._mark_written()
        head = data[hint.end - hint.offset :]
        if head != _ZERO_HEADER:
            self._catch_up(head)  # more after it: parsed from there (the hint is behind now)
        return True

    def _sync_if_durable(self, fd: int) -> None:
        if self.durability != "os":
            self._fs.fsync(fd)

    def _create_segment(self, base: int, created_ns: int) -> bool:
        """Create segment ``base`` with its header and empty index. Under the writer lock. False
        if it exists already."""
        path = self._seg_path(base)
        try:
            fd = self._fs.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        except FileExistsError:
            return False  # left by a crash mid-creation; _recover rewrites a missing header
        try:
            self._fs.write(fd, fmt.encode_segment_header(base, created_ns, self._segment_version))
            self._preallocate(fd, fmt.SEGMENT_HEADER_SIZE, fmt.SEGMENT_HEADER_SIZE)
            # Always fsynced, whatever the durability: other handles of the log may be "always"
            # and rely on every segment before theirs being durable (the sync mark). (The new
            # size, zeros included, is made durable by the same fsync.)
            self._fs.fsync(fd)  # crash before: a segment without header, rewritten on open
        finally:
            self._fs.close(fd)
        idx = self._fs.open(self._idx_path(base), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        try:
            self._fs.write(idx, fmt.encode_index_header(base, self.meta.index_interval))
        finally:
            self._fs.close(idx)
        self._fs.fsync_dir(self.path)  # without this the new segment's name can be lost
        return True

    def _set_segment_deadline(self, created_ns: int) -> None:
        age = self._segment_age_max_ns
        self._seg_deadline_ns = _NEVER_NS if age is None else created_ns + age

    def _switch_to(self, base: int) -> None:
        """Make segment ``base`` the active one (its header already written)."""
        self._close_segment_fds()
        self._seg_fd = self._fs.open(self._seg_path(base), os.O_RDWR)
        self._seg_base = base
        self._seg_end = fmt.SEGMENT_HEADER_SIZE
        self._alloc_end = self._fs.size(self._seg_fd)
        self._index_due = 0
        self._open_index()

    def _close_segment_fds(self) -> None:
        """Close the active segment's fds once no fsync of them is under way."""
        with self._syncer.quiet():
            for fd in (self._seg_fd, self._idx_fd):
                if fd >= 0:
                    self._fs.close(fd)
            self._seg_fd = self._idx_fd = -1
            # Every caller has made the segment durable first (rotation, recovery, close): a
            # syncer that finds no fd has nothing left to fsync.
            self._written = (-1, *self._written[1:])

    # --- the index --------------------------------------------------------------------------------
    def _open_index(self) -> None:
        """Under the writer lock: open the active segment's index, checking its header first.

        A writer never appends to an index whose header it has not checked: a peer killed
        between creating the index file and writing its header (or before creating it at all)
        leaves an empty or missing file, and entries appended to it would start at offset 0.
        The index is derived data, so such a file is started again from its header; whoever
        switched to the segment then writes the entries its records imply (recovery and the
        catch-up across a seal both do: ``_rewrite_index_if_needed``)."""
        fs = self._fs
        path = self._idx_path(self._seg_base)
        fd = fs.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        self._idx_fd = fd
        self._index_ok = True
        try:
            ibase, interval = fmt.decode_index_header(fs.pread(fd, fmt.INDEX_HEADER_SIZE, 0), path)
            if ibase == self._seg_base and interval == self.meta.index_interval:
                return
        except CorruptionError:
            pass  # (an UnsupportedVersionError, a newer writer's index, is left to propagate)
        try:
            fs.truncate(fd, 0)  # derived data: a crash here leaves it empty, checked again here
            fs.write(fd, fmt.encode_index_header(self._seg_base, self.meta.index_interval))
        except OSError:
            self._index_ok = False  # lookups scan; the next writer to open it tries again

    def _rewrite_index_if_needed(self, due: list[seg.RecordInfo], index_pos: int = 0) -> bool:
        """Make the active segment's index exactly what its records imply (after recovery):
        ``due``, the records due an entry from a scan, have theirs from ``index_pos`` in the
        index file on (0: the header first, and ``due`` holds every entry). True if it had to
        be rewritten there."""
        entries = b"".join(fmt.encode_index_entry(i.lsn, i.timestamp, i.offset) for i in due)
        if index_pos == 0:
            entries = fmt.encode_index_header(self._seg_base, self.meta.index_interval) + entries
        current = self._fs.pread(self._idx_fd, len(entries) + 1, index_pos)
        if current != entries:
            # The index is derived: no fsync needed, a crash here is repaired the same way.
            self._fs.truncate(self._idx_fd, index_pos)
            self._fs.write(self._idx_fd, entries)
            return True
        return False

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
        data = payload if type(payload) is bytes else _as_bytes(payload)
        if len(data) > self.record_size_max:
            raise RecordTooLargeError(len(data), self.record_size_max)
        flags = 0
        if self._compressor is not None:
            packed = self._compressor.compress(data)
            if packed is not None:
                data, flags = packed, fmt.FLAG_ZSTD
        if not self._usable:  # before the queue: a forked child must not wait on its parent's
            self._check_usable()
        if self._exclusive_owner is not None:
            self._refuse_inside_exclusive()
        if self._queued:
            return self._append_queued(data, flags)
        with self._lock:
            lsn = self._write_one_locked(data, flags, ())
        if self._retention_due:
            self._retain_after_rotation()
        return lsn

    def _write_one_locked(self, data: bytes, flags: int, batch: list[_Pending] | tuple[()]) -> int:
        """Under ``_lock``: take the flock, catch up, write ``data`` (then the payloads queued in
        ``batch``, which the caller fills under the flock if it passes a list); the first lsn.

        The hot path, written out: the same steps as _writer_locked + _write_records, without a
        generator or a list per call (docs/DESIGN.md, "append cost"). Everything that is not a
        plain record in the middle of a segment (a rotation, an index entry, a batch) goes the
        long way.
        """
        if not self._usable:
            self._check_usable()
        fs = self._fs
        single = self._single
        if not single:
            fs.lock_blocking(self._lock_fd)
        try:
            if not single:
                head = fs.pread(self._seg_fd, fmt.RECORD_HEADER_SIZE, self._seg_end)
                if head != _ZERO_HEADER:
                    self._catch_up(head)
            if self._wq and type(batch) is list:  # (a hint; taken under the mutex)
                with self._wq_mutex:
                    batch.extend(self._wq)
                    self._wq.clear()
            if batch:
                self._batch_first = self._next_lsn
                return self._write_records(
                    [data, *(p.data for p in batch)], [flags, *(p.flags for p in batch)], whole=False
                )
            offset = self._seg_end
            now = time.time_ns()
            if (
                offset + len(data) > self._plain_end_max
                or offset >= self._index_due
                or now >= self._seg_deadline_ns
            ):
                return self._write_records((data,), (flags,))
            lsn = self._next_lsn
            ts = now if now > self._last_ts else self._last_ts
            rec = fmt.encode_record(lsn, ts, self._syncer.durable_lsn, data, flags)
            self._write_at_end(rec, "writing records")
            end = offset + len(rec)
            self._seg_end = end
            self._next_lsn = lsn + 1
            self._written = (self._seg_fd, lsn + 1, self._seg_base, end)
            self._last_ts = ts
            if not single:
                self._syncer.publish_tail(self._seg_base, offset, lsn, end)
            return lsn
        finally:
            if not single:
                fs.unlock(self._lock_fd)

    def _append_queued(self, data: bytes, flags: int) -> int:
        """``append`` with durability "always": through the write queue. One thread at a time has
        the write role; the others queue their record and wait. The leader writes its record and
        every one queued (one write), fsyncs, and keeps the role through the fsync, so what queues
        meanwhile becomes the next batch (LevelDB's writer queue)."""
        mine = None
        with self._wq_mutex:
            if self._wq_expected:
                self._wq_expected -= 1
                if not self._wq_expected and self._wq_gate is not None:
                    self._wq_gate.release()
                    self._wq_gate = None
            if self._wq_busy:
                mine = _Pending(data, flags)
                self._wq.append(mine)
            else:
                self._wq_busy = True
        if mine is not None:
            try:
                mine.wake.acquire()  # released once: written (or failed) by a leader, or made leader
            except BaseException:
                self._leave_queue(mine)  # (KeyboardInterrupt while waiting: pass the role on)
                raise
            if not mine.lead:
                if mine.error is not None:
                    raise self._batch_error(mine.error)
                return mine.lsn
        batch: list[_Pending] = []
        first = -1
        end = -1  # the batch's lsns below this are in the log; the rest failed with ``error``
        error: BaseException | None = None
        try:
            if self._wq_expected:
                self._gather()
            with self._lock:
                try:
                    first = self._write_one_locked(data, flags, batch)
                    end = first + 1 + len(batch)
                except AppendError as err:
                    # A batch that met a rotation is written segment by segment: the part written
                    # before the failure stays, and its appends succeed once it is durable.
                    if not batch or self._next_lsn <= self._batch_first:
                        raise
                    first, end, error = self._batch_first, self._next_lsn, err
            self._await_durable(end)
        except BaseException as err:
            error, end = err, -1  # (an fsync that failed: none of the batch is acknowledged)
            raise
        finally:
            self._pass_write_role(batch, first, end, error)
        if self._retention_due:
            self._retain_after_rotation()
        return first

    def _gather(self) -> None:
        """With the write role, before writing: wait for the threads of the batch just
        acknowledged to queue again, for at most the recent cost of an fsync. A batch that
        starts at once holds only the threads that queued during the last fsync, and the ones
        that fsync acknowledged wait through the next one: batches alternate between halves of
        the threads. Waiting less than an fsync for them puts them all in one. A thread that
        does not come back costs one wait; the count starts again from the next batch."""
        wait = min(self._syncer.fsync_cost_s, limits.GATHER_WAIT_S_MAX)
        with self._wq_mutex:
            if not self._wq_expected or wait <= 0.0:
                self._wq_expected = 0
                return
            gate = self._wq_gate = threading.Lock()
            gate.acquire()
        try:
            gate.acquire(timeout=wait)
        finally:
            with self._wq_mutex:
                self._wq_gate = None
                self._wq_expected = 0

    def _leave_queue(self, mine: _Pending) -> None:
        """A queued append interrupted while waiting: out of the queue if it is still there;
        else a leader has it, in a batch (its record goes out; the caller is told nothing) or as
        the next leader, and then the role is passed on, so the other threads are not stranded."""
        with self._wq_mutex:
            if mine in self._wq:
                self._wq.remove(mine)
                return
        mine.wake.acquire()  # soon: the leader releases it right after its write and fsync
        if mine.lead:
            self._pass_write_role([], -1, -1, None)

    def _pass_write_role(
        self, batch: list[_Pending], first: int, end: int, error: BaseException | None
    ) -> None:
        """Wake the next queued thread as leader (first, so its write starts at once), then the
        appends of ``batch`` (lsns from ``first + 1``): those below ``end`` with their lsn, the
        others with ``error``."""
        with self._wq_mutex:
            leader = None
            if first >= 0:  # the threads this batch acknowledges (this one too) may append again
                self._wq_expected = len(batch) + 1
            if self._wq:
                leader = self._wq.pop(0)
                leader.lead = True
            else:
                self._wq_busy = False
        if leader is not None:
            leader.wake.release()
        for i, pending in enumerate(batch, start=first + 1):
            if i < end:
                pending.lsn = i
            else:
                pending.error = error or AssertionError("a queued append was not written")
            pending.wake.release()

    def _batch_error(self, err: BaseException) -> BaseException:
        """The error for an append that was queued in a batch whose write or fsync failed (a new
        exception per thread, so their tracebacks do not mix)."""
        if isinstance(err, ClosedError):  # FailedError included: the handle is stopped
            return type(err)(self.path, f"the batch holding this append failed: {err.reason}")
        reason = err.reason if isinstance(err, AppendError) else repr(err)
        return AppendError(self.path, f"written in one batch with other threads' appends: {reason}")

    def append_many(self, payloads: Iterable[bytes]) -> list[int]:
        """Append records in order under one lock hold and one fsync; return their lsns.

        All or nothing on error: if the write fails, none of the batch stays in the log, before
        or after a reopen. (A batch is written into one segment with one write: if it
        does not fit in the active segment, that one is sealed first; a batch larger than a
        segment gets a segment of its own. ValueError if it is larger than a segment may be.)
        Durability and concurrency as ``append``.
        """
        items = _checked_payloads(payloads, self.record_size_max)
        if not items:
            return []
        flags = self._compress(items)
        with self._writer_locked(None):
            self._catch_up()
            first = self._write_records(items, flags)
        if self.durability == "always":
            self._await_durable(first + len(items))
        if self._retention_due:
            self._retain_after_rotation()
        return list(range(first, first + len(items)))

    def _compress(self, items: list[bytes]) -> list[int] | None:
        """Compress ``items`` in place where that makes them smaller; their record flags, or None
        if the log is not compressed (all flags 0)."""
        compressor = self._compressor
        if compressor is None:
            return None
        compress = compressor.function()
        flags = [0] * len(items)
        for i, item in enumerate(items):
            packed = compress(item)
            if len(packed) < len(item):
                items[i], flags[i] = packed, fmt.FLAG_ZSTD
        return flags

    def _write_records(
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
        size_max = self.meta.segment_size_max - fmt.RECORD_OVERHEAD
        interval = self.meta.index_interval
        now = time.time_ns()
        ts = now if now > self._last_ts else self._last_ts  # timestamps never decrease
        if timestamp is not None:
            ts = timestamp  # (checked by the caller: not below the last)
        if now >= self._seg_deadline_ns:
            if self._seg_end > fmt.SEGMENT_HEADER_SIZE:
                self._rotate(ts)  # rotation by age
            else:
                self._set_segment_deadline(now)  # an empty segment's age starts with its first record
        durable = self._syncer.durable_lsn
        # A batch is written whole into one segment, with one pwrite, so that it is in the log
        # whole or not at all (a failed write is cut back): if it does not fit in the active
        # segment, that one is sealed first, and a batch larger than a segment gets a segment
        # of its own, larger than segment_size_max, as a single larger record does.
        if whole and self._seg_end + size > size_max and self._seg_end > fmt.SEGMENT_HEADER_SIZE:
            self._rotate(ts)
        first = self._next_lsn
        i = 0
        while i < count:  # bounded: each turn writes at least one record
            lsn = self._next_lsn
            offset = self._seg_end
            chunk: list[bytes] = []
            index: list[bytes] = []
            due = self._index_due
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
                self._index_due = due
                if index:
                    self._write_index_entry_bytes(b"".join(index))
                self._last_ts = ts
            if i < count:
                self._rotate(ts)
        return first

    def _write_at_end(self, data: bytes, what: str, *, grow: bool = True) -> None:
        """Write ``data`` at the end of the active segment's records (into the zeros preallocated
        there; ``grow=False``: preallocate no more), or leave the segment as it was."""
        end = self._seg_end
        try:
            if grow and end + len(data) > self._alloc_end:
                self._alloc_end = self._preallocate(self._seg_fd, end, end + len(data))
            self._fs.pwrite(self._seg_fd, data, end)
        except OSError as err:
            # Part of it may be in the file. Cut it back so that nothing partial is ever
            # visible; if even that fails, stop (the next writer's catch-up cuts the torn tail).
            try:
                self._cut_active(self._seg_end)
            except OSError as err2:
                self._fail(err2)
                raise FailedError(self.path, f"{what} failed ({err}), not undone ({err2})") from err
            raise AppendError(self.path, f"{what}: {err}") from err

    def _preallocate(self, fd: int, end: int, need: int) -> int:
        """Make segment ``fd`` at least ``need`` bytes long (zeros past its records, which end at
        ``end``), and some more: up to PREALLOCATE_SIZE past ``end``, within the segment's size
        limit. Returns how long it now is for sure. If the space cannot be had (ENOSPC, or a file
        system without fallocate), nothing is preallocated: the write appends, as it would
        without preallocation, and meets the error itself if there is one."""
        target = max(need, min(end + limits.PREALLOCATE_SIZE, self.meta.segment_size_max))
        try:
            self._fs.allocate(fd, end, target - end)
        except OSError:
            return end
        return target

    def _write_chunk(self, data: bytes, end: int, next_lsn: int, last_size: int) -> None:
        """Write records ``data``, which end at ``end`` (the last of them ``last_size`` bytes
        long), the next lsn after them ``next_lsn``."""
        self._write_at_end(data, "writing records")
        self._seg_end = end
        self._next_lsn = next_lsn
        self._mark_written()
        if not self._single:
            self._syncer.publish_tail(self._seg_base, end - last_size, next_lsn - 1, end)

    def _write_index_entry_bytes(self, data: bytes) -> None:
        if not self._index_ok:
            return
        try:
            self._fs.write(self._idx_fd, data)
        except OSError:
            # The index is derived data: a failed entry only makes lookups scan further. Stop
            # indexing this segment from this handle; recovery rebuilds the index on next open.
            self._index_ok = False

    def _rotate(self, ts: int = 0) -> None:
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
            ts = now if now > self._last_ts else self._last_ts
        seal = fmt.encode_record(self._next_lsn, ts, self._syncer.durable_lsn, b"", fmt.FLAG_SEAL)
        if self._fs.size(self._seg_fd) > self._seg_end:
            # A sealed segment ends with its seal: cut the preallocated zeros first (nothing of
            # ours is there, so the sync mark, which never passes the records, stays as it is).
            try:
                self._fs.truncate(self._seg_fd, self._seg_end)
            except OSError as err:
                raise AppendError(self.path, f"sealing the segment: {err}") from err
            self._alloc_end = self._seg_end
        self._write_at_end(seal, "sealing the segment", grow=False)
        self._seg_end += len(seal)
        # The records after the seal are not stamped before it, nor before the next segment's
        # creation time, even if the wall clock steps back meanwhile (FORMAT.md §4.3).
        self._last_ts = max(self._last_ts, ts)
        # fsynced whatever the durability (one fsync a segment): a handle with durability
        # "always" elsewhere counts on every segment before the sync mark's being durable.
        self._sync_segment_for_rotation()
        try:
            created = self._create_segment(self._next_lsn, ts)
            self._switch_to(self._next_lsn)
        except OSError as err:
            # The seal is durable and the next segment may be missing or half-made: the next
            # append recovers first (as an opening writer would: it creates the segment).
            self._needs_recovery = True
            raise AppendError(self.path, f"starting segment {self._next_lsn}: {err}") from err
        if not created:
            self._catch_up()  # (left by a crash mid-creation: it holds no record, but make sure)
        self._set_segment_deadline(ts)  # (if the segment existed, its own time is close enough)
        self._mark_written()
        self._retention_due = True  # applied once the locks are released

    def _mark_written(self) -> None:
        """After a write or catch-up under the writer lock: what the next fsync must cover."""
        self._written = (self._seg_fd, self._next_lsn, self._seg_base, self._seg_end)

    # --- fsync and the sync mark (the protocol itself is _sync.Syncer's) --------------------------
    def _cut_active(self, offset: int) -> None:
        """Under the writer lock: truncate the active segment at ``offset``, with the sync mark
        lowered to it before and after (FORMAT.md §8.1). After as well: a leader in another
        handle may have measured the size, cut bytes included, before the truncate, and raised
        the mark over them after the first lowering; the next record written there would then be
        acknowledged without an fsync (tests/crash/test_group_commit.py)."""
        self._syncer.lower(self._seg_base, offset)
        self._syncer.clear_tail()  # (it may name a record cut here)
        self._alloc_end = offset
        self._fs.truncate(self._seg_fd, offset)
        self._syncer.lower(self._seg_base, offset)

    def _sync_segment_for_rotation(self) -> None:
        """fsync the active segment (and its index) whole, as the syncer, then mark it durable."""
        syncer = self._syncer
        syncer.take_role()
        synced = 0
        try:
            fds = (self._idx_fd,) if self._index_ok else ()
            syncer.sync_segment_through(
                self._seg_fd,
                self._seg_base,
                self._seg_end,
                self._next_lsn,
                *fds,
                single=self._single,
                gather=self._queued,
            )
            syncer.persist()  # (one a segment: the seal proves its segment whole)
            synced = self._next_lsn
        except OSError as err:
            self._fail(err)
            raise FailedError(self.path, f"fsync failed while sealing a segment: {err}") from err
        finally:
            syncer.leave_role(synced)

    # --- group commit -----------------------------------------------------------------------------
    def _await_durable(self, end: int) -> None:
        """Return once every lsn below ``end`` is fsynced, leading an fsync if none is under way.

        The leader reads what has been written *after* it takes the lead, so its fsync covers
        every write that completed before; followers that were covered return without an fsync.
        """
        if not self._syncer.await_durable(end, self._failure_now):
            return
        self._lead_sync()
        if self._syncer.synced_next < end:  # set by this thread in _lead_sync; only ever grows
            raise FailedError(self.path, f"log handle failed: {self._failure}")

    def _lead_sync(self) -> None:
        """Make everything written so far durable. Call with the sync role taken by the caller."""
        fd, written, base, end = self._written
        synced = 0
        try:
            if fd >= 0:
                self._syncer.sync_through(fd, base, end, written, single=self._single, gather=self._queued)
            synced = written
        except OSError as err:
            self._fail(err)
        finally:
            self._syncer.leave_role(synced)
        if self._failure is not None:
            raise FailedError(self.path, f"fsync failed: {self._failure}") from self._failure

    def sync(self) -> None:
        """Make every record this handle has written durable (fsync). Any thread."""
        if self.readonly:
            return
        self._check_usable()
        self._await_durable(self._written[1])

    def _flush_loop(self) -> None:
        """``"interval"`` durability: fsync what was written, at most every sync_interval_ms."""
        while not self._flusher_stop.wait(self._sync_interval_s):
            if self._failure is not None or self._closed:
                return
            if self._written[1] > self._syncer.synced_next:
                with contextlib.suppress(FailedError):
                    self._await_durable(self._written[1])  # failure is recorded in _failure

    # --- exclusive appends for state machines ------------------------------------------------------
    @contextlib.contextmanager
    def exclusive(
        self, timeout_s: float | None = None, *, sync: bool = True, idle: Callable[[], bool] | None = None
    ) -> Iterator[Tail]:
        """Hold the writer lock: no other thread or process appends until the block ends.

        The ``Tail`` says the next lsn; a state machine reads up to it, decides, and appends
        through ``tail.append`` knowing nobody appended in between. Durability as ``append``:
        with ``"always"`` the block's records are fsynced when it ends, before it returns. With
        ``sync=False`` the caller calls ``sync()`` itself (after releasing its own locks, so that
        its threads share one fsync). ``idle``: called while another process holds the lock
        (True if it did some work, such as reading what that process writes; else the wait
        sleeps a little before it looks again).
        """
        first = -1
        with self._writer_locked(timeout_s if timeout_s is not None else self._lock_timeout_s, idle):
            self._catch_up()
            first = self._next_lsn
            self._exclusive_owner = threading.get_ident()
            try:
                yield Tail(self)
            finally:
                self._exclusive_owner = None
        if sync and self.durability == "always" and self._next_lsn > first:
            self._await_durable(self._written[1])
        if self._retention_due:
            self._retain_after_rotation()

    # --- cutover ----------------------------------------------------------------------------------
    def cutover(self) -> int:
        """Seal the active segment and start the next one (BinLog's end-of-day cut).

        Returns the base lsn of the new segment. If the active segment holds no record, nothing is
        done and its base lsn is returned. Durability: the sealed segment is fsynced unless "os".
        Concurrency: any thread or process.
        """
        with self._writer_locked(self._lock_timeout_s):
            self._catch_up()
            if self._seg_end > fmt.SEGMENT_HEADER_SIZE:
                self._rotate()
            base = self._seg_base
        if self._retention_due:
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
        self._retention_due = False
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
        if self._closed:
            raise ClosedError(self.path)

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
        if bases:
            probe = Reader(self.path, self._fs, self.record_size_max, start=bases[-1])
            try:
                next_lsn = probe.skip_to_end()
            finally:
                probe.close()
        return LogInfo(
            path=self.path,
            first_lsn=bases[0] if bases else 0,
            next_lsn=next_lsn,
            size=sum(s.size for s in segments),
            segments=tuple(segments),
            meta=self.meta,
        )

    # --- closing ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the handle. With "interval" durability, fsync what is pending first. Idempotent."""
        if self._closed:
            return
        if self._flusher is not None:
            self._flusher_stop.set()
            self._flusher.join()
        if self.durability != "os" and self._failure is None and self._usable:
            with contextlib.suppress(FailedError):
                self._await_durable(self._written[1])
            with contextlib.suppress(OSError):
                # A clean close proves every record it acknowledged, after a power loss too. (A
                # failure here loses no record: the mark on disk just proves less.)
                self._syncer.persist()
        with self._lock:
            if self._usable:
                self._trim_zeros()
            self._closed = True
            self._usable = False
            if self._seg_fd >= 0 or self._idx_fd >= 0:
                self._close_segment_fds()
            self._syncer.close()
            if self._single and self._lock_fd >= 0:
                self._single = False
                self._fs.unlock(self._lock_fd)  # (explicitly: a forked child may share the fd)
            if self._lock_fd >= 0:
                self._fs.close(self._lock_fd)
            self._lock_fd = -1

    def _trim_zeros(self) -> None:
        """On close, under ``_lock``: cut the preallocated zeros after the records, so a closed log
        is as long as what it holds. Only if the writer flock is free now (else another writer is
        at work and its handle trims when it closes) and nobody wrote past this handle's end.
        Zeros left by a failure here are harmless: they read as "no record"."""
        fs = self._fs
        if self._seg_fd < 0:
            return
        if not self._single and not fs.lock(self._lock_fd, 0):
            return
        try:
            end = self._seg_end
            head = fs.pread(self._seg_fd, fmt.RECORD_HEADER_SIZE, end)
            if head and head.count(0) == len(head):
                fs.truncate(self._seg_fd, end)  # zeros only: the sync mark is below them
                self._alloc_end = end
        except OSError:
            pass
        finally:
            if not self._single:
                fs.unlock(self._lock_fd)

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<logspool.Log {self.path!r} durability={self.durability}>"


class Tail:
    """The writer's view inside ``Log.exclusive()``: appends that nobody can interleave with."""

    def __init__(self, log: Log) -> None:
        self._log = log

    @property
    def next_lsn(self) -> int:
        """The lsn the next append gets; every lsn below it is in the log."""
        return self._log._next_lsn

    @property
    def end(self) -> tuple[int, int]:
        """Where the next record goes: (base lsn of the active segment, offset in it)."""
        return self._log._seg_base, self._log._seg_end

    @property
    def timestamp(self) -> int:
        """The timestamp (ns) of the records appended last: one batch shares one timestamp."""
        return self._log._last_ts

    def append(self, payload: bytes) -> int:
        """Append one record; durable when the exclusive block ends (as ``Log.append``)."""
        return self.append_many((payload,))[0]

    def append_many(self, payloads: Iterable[bytes], *, timestamp: int | None = None) -> list[int]:
        """Append records in order; durable when the exclusive block ends. ``timestamp`` (ns since
        the epoch): the records' timestamp, for a caller that had to know it before writing
        (at least ``self.timestamp``: timestamps never decrease); by default, now."""
        items = _checked_payloads(payloads, self._log.record_size_max)
        if timestamp is not None and (
            not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < self._log._last_ts
        ):
            raise ValueError(
                f"timestamp must be an integer of ns not below the last record's ({self._log._last_ts}), "
                f"not {timestamp!r}"
            )
        if not items:
            return []
        flags = self._log._compress(items)
        first = self._log._write_records(items, flags, timestamp)
        return list(range(first, first + len(items)))

    def check(self, payloads: Iterable[bytes]) -> list[bytes]:
        """The payloads as bytes if ``append_many`` would take them (else its TypeError or
        RecordTooLargeError), without writing anything."""
        return _checked_payloads(payloads, self._log.record_size_max)


def open(path: str | os.PathLike[str], **options: object) -> Log:
    """Open (and by default create) the log at ``path``. Options are those of ``Log``."""
    return Log(path, **options)  # type: ignore[arg-type]
