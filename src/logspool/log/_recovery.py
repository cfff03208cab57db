"""Finding the end of the log: recovery when a writer opens it, and the catch-up before each
write with what other processes appended (FORMAT.md §7 step 1, §8.1's tail hint, §9).

Both run under the writer lock and leave the ``ActiveSegment``'s view (``end``, ``next_lsn``,
``last_ts``, ``index_due``; the syncer's ``durable_lsn``) exactly what a parse of every record
of the newest segment would leave, with its index agreeing with its records.

Invariants relied on:

- Only the newest segment is examined on open (open costs O(newest segment), in chunks of at
  most ``_SCAN_CHUNK``: memory stays flat). Older segments are sealed, fsynced, and the sync
  mark proves them: damage there is for readers, ``verify`` and ``repair`` to report.
- Within the boot named in the sync file, the last index entry vouches for every record before
  it (its writer wrote them, in order, before the entry, and the page cache loses nothing until
  the power goes), so recovery may start there (the *trusted start*). After a reboot it reads
  the segment whole, and then records the running boot.
- A tail is cut only when nothing proves it durable (the sync mark, a later durable_lsn, or,
  within the boot, a valid record after it: ``_segment.judge_damage``); its non-zero bytes are
  copied to ``quarantine/`` first, and the sync mark is lowered before and after the cut.
- Zeros after the records are preallocated space: kept (the next record goes there), except
  after a seal (a sealed segment ends with its seal).
- A catch-up trusts a zero header at its end offset (nobody wrote), then the tail hint if the
  record it names checks out, then the records it parses; a file shorter than its end means a
  cut by someone else: it recovers again.
- After recovery the bytes past the sync mark are written again unchanged (fsyncgate: a page
  a failed fsync left marked clean is made dirty again), and a handle whose durability is not
  ``"os"`` fsyncs the segment, so the durable_lsn it writes into later records is true.
"""

from __future__ import annotations

import logging
import os
import time

from .. import _format as fmt
from .. import _quarantine as quarantine
from .. import _segment as seg
from .._fs import FileSystem
from ..errors import AppendError, CorruptionError
from ._active import ActiveSegment
from ._directory import index_path, list_segments, segment_path
from ._sync import Syncer, proven_text

_logger = logging.getLogger("logspool")
_ZERO_HEADER = bytes(fmt.RECORD_HEADER_SIZE)  # what a writer finds at its end when nobody wrote
_CATCH_UP_READ = 4096  # what a catch-up reads at least (one syscall for a few records)
_SCAN_CHUNK = seg.SCAN_CHUNK  # what recovery and catch-up read at most at once (unless a record is longer)


class _PassedByRetention(Exception):
    """A catch-up crossed a seal into a segment that retention removed, and later segments
    exist (``Recovery._scan_from``): the handle was behind by more than the log keeps."""


