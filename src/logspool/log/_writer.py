"""The write path of one handle: a single append, a batch, the threads' write queue and its
gathering, group commit within the process, the flush thread (FORMAT.md §7 steps 1-6), and
``Tail``, the appends of a state machine inside ``Log.exclusive()``.

A single ``append`` (``durability`` "os" or "interval") takes the writer lock, catches up with a
one-header read, frames and writes its record in place, publishes the tail hint, and unlocks.
With "always" it goes through the **write queue**: one thread at a time has the write role and
writes its record with every one queued behind it (one pwrite), then waits for the fsync that
covers them (``await_durable``: one thread leads it, the others are covered by it); a batch
that starts at once would hold only half of the threads, so the leader first waits, for at
most the recent cost of an fsync, for the threads the last batch acknowledged (gathering).

Invariants:

- An append is acknowledged (its lsn returned) only after its record is written whole and,
  with "always", after an fsync that began after the write completed has returned.
- A queued append is woken exactly once: with its lsn, with an error, or to take the write
  role (``_Pending.lead``). The role is passed on in every outcome, interruptions included,
  so no queued thread is stranded.
- A batch of the queue that met a rotation is written segment by segment: the part written
  before a failure stays, and its appends succeed once it is durable; the rest fail. An fsync
  that fails acknowledges none of the batch, and stops the handle (``HandleState.fail``).
- ``append_many`` is all or nothing (``ActiveSegment.write_records(whole=True)``): after a
  failed write; a reader may see its first records while it is copied in. ``Tail.append_batch``
  is all or nothing for readers and crashes too (``ActiveSegment.write_batch``).
- ``exclusive_owner`` (under the writer lock) names the thread inside ``Log.exclusive()``;
  its own appends through the Log are refused there (they would wait on themselves).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from .. import _codec, limits
from .. import _format as fmt
from .._fs import FileSystem
from ..errors import AppendError, ClosedError, FailedError, RecordTooLargeError
from ._active import ActiveSegment, BatchStart, Framed, _Locked
from ._handle import HandleState
from ._sync import Syncer

_ZERO_HEADER = bytes(fmt.RECORD_HEADER_SIZE)  # what a writer finds at its end when nobody wrote
# The hot path's framing and clock, looked up once (``fmt.encode_record``, written out: a call
# fewer per append; tests/golden/test_spec_decoder.py reads what it writes with the spec's decoder).
_pack_header = fmt.RECORD_HEADER.pack
_pack_trailer = fmt.RECORD_TRAILER.pack
_crc32 = fmt.crc32
_time_ns = time.time_ns


def checked_payloads(payloads: Iterable[object], size_max: int) -> list[bytes]:
    """The payloads as bytes, after checking every type and size (before anything is written)."""
    items = [p if type(p) is bytes else _as_bytes(p) for p in payloads]
    if items and max(map(len, items)) > size_max:
        raise RecordTooLargeError(next(n for n in map(len, items) if n > size_max), size_max)
    return items


def _check_timestamp(timestamp: int | None, last_ts: int) -> None:
    """A batch's given timestamp (ns since the epoch): an integer not below the last record's
    (timestamps never decrease); ValueError otherwise. None: now, stamped by the writer."""
    if timestamp is not None and (
        not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < last_ts
    ):
        raise ValueError(
            f"timestamp must be an integer of ns not below the last record's ({last_ts}), not {timestamp!r}"
        )


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


class Writer:
    """The write path of one handle. Any thread (the methods take the locks they need)."""

    def __init__(
        self,
        fs: FileSystem,
        active: ActiveSegment,
        catch_up: Callable[[bytes | None], None],
        syncer: Syncer,
        handle: HandleState,
        *,
        durability: str,
        compression_level: int | None,
        sync_interval_s: float,
        after_rotation: Callable[[], None],
    ) -> None:
        self._fs = fs
        self._path = handle.path
        self._active = active
        # The real file system's pwrite, called directly on the hot path (the seam's method adds
        # only a call); None when the seam is a subclass, so that an injected fault is met.
        self._os_pwrite = os.pwrite if type(fs).pwrite is FileSystem.pwrite else None
        self._catch_up = catch_up
        self._syncer = syncer
        self._handle = handle
        self._size_max = active.size_max
        self._durability = durability
        self._queued = durability == "always"
        self._after_rotation = after_rotation  # called once the locks are released
        # Set when the log was created with compression: payloads are compressed before the lock
        # is taken, and stored compressed when that makes them smaller (docs/FORMAT.md §4.4).
        self._compressor: _codec.Compressor | None = None
        if compression_level is not None:
            self._compressor = _codec.Compressor(compression_level)
        self.exclusive_owner: int | None = None  # under the writer lock
        # The write queue (threads of this handle appending at once; see append): one thread has
        # the write role (``_wq_busy``), the others wait in ``wq`` to be written by it.
        self._wq_mutex = threading.Lock()
        self.wq: list[_Pending] = []
        self._wq_busy = False
        # Gathering (docs/DESIGN.md, "the write queue gathers"): the threads of the batch just
        # acknowledged that have not appended again yet, and the gate a leader waits on for them
        # (released by the last to come back), for at most the fsync's recent cost.
        self._wq_expected = 0
        self._wq_gate: threading.Lock | None = None
        self._batch_first = -1  # under the writer lock: the first lsn of the batch being written
        self._sync_interval_s = sync_interval_s
        self._flusher: threading.Thread | None = None
        self._flusher_stop = threading.Event()

    # --- one record -------------------------------------------------------------------------------
    def append(self, payload: bytes) -> int:
        """``Log.append``: one record; its lsn (durable on return with "always")."""
        data = payload if type(payload) is bytes else _as_bytes(payload)
        if len(data) > self._size_max:
            raise RecordTooLargeError(len(data), self._size_max)
        flags = 0
        if self._compressor is not None:
            packed = self._compressor.compress(data)
            if packed is not None:
                data, flags = packed, fmt.FLAG_ZSTD
        if not self._handle.usable:  # before the queue: a forked child must not wait on its parent's
            self._handle.check_usable()
        if self.exclusive_owner is not None:
            self.refuse_inside_exclusive()
        if self._queued:
            return self._append_queued(data, flags)
        active = self._active
        lock = active.lock
        lock.acquire()  # (not ``with``: half its cost, on the hot path)
        try:
            lsn = self._write_one_locked(data, flags, ())
        finally:
            lock.release()
        if active.rotated:
            self._after_rotation()
        return lsn

    def _write_one_locked(self, data: bytes, flags: int, batch: list[_Pending] | tuple[()]) -> int:
        """Under the thread lock: take the flock, catch up, write ``data`` (then the payloads
        queued in ``batch``, which the caller fills under the flock if it passes a list); the
        first lsn.

        The hot path, written out: the same steps as ``locked`` + ``write_records``, without a
        generator or a list per call (docs/DESIGN.md, "append cost"). Everything that is not a
        plain record in the middle of a segment (a rotation, an index entry, a batch) goes the
        long way.
        """
        handle = self._handle
        if not handle.usable:
            handle.check_usable()
        fs = self._fs
        a = self._active
        single = a.single
        held = a.held  # (a hold: nobody else has written since this handle's last write)
        mine = single or held  # the flock is this handle's already: nobody else wrote
        waited = False if mine else a.take_flock()
        try:
            if handle.on_write is not None:  # (as ``ActiveSegment.locked`` does, once the flock is held)
                handle.on_write()
            if a.needs_recovery:
                self._catch_up(None)
            elif not mine:
                head = fs.pread(a.fd, fmt.RECORD_HEADER_SIZE, a.end)
                if head != _ZERO_HEADER:
                    self._catch_up(head)
            if self.wq and type(batch) is list:  # (a hint; taken under the mutex)
                with self._wq_mutex:
                    batch.extend(self.wq)
                    self.wq.clear()
            offset = a.end
            now = _time_ns()
            if batch:
                self._batch_first = a.next_lsn
                lsn = a.write_records(
                    [data, *(p.data for p in batch)], [flags, *(p.flags for p in batch)], whole=False
                )
            elif offset + len(data) > a.plain_end_max or offset >= a.index_due or now >= a.deadline_ns:
                lsn = a.write_records((data,), (flags,))
            else:
                lsn = a.next_lsn
                ts = now if now > a.last_ts else a.last_ts
                body = _pack_header(len(data), flags, lsn, ts, self._syncer.durable_lsn) + data
                rec = body + _pack_trailer(_crc32(body))  # (fmt.encode_record)
                end = offset + len(rec)
                if end > a.alloc_end:
                    a.write_at_end(rec, "writing records")
                else:  # (write_at_end, written out: the zeros are there already)
                    pwrite = self._os_pwrite
                    try:  # (a short write is written again whole, through the seam)
                        if pwrite is None or pwrite(a.fd, rec, offset) != len(rec):
                            fs.pwrite(a.fd, rec, offset)
                    except OSError as err:
                        raise a.undo_write(err, "writing records") from err
                a.end = end
                a.next_lsn = lsn + 1
                a.written = (a.fd, lsn + 1, a.base, end)
                a.last_ts = ts
                if not single:
                    self._syncer.publish_tail(a.base, offset, lsn, end)
        except BaseException:
            if held:
                a.end_hold()
            elif not single:
                fs.unlock(a.lock_fd)
            raise
        if held:
            a.writes += 1
            if self._syncer.writer_lock_wanted():
                a.end_hold(pause=True)
        elif not single:
            a.after_write(waited)
        return lsn

    # --- the write queue --------------------------------------------------------------------------
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
                self.wq.append(mine)
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
        active = self._active
        try:
            if self._wq_expected:
                self._gather()
            with active.lock:
                try:
                    first = self._write_one_locked(data, flags, batch)
                    end = first + 1 + len(batch)
                except AppendError as err:
                    # A batch that met a rotation is written segment by segment: the part written
                    # before the failure stays, and its appends succeed once it is durable.
                    if not batch or active.next_lsn <= self._batch_first:
                        raise
                    first, end, error = self._batch_first, active.next_lsn, err
            self.await_durable(end)
        except BaseException as err:
            error, end = err, -1  # (an fsync that failed: none of the batch is acknowledged)
            raise
        finally:
            self._pass_write_role(batch, first, end, error)
        if active.rotated:
            self._after_rotation()
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
            if mine in self.wq:
                self.wq.remove(mine)
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
            if self.wq:
                leader = self.wq.pop(0)
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
            return type(err)(self._path, f"the batch holding this append failed: {err.reason}")
        reason = err.reason if isinstance(err, AppendError) else repr(err)
        return AppendError(self._path, f"written in one batch with other threads' appends: {reason}")

    # --- batches and exclusive writes ---------------------------------------------------------------
    def append_many(self, payloads: Iterable[bytes]) -> list[int]:
        """``Log.append_many``: records in order, all or nothing; their lsns."""
        items = checked_payloads(payloads, self._size_max)
        if not items:
            return []
        flags = self.compress(items)
        active = self._active
        with self.locked(None):
            self._catch_up(None)
            first = active.write_records(items, flags)
        if self._queued:
            self.await_durable(first + len(items))
        if active.rotated:
            self._after_rotation()
        return list(range(first, first + len(items)))

    def append_alone(
        self, payloads: list[bytes], ready: Callable[[int, int, int], bool]
    ) -> tuple[int, int, int] | None:
        """``Log.append_alone``."""
        active = self._active
        if not active.single or active.needs_recovery or self.exclusive_owner is not None:
            return None
        items = checked_payloads(payloads, self._size_max)
        if not items:
            return None
        flags = self.compress(items)
        size = sum(map(len, items)) + len(items) * fmt.RECORD_OVERHEAD
        with self.locked(None):
            base, start = active.base, active.end
            # (no rotation, by size or by age: ``write_records`` would rotate for either)
            if (
                start + size > active.segment_size_max - fmt.RECORD_OVERHEAD
                or _time_ns() >= active.deadline_ns
            ):
                return None
            if not ready(base, start, active.next_lsn):
                return None
            active.write_records(items, flags)
            done = active.last_ts, active.base, active.end
        if active.rotated:  # (the clock passed the deadline since the look above: rotated by age)
            self._after_rotation()
        return done

    @property
    def compressor(self) -> _codec.Compressor | None:
        """The log's compressor, or None if the log is not compressed."""
        return self._compressor

    def compress(self, items: list[bytes]) -> list[int] | None:
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

    def locked(self, timeout_s: float | None, idle: Callable[[], bool] | None = None) -> _Locked:
        """``with writer.locked(...)``: the writer lock (``ActiveSegment.locked``), refused to the
        thread inside ``exclusive()``, which holds it already."""
        if self.exclusive_owner is not None:
            self.refuse_inside_exclusive()
        return self._active.locked(timeout_s, idle)

    def refuse_inside_exclusive(self) -> None:
        if self.exclusive_owner == threading.get_ident():
            raise RuntimeError("append through the Tail given by exclusive(), not the Log, inside it")

    # --- group commit -----------------------------------------------------------------------------
    def await_durable(self, end: int, gather: bool = True, wait: bool = True) -> bool:
        """Return once every lsn below ``end`` is fsynced, leading an fsync if none is under way.

        The leader reads what has been written *after* it takes the lead, so its fsync covers
        every write that completed before; followers that were covered return without an fsync.
        ``gather``: as ``Log.sync``'s (for the fsync this thread leads, if it leads one).
        ``wait=False``: False instead of waiting for another thread's fsync or another
        process's (``Log.sync``); True: durable.
        """
        lead = self._syncer.await_durable(end, self._handle.failure_now, wait)
        if lead is None:
            return False
        if not lead:
            return True
        if not self._lead_sync(gather and wait, wait):
            return False
        if self._syncer.synced_next < end:  # set by this thread in _lead_sync; only ever grows
            raise FailedError(self._path, f"log handle failed: {self._handle.failure}")
        return True

    def _lead_sync(self, gather: bool = True, wait: bool = True) -> bool:
        """Make everything written so far durable. Call with the sync role taken by the caller.
        ``gather``: the fsync may first wait for the other writers' records (``Log.sync``).
        False, nothing done, only with ``wait=False`` (another process's fsync is under way)."""
        fd, written, base, end = self._active.written
        synced = 0
        done = True
        try:
            if fd >= 0:
                single = self._active.single
                done = self._syncer.sync_through(
                    fd, base, end, written, single=single, gather=gather and self._queued, wait=wait
                )
            if done:
                synced = written
        except OSError as err:
            self._handle.fail(err)
        finally:
            self._syncer.leave_role(synced)
        failure = self._handle.failure
        if failure is not None:
            raise FailedError(self._path, f"fsync failed: {failure}") from failure
        return done

    def sync(self, gather: bool = True, wait: bool = True) -> bool:
        """``Log.sync``: every record this handle has written, durable on return (True), or,
        with ``wait=False``, False if that would wait for another thread or process."""
        if not self._handle.usable:  # (one flag: check_usable's fork test is a getpid call)
            self._handle.check_usable()
        return self.await_durable(self._active.written[1], gather, wait)

    # --- the flush thread ("interval") -----------------------------------------------------------
    def start_flusher(self) -> None:
        self._flusher = threading.Thread(
            target=self._flush_loop, name=f"logspool-sync:{self._path}", daemon=True
        )
        self._flusher.start()

    def _flush_loop(self) -> None:
        """``"interval"`` durability: fsync what was written, at most every sync_interval_ms."""
        handle = self._handle
        while not self._flusher_stop.wait(self._sync_interval_s):
            if handle.failure is not None or handle.closed:
                return
            if self._active.written[1] > self._syncer.synced_next:
                with contextlib.suppress(FailedError):
                    self.await_durable(self._active.written[1])  # failure is recorded in the handle

    def close(self) -> None:
        """Before the files close: stop the flush thread, and (durability not "os") make what was
        written durable, with the sync mark (a clean close proves every record it acknowledged,
        after a power loss too)."""
        if self._flusher is not None:
            self._flusher_stop.set()
            self._flusher.join()
        handle = self._handle
        if self._durability != "os" and handle.failure is None and handle.usable:
            with contextlib.suppress(FailedError):
                self.await_durable(self._active.written[1])
            with contextlib.suppress(OSError):
                # (A failure here loses no record: the mark on disk just proves less.)
                self._syncer.persist()