class Recovery:
    """Recovery and catch-up for one writer handle, over its ``ActiveSegment``. Called under
    the writer lock only."""

    def __init__(
        self, fs: FileSystem, root: str, active: ActiveSegment, syncer: Syncer, *, durability: str
    ) -> None:
        self._fs = fs
        self._root = root
        self._active = active
        self._syncer = syncer
        self._size_max = active.size_max
        self._durability = durability
        # Whether the last recovery ran in the boot that wrote the newest segment's bytes.
        self._recovered_same_boot = False

    def recover(self) -> None:
        """Under the writer lock: find the newest segment, check its records, cut a torn tail.

        Reads the newest segment in chunks of at most _SCAN_CHUNK bytes (memory flat in its
        size). Within the boot in which a writer last recovered the log, the scan starts at the
        record of the index's last entry (FORMAT.md §9: what the page cache holds cannot have
        lost a byte): reopening costs the records appended since that entry, not the segment.
        After a reboot, or when that record does not check out, it reads the segment whole.
        """
        a = self._active
        fs = self._fs
        bases = list_segments(fs, self._root)
        if not bases:
            a.create_segment(0, time.time_ns())
            bases = [0]
        base = bases[-1]
        path = segment_path(self._root, base)
        fd = fs.open(path, os.O_RDWR)
        try:
            header = self._checked_segment_header(fd, base)
            size = fs.size(fd)
        except BaseException:
            fs.close(fd)
            raise
        a.fd = fd
        a.base = base
        a.end = fmt.SEGMENT_HEADER_SIZE
        a.zeroed_end = 0
        a.next_lsn = base
        a.last_ts = header.created_ns
        a.set_deadline(header.created_ns)
        a.index_due = 0
        a.open_index()
        boot = fs.boot_id()
        same_boot = bool(boot) and self._syncer.boot() == boot
        self._recovered_same_boot = same_boot
        start = self._trusted_start(size) if same_boot else None
        index_pos = 0  # where the index entries the scan implies begin (0: the header too)
        if start is not None:
            offset, lsn, index_pos = start
            a.next_lsn, a.index_due = lsn, offset  # (the record there is due an entry)
        else:
            offset = fmt.SEGMENT_HEADER_SIZE
        data = fs.pread(fd, _SCAN_CHUNK, offset)
        due, index_pos = self._scan_from(
            data, offset, partial=offset + len(data) < size, index_pos=index_pos, recovering=True
        )
        # The scan may have cut a tail or crossed a seal: index what is now the active segment
        # (from the records the scan parsed: no second parse).
        a.rewrite_index_if_needed(due, index_pos)
        if not same_boot and boot:
            self._syncer.set_boot(boot)  # the segment and its index agree now, in this boot
        # The sync mark never claims more than this segment holds (a copied or restored directory
        # may carry a mark from elsewhere).
        self._syncer.lower(a.base, a.end)
        a.alloc_end = fs.size(a.fd)
        self._redirty_unsynced_tail()
        if self._durability != "os":
            # Records other handles wrote without fsync ("os") become durable here, so the mark
            # this handle writes into later records (durable_lsn) is true.
            a.sync_whole()
        a.mark_written()

    def _checked_segment_header(self, fd: int, base: int) -> fmt.SegmentHeader:
        """Under the writer lock: the header of segment ``base`` (open as ``fd``), written again
        if a crash while creating the segment left it missing (a 0-byte file, or zeros: no record
        can be there yet). Recovery and a catch-up that crosses a seal both come here, so a live
        handle meets every state a peer killed mid-rotation can leave exactly as a fresh open
        does. CorruptionError if the header is bad and anything but zeros follows it (damage)."""
        a = self._active
        fs = self._fs
        path = segment_path(self._root, base)
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
            fs.pwrite(fd, fmt.encode_segment_header(base, time.time_ns(), a.version), 0)
            fs.fsync(fd)  # crash before: the header may be lost again, rewritten again
            header = fmt.decode_segment_header(fs.pread(fd, fmt.SEGMENT_HEADER_SIZE, 0), path)
        if header.base_lsn != base:
            raise CorruptionError(path, 16, f"header base lsn {header.base_lsn}, name says {base}")
        return header

    def _check_proven_end(self, stop: seg.Stop) -> None:
        """Recovery found the active segment's records ending cleanly at ``stop`` (the end of the
        file, or zeros to it): CorruptionError if the sync mark proves records fsynced past it
        (acknowledged records were cut off or zeroed after they were written)."""
        a = self._active
        proven = self._syncer.proven_end(a.base)
        if stop.pos < proven:
            shown = proven_text(proven)
            raise CorruptionError(
                segment_path(self._root, a.base),
                stop.pos,
                f"the records end at lsn {stop.lsn}, but the sync mark proves the segment fsynced "
                f"to {shown}: acknowledged records from lsn {stop.lsn} on are missing",
            )

    def _quarantine_tail(self, cut: int, stop: seg.Stop) -> None:
        """Before recovery or a catch-up cuts the active segment at ``cut``: copy the bytes from
        there to the last non-zero one into quarantine/ (nothing that was a record is ever
        removed without a copy) and say so in the log's logger."""
        a = self._active
        fs = self._fs
        fd = a.fd
        end = self._nonzero_end(fd, cut, fs.size(fd))  # (the zeros after it are preallocated space)
        if end == cut:
            return  # zeros only: preallocated space, or a tail that never got its data
        # The copy is streamed a chunk at a time: the tail may be a 4 GiB unpublished batch.
        pieces = (fs.pread(fd, min(_SCAN_CHUNK, end - p), p) for p in range(cut, end, _SCAN_CHUNK))
        rel = quarantine.save(fs, self._root, a.base, cut, pieces)
        _logger.warning(
            "%s: offset %d: cut %d bytes from lsn %d (%s), never proven durable; a copy is in %s",
            segment_path(self._root, a.base),
            cut,
            end - cut,
            stop.lsn,
            stop.reason or stop.kind,
            rel,
        )

    def _reader(self, fd: int) -> seg.Read:
        """``fd``'s bytes, read through the I/O seam: ``read(offset, count)``."""
        return lambda offset, count: self._fs.pread(fd, count, offset)

    def _nonzero_end(self, fd: int, offset: int, size: int) -> int:
        """The end of the last non-zero byte of ``fd`` between ``offset`` and ``size`` (``offset``
        if there is none), read in chunks from the end."""
        for end in range(size, offset, -_SCAN_CHUNK):  # bounded by the size
            start = max(offset, end - _SCAN_CHUNK)
            kept = len(self._fs.pread(fd, end - start, start).rstrip(b"\0"))
            if kept:
                return start + kept
        return offset

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
        a = self._active
        fs = self._fs
        pos = fs.size(a.idx_fd) - fmt.INDEX_ENTRY_SIZE
        pos -= (pos - fmt.INDEX_HEADER_SIZE) % fmt.INDEX_ENTRY_SIZE
        if pos < fmt.INDEX_HEADER_SIZE:
            return None
        raw = fs.pread(a.idx_fd, fmt.INDEX_HEADER_SIZE, 0) + fs.pread(a.idx_fd, fmt.INDEX_ENTRY_SIZE, pos)
        try:
            idx_base, interval = fmt.decode_index_header(raw, index_path(self._root, a.base))
        except CorruptionError:
            return None
        entries = fmt.decode_index_entries(raw)
        if idx_base != a.base or interval != a.index_interval or not entries:
            return None
        entry = entries[0]
        if not fmt.SEGMENT_HEADER_SIZE <= entry.offset < size or entry.lsn < a.base:
            return None
        head = fs.pread(a.fd, fmt.RECORD_HEADER_SIZE, entry.offset)
        length = int.from_bytes(head[:4], "little")
        if len(head) < fmt.RECORD_HEADER_SIZE or length > self._size_max:
            return None
        rec = head + fs.pread(a.fd, length + fmt.RECORD_TRAILER_SIZE, entry.offset + len(head))
        infos: list[seg.RecordInfo] = []
        seg.parse(rec, 0, entry.lsn, self._size_max, None, infos, entry.offset)
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
        a = self._active
        mark_base, mark_offset = self._syncer.mark_unlocked()
        start = mark_offset if mark_base == a.base else fmt.SEGMENT_HEADER_SIZE
        if start >= a.end:
            return
        path = segment_path(self._root, a.base)
        fd = self._fs.open(path, os.O_WRONLY)  # not O_APPEND: pwrite must land at its offset
        try:
            for pos in range(start, a.end, _SCAN_CHUNK):  # bounded by the records' end
                tail = self._fs.pread(a.fd, min(_SCAN_CHUNK, a.end - pos), pos)
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
        a = self._active
        offset = 0
        infos: list[seg.RecordInfo] = []
        due: list[seg.RecordInfo] = []
        interval = a.index_interval
        # Whether the scan met a part read ending within a zero header (until a seal is
        # crossed). Before damage was judged in chunks (review of issue 28) it read the rest of
        # the file whole there, and from then on judged zeros, and the zeros after a seal, by
        # all the bytes to the end of the file, as recovery does; a catch-up otherwise trusts
        # the zeros it reads (FORMAT.md §7 step 1). The decisions are kept exactly.
        looked_past = False
        for _ in range(1 << 40):  # bounded: one turn per chunk read or segment crossed
            stop = seg.parse(data, offset, a.next_lsn, self._size_max, None, infos, base)
            durable = self._syncer.durable_lsn
            index_due = a.index_due
            for info in infos:
                if info.durable_lsn > durable:
                    durable = info.durable_lsn
                if info.offset >= index_due:
                    # The process that wrote the record wrote its index entry.
                    due.append(info)
                    index_due = (info.offset // interval + 1) * interval
            self._syncer.durable_lsn, a.index_due = durable, index_due
            a.next_lsn = stop.lsn  # past a gap record too
            if infos:
                a.last_ts = max(a.last_ts, infos[-1].timestamp)
                infos.clear()
            if stop.kind == seg.END and not partial:
                if recovering:
                    self._check_proven_end(stop)
                a.end = stop.pos
                a.alloc_end = stop.pos  # (the file ends with the records: another cut its zeros)
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
                size = self._fs.size(a.fd)
                looks_past = recovering or looked_past
                if not (looks_past and partial and self._nonzero_after(a.fd, base + len(data), size)):
                    if recovering:
                        self._check_proven_end(stop)
                    a.end = stop.pos
                    return due, index_pos
                # Bytes after the zeros: a hole (a power loss, or damage), judged below on the
                # file from the zeros to its end, a chunk at a time.
            if stop.kind == seg.SEAL:
                # Sealed by another process (or by a crash mid-rotation): move to the next one.
                seal_end = stop.pos + fmt.RECORD_OVERHEAD
                a.end = stop.pos
                if looked_past:
                    size = self._fs.size(a.fd)
                    zeros_after = size > seal_end and not self._nonzero_after(a.fd, seal_end, size)
                else:
                    zeros_after = len(data) + base > seal_end and seg.zeros_from(data, seal_end - base)
                if zeros_after:
                    # Preallocated zeros a crash left after the seal (the writer cuts them before
                    # it writes the seal): a sealed segment ends with its seal.
                    self._fs.truncate(a.fd, seal_end)
                next_base = stop.next_lsn
                next_path = segment_path(self._root, next_base)
                if not self._fs.exists(next_path):
                    bases = [] if recovering else list_segments(self._fs, self._root)
                    if bases and bases[-1] > next_base:
                        # Not a crash mid-rotation (the next segment is made, its name made
                        # durable, before anything is written after it): the log goes on past
                        # it. Made again here, it would take lsns the log has used, the next
                        # write landing in a segment before the newest.
                        if bases[0] < next_base:
                            # (a hole: retention removes only a prefix, the newest never)
                            raise CorruptionError(
                                next_path, 0, f"segment {next_base} is missing between segments "
                                f"{bases[0]} and {bases[-1]} (logspool repair records the loss)"
                            )  # fmt: skip
                        # Removed by retention (every record in it consumed) while this handle
                        # was behind, its own segment removed too: the caller starts again from
                        # the newest segment.
                        raise _PassedByRetention(next_base)
                    # A crash between the seal and the next segment: the sealed segment's index
                    # may not have been fsynced with it. Make it whole and durable first.
                    if index_pos < 0 or a.rewrite_index_if_needed(due, index_pos):
                        self._fs.fsync(a.idx_fd)  # (a catch-up: the entries its writer wrote)
                    a.create_segment(next_base, max(a.last_ts, time.time_ns()))
                a.switch_to(next_base)
                # (A peer killed while creating it may have left it without its header.)
                header = self._checked_segment_header(a.fd, next_base)
                a.last_ts = max(a.last_ts, header.created_ns)  # (as the sealing writer)
                a.alloc_end = self._fs.size(a.fd)
                data = self._fs.pread(a.fd, _SCAN_CHUNK, 0)
                a.set_deadline(header.created_ns)
                offset, base, due, index_pos = fmt.SEGMENT_HEADER_SIZE, 0, [], 0
                partial = len(data) == _SCAN_CHUNK
                looked_past = False
                continue
            if partial and (
                stop.kind in (seg.END, seg.INCOMPLETE)
                or (stop.kind == seg.ZERO and base + len(data) - stop.pos < fmt.RECORD_HEADER_SIZE)
            ):
                # The parse stopped at the end of the part read (a few zeros there may be the
                # start of a record's header): read on, four times as much up to a chunk (or
                # what the record needs).
                if stop.kind == seg.ZERO:
                    looked_past = True  # (see above)
                rest = self._fs.size(a.fd) - stop.pos
                grown = min(4 * len(data), _SCAN_CHUNK)
                want = min(rest, max(grown, stop.need + fmt.RECORD_HEADER_SIZE))
                data = self._fs.pread(a.fd, want, stop.pos)
                offset, base, partial = 0, stop.pos, want < rest
                continue
            # Damage (a failed CRC, a zero header with bytes after it, a bad record), judged by
            # the bytes from it to the end of the file, which may be a 4 GiB unpublished batch:
            # read a chunk at a time, never whole (review of issue 28: three times the batch's
            # size in memory).
            del data
            cut = seg.judge_damage_in(
                segment_path(self._root, a.base),
                self._reader(a.fd),
                self._fs.size(a.fd),
                stop,
                self._syncer.durable_lsn,
                self._size_max,
                proven_end=self._syncer.proven_end(a.base),
                # (a catch-up reads what peers wrote in this boot; recovery knows from the sync file)
                same_boot=self._recovered_same_boot or not recovering,
                chunk=_SCAN_CHUNK,
            )
            # Never proven durable: a crash left it half-written. Cut it (and anything after
            # it), keeping a copy of its bytes first.
            self._quarantine_tail(cut, stop)
            a.cut(cut)  # crash here: the same cut is made on next open
            self._sync_if_durable(a.fd)
            a.end = cut
            return [info for info in due if info.offset < cut], index_pos
        raise AssertionError("segment chain did not end")

    def catch_up(self, head: bytes | None = None) -> None:
        """Under the writer lock: adopt what other processes appended since we last wrote; or,
        after a failure that left this handle's view of the active segment unsure (a rotation
        or a catch-up that failed half-way), recover the newest segment as an opening writer
        does. An OSError here is an AppendError: nothing was appended, and the next call
        recovers first."""
        a = self._active
        try:
            if a.needs_recovery:
                a.close_fds()
                self.recover()
                a.needs_recovery = False
                return
            self._catch_up_from(head)
        except OSError as err:
            a.needs_recovery = True
            raise AppendError(self._root, f"reading the log's end: {err}") from err

    def _catch_up_from(self, head: bytes | None = None) -> None:
        """Under the writer lock: adopt what other processes appended since we last wrote.

        The space past the records is zeros (preallocated), so what tells that others wrote is
        the record header at our end offset (``head``, if the caller read it), not the file's
        size."""
        a = self._active
        fs = self._fs
        end = a.end
        if head is None:
            head = fs.pread(a.fd, fmt.RECORD_HEADER_SIZE, end)
        if head == _ZERO_HEADER:
            return  # the common case: nobody else wrote
        if head and self._adopt_tail_hint():
            return
        if not head:
            size = fs.size(a.fd)
            if size == end:
                a.alloc_end = end  # nobody wrote, and the zeros were cut (a handle closed)
                return
            # Someone cut the segment under us (repair, or recovery of a tail we had not
            # written): start again from the segment's beginning (a recovery, which waits for the
            # sync role and flock: refused to a caller that must not wait, which leaves it to the
            # next writer, ``catch_up``).
            self._recover_from_newest()
            return
        # The bytes written since, and the header after them, in one read of at least a page:
        # catching up costs what the others appended and a page at most. The header read says
        # how long the first record is; if more follow, the scan reads on in growing chunks.
        length = int.from_bytes(head[:4], "little")
        want = max(
            fmt.RECORD_OVERHEAD + min(length, self._size_max) + fmt.RECORD_HEADER_SIZE,
            _CATCH_UP_READ,
        )
        data = fs.pread(a.fd, want, end)
        try:
            due, index_pos = self._scan_from(data, end, partial=len(data) == want)
        except _PassedByRetention:
            self._recover_from_newest()  # (as for a segment cut under us, above)
            return
        if index_pos == 0 and a.index_ok:
            # Crossed a seal: the new segment's index must hold exactly what its records imply
            # (a peer killed mid-rotation may have left it without a header or without entries).
            try:
                a.rewrite_index_if_needed(due)
            except OSError:
                a.index_ok = False  # derived data: lookups scan; the next open rebuilds it
        if a.alloc_end < a.end:
            a.alloc_end = a.end  # (the others preallocated; allocate() says how far)
        a.mark_written()

    def _recover_from_newest(self) -> None:
        """In a catch-up that found its segment cut under it, or passed by retention: start
        again from the newest segment, as an opening writer does. Flagged first, so that a
        recovery that fails (an OSError, or damage in the newest segment) is tried again by the
        next write, never left with the segment's fds closed."""
        a = self._active
        self._syncer.may_wait()
        a.needs_recovery = True
        a.close_fds()
        self.recover()
        a.needs_recovery = False

    def _adopt_tail_hint(self) -> bool:
        """Under the writer lock, others having written after our end: adopt the end of their
        records from the tail hint (FORMAT.md §8.1) if the record it names is there, whole and
        valid, after our end, in our segment. Then, if more follows it (a writer of an earlier
        release, or one killed before it published), catch up from there. False: no usable hint
        (catch up by parsing from our end)."""
        a = self._active
        hint = self._syncer.tail()
        if (
            hint is None
            or hint.base_lsn != a.base
            or hint.offset < a.end
            or hint.lsn < a.next_lsn
            or not fmt.RECORD_OVERHEAD <= hint.end - hint.offset <= fmt.RECORD_OVERHEAD + self._size_max
        ):
            return False
        data = self._fs.pread(a.fd, hint.end - hint.offset + fmt.RECORD_HEADER_SIZE, hint.offset)
        infos: list[seg.RecordInfo] = []
        stop = seg.parse(data, 0, hint.lsn, self._size_max, None, infos, hint.offset)
        if len(infos) != 1 or stop.pos != hint.end:
            return False  # not the record it names: stale (the log was cut) or torn
        info = infos[0]
        a.next_lsn = hint.lsn + 1
        a.end = hint.end
        if info.durable_lsn > self._syncer.durable_lsn:
            self._syncer.durable_lsn = info.durable_lsn
        if info.timestamp > a.last_ts:
            a.last_ts = info.timestamp
        # What a parse of every record would leave (§5.2): the last record's offset decides it.
        interval = a.index_interval
        a.index_due = (info.offset // interval + 1) * interval
        if a.alloc_end < hint.end:
            a.alloc_end = hint.end
        a.mark_written()
        head = data[hint.end - hint.offset :]
        if head != _ZERO_HEADER:
            self.catch_up(head)  # more after it: parsed from there (the hint is behind now)
        return True

    def _sync_if_durable(self, fd: int) -> None:
        if self._durability != "os":
            self._fs.fsync(fd)