_ROOM_AGE_NS = 1_000_000_000  # ``Tail.room``: a segment due by age within this has no room


class Tail:
    """The writer's view inside ``Log.exclusive()``: appends that nobody can interleave with."""

    def __init__(self, active: ActiveSegment, writer: Writer) -> None:
        self._active = active
        self._writer = writer

    @property
    def next_lsn(self) -> int:
        """The lsn the next append gets; every lsn below it is in the log."""
        return self._active.next_lsn

    @property
    def end(self) -> tuple[int, int]:
        """Where the next record goes: (base lsn of the active segment, offset in it)."""
        return self._active.base, self._active.end

    @property
    def timestamp(self) -> int:
        """The timestamp (ns) of the records appended last: one batch shares one timestamp."""
        return self._active.last_ts

    def room(self) -> int:
        """How many bytes of records (each payload with its ``fmt.RECORD_OVERHEAD``) the active
        segment takes before an append rotates it; 0 if it is due for rotation by age within
        ``_ROOM_AGE_S``. A rotation fsyncs the segment it seals, under the sync file's lock, which
        another process holds through each of its fsyncs: a caller that must not wait (a
        daemon's event loop) checks this before it appends, and leaves larger writes to a
        thread."""
        a = self._active
        if a.end > fmt.SEGMENT_HEADER_SIZE and time.time_ns() + _ROOM_AGE_NS >= a.deadline_ns:
            return 0
        return max(0, a.segment_size_max - fmt.RECORD_OVERHEAD - a.end)

    def append(self, payload: bytes) -> int:
        """Append one record; durable when the exclusive block ends (as ``Log.append``)."""
        return self.append_many((payload,))[0]

    def append_many(self, payloads: Iterable[bytes], *, timestamp: int | None = None) -> list[int]:
        """Append records in order; durable when the exclusive block ends. ``timestamp`` (ns since
        the epoch): the records' timestamp, for a caller that had to know it before writing
        (at least ``self.timestamp``: timestamps never decrease); by default, now."""
        items = checked_payloads(payloads, self._active.size_max)
        _check_timestamp(timestamp, self._active.last_ts)
        if not items:
            return []
        flags = self._writer.compress(items)
        first = self._active.write_records(items, flags, timestamp)
        return list(range(first, first + len(items)))

    def append_batch(
        self, chunks: Iterable[Sequence[bytes]], *, size: int, timestamp: int | None = None
    ) -> range:
        """Append the payloads of ``chunks`` (sequences of payloads, in order) as one batch that
        every reader, in any process, sees at once or not at all, and that a crash (of the
        process, or a power loss) leaves whole or absent (FORMAT.md §7.1). Returns its lsns.

        ``size``: at most how many bytes the framed records take (the payloads' bytes plus
        ``RECORD_OVERHEAD`` each), known before the first is written: the batch goes into one
        segment (the active one is sealed first if it would not fit; a larger batch has a
        segment of its own), up to 4 GiB. ValueError if the records take more, TypeError or
        RecordTooLargeError for a payload (checked chunk by chunk): nothing is appended then.
        Memory: one chunk at a time. Durability: the batch's records are fsynced before it is
        published (one fsync more than ``append_many``); the write that publishes it is made
        durable as any append is, when the exclusive block ends with "always" or by ``sync``.
        ``timestamp``: as ``append_many``."""
        _check_timestamp(timestamp, self._active.last_ts)
        size_max = self._active.size_max
        compress = self._writer.compress

        def prepare(chunk: Sequence[bytes]) -> tuple[list[bytes], list[int] | None]:
            if type(chunk) is list and all(type(p) is bytes for p in chunk):  # (the usual case)
                items = list(chunk)  # (compress replaces items in place: not the caller's list)
                if max(map(len, items), default=0) > size_max:
                    raise RecordTooLargeError(max(map(len, items)), size_max)
            else:
                items = checked_payloads(chunk, size_max)
            return items, compress(items)

        first = self._active.write_batch(chunks, size, prepare, timestamp)
        return range(first, self._active.next_lsn)

    @property
    def compressed(self) -> bool:
        """The log stores payloads compressed where that makes them smaller (``append_framed``
        frames plain records only: a compressed log takes ``append_batch``)."""
        return self._writer.compressor is not None

    def append_framed(
        self, frame: Callable[[BatchStart], Iterable[Framed]], *, size: int, timestamp: int | None = None
    ) -> range:
        """As ``append_batch`` (one batch, seen at once or not at all, whole or absent after a
        crash: FORMAT.md §7.1), for records the caller frames itself: ``frame`` is called once
        under the writer lock with where the batch starts (its first lsn, timestamp, durable
        mark, offset and index position) and yields blocks of plain records framed as
        ``fmt.encode_record`` frames them, each with the index entries it owes (§5.2): the log
        writes them as they are, after checking each block's first and last record. ``size``:
        at most how many bytes they take, as for ``append_batch``. So a caller that frames many
        records at once (the Spark commit, with numpy) writes the bytes ``append_batch`` would,
        without a Python step per record. Not for a compressed log (ValueError). Durability and
        ``timestamp``: as ``append_batch``."""
        if self.compressed:
            raise ValueError("append_framed frames plain records; this log is compressed: use append_batch")
        _check_timestamp(timestamp, self._active.last_ts)
        first = self._active.write_framed(size, frame, timestamp)
        return range(first, self._active.next_lsn)

    def check(self, payloads: Iterable[bytes]) -> list[bytes]:
        """The payloads as bytes if ``append_many`` would take them (else its TypeError or
        RecordTooLargeError), without writing anything."""
        return checked_payloads(payloads, self._active.size_max)
