"""Readers: positions, seeking by lsn or time, and tailing with instant wake-up.

A reader takes no lock. It reads segment bytes with pread and returns only records that parse
whole and pass their checksum; an incomplete record at the end of the active segment is one being
written, so the reader waits for it. Seals tell it where the next segment starts, so it follows
cutovers without listing the directory. Memory is one read chunk (1 MiB) whatever the log's size.
"""

from __future__ import annotations

import bisect
import logging
import operator
import os
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Literal

from . import _format as fmt
from . import _segment as seg
from . import limits
from ._format import Gap
from ._fs import FileSystem
from ._watch import DirectoryWatch
from .errors import ClosedError, CorruptionError, DataLossError, PositionError
from .log._directory import list_segments, to_ns
from .log._sync import MarkView, proven_offset, proven_text

Position = int | Literal["earliest", "latest"]
OnDataLoss = Literal["fail", "skip"]
_logger = logging.getLogger("logspool")


# Where a reader stops without reading on (FORMAT.md §9.2): the end of the records, zeros, a
# record not whole yet, or a whole record failing its checksum (in the newest segment: being
# written, or a torn tail, unless proven).
_NOT_READ_ON = (seg.END, seg.ZERO, seg.INCOMPLETE, seg.TORN)
# An end of unsealed records is looked past (a segment after it?) at most this often.
_NEXT_LOOK_NS = 100_000_000


class Reader:
    """Reads records in lsn order from a position, and waits at the tail for new ones.

    Concurrency: one thread at a time per reader; any number of readers in any processes.
    """

    def __init__(
        self,
        path: str,
        fs: FileSystem,
        size_max: int,
        *,
        start: Position = "earliest",
        since: datetime | float | int | None = None,
        on_data_loss: OnDataLoss = "fail",
        name: str | None = None,
    ) -> None:
        if on_data_loss not in ("fail", "skip"):
            raise ValueError(f"on_data_loss must be 'fail' or 'skip', not {on_data_loss!r}")
        self._path = path
        self._on_data_loss = on_data_loss
        self._name = name
        # Records skipped because retention removed them first (with on_data_loss="skip").
        self.gaps: list[Gap] = []
        # Set by seek("earliest") until a record is read: retention moving the earliest segment
        # on is then not a loss, the reader just starts at the new earliest.
        self._follow_earliest = False
        self._fs = fs
        self._size_max = size_max
        self._fd = -1
        self._base = -1
        self._unsealed_checked = -1
        self._proven_checked = (-1, 0)  # (segment, offset): an end of records found unproven
        # (segment, offset, until ns): an end of records with no segment after it, seen so lately
        self._next_checked = (-1, 0, 0)
        self._marks = MarkView(fs, path)  # DIR/sync, mapped read-only once needed
        self._pos = 0
        self._lsn = 0
        self._need = 0
        self._chunk = limits.READ_CHUNK_FIRST  # grows to READ_CHUNK_SIZE: a first record comes fast
        # Records read but not yet returned, as an iterator over a list: ``__iter__`` hands them
        # out with ``yield from`` (no Python code per record), and its length hint says how many
        # are left, so ``position`` stays exact when a caller stops half-way.
        self._pending: Iterator[fmt.Record] = iter(())
        self._skip_below = 0
        self._since_ns: int | None = None
        self._watch: DirectoryWatch | None = None
        self._closed = False
        if since is not None:
            if start != "earliest":
                raise ValueError("give start or since, not both")
            self._seek_time(to_ns(since))
        else:
            self.seek(start)

    # --- positioning ------------------------------------------------------------------------------
    @property
    def position(self) -> int:
        """The lsn of the next record this reader returns (to checkpoint and resume from)."""
        # Records below _skip_below (after a seek) are skipped when read: the position is there.
        return max(self._lsn - operator.length_hint(self._pending), self._skip_below)

    @property
    def offset(self) -> tuple[int, int]:
        """The segment (its first lsn) and the byte offset in its file of the next record this
        reader reads, when no record read is pending (after a seek, or ``skip_to_end``)."""
        return self._base, self._pos

    def seek(self, start: Position) -> None:
        """Position at an lsn, or at "earliest" / "latest" (the next record to be appended)."""
        self._pending = iter(())
        self._since_ns = None
        bases = list_segments(self._fs, self._path)
        if start == "earliest":
            self._goto(bases[0] if bases else 0)
            self._follow_earliest = True
            return
        if start == "latest":
            self._goto(bases[-1] if bases else 0)
            # From the newest segment's last index entry that checks out, not its start (a full
            # 64 MiB segment of small records is ~400 ms to parse); damage before that entry is
            # found by the reads that cover it.
            if bases and self._open_segment():
                self._jump(lambda e: True)
            self._skip_below = self.skip_to_end()
            return
        if isinstance(start, bool) or not isinstance(start, int):
            raise TypeError(f"start must be an lsn (int), 'earliest' or 'latest', not {start!r}")
        if start < 0:
            raise ValueError(f"lsn must be >= 0, not {start}")
        if bases and start < bases[0]:
            self._goto(bases[-1])
            raise PositionError(self._path, start, bases[0], self.skip_to_end())
        i = bisect.bisect_right(bases, start) - 1
        self._goto(bases[i] if i >= 0 else 0)
        self._skip_below = start
        if self._open_segment():
            self._jump(lambda e: e.lsn <= start)
            self._walk_to(start)

    def _walk_to(self, start: int) -> None:
        """After a seek's jump to an index entry: move over the records below ``start`` in one
        read, each checked as a read checks it (its header, its lsn, its checksum) but not made
        into a record (a read of one record at an lsn, a key-value store's value on disk,
        parsed the ~270 records of 64 KiB before it into records it dropped: 1.1 ms). On the
        first record that is not a plain, whole, valid one in lsn order (a gap, a seal, a
        compressed record, the end of the newest segment, an unpublished batch's head, damage)
        it stays where it is, and the reads parse from there as ever, and say what they find."""
        if self._lsn >= start:
            return
        data = self._fs.pread(self._fd, limits.READ_CHUNK_FIRST, self._pos)
        view = memoryview(data)
        unpack, end, size_max = fmt.RECORD_HEADER.unpack_from, len(data), self._size_max
        at, lsn = 0, self._lsn
        while lsn < start:  # bounded: each turn moves past a record of at least RECORD_OVERHEAD bytes
            if at + fmt.RECORD_HEADER_SIZE > end:
                return
            length, flags, rlsn, _ts, _durable = unpack(data, at)
            following = at + fmt.RECORD_OVERHEAD + length
            if flags or rlsn != lsn or length > size_max or following > end:
                return
            if fmt.crc32(view[at:following]) != fmt.CRC_RESIDUE:
                return
            at = following
            lsn += 1
        if self._record_at(self._pos + at, start) is not None:
            self._pos, self._lsn = self._pos + at, start
            # (a first read of a few records, for a caller that wants one; it grows as they come)
            self._chunk = limits.READ_CHUNK_PROBE

    def at(self, base: int, offset: int) -> bool:
        """Whether this reader has handed out every record before ``offset`` of segment ``base``
        and read nothing past it (a writer holding the lock then knows it has nothing to read)."""
        return (
            self._base == base
            and self._pos == offset
            and not self._need
            and not operator.length_hint(self._pending)
        )

    def skip_written(self, base: int, start: int, end: int, first_lsn: int, next_lsn: int) -> bool:
        """Move past records the caller wrote itself under the writer lock, lsns ``first_lsn`` up
        to ``next_lsn`` at offsets ``start`` to ``end`` of segment ``base``, without reading
        them back; only if the reader stands exactly where they begin (else False: it reads them
        as usual)."""
        if not self.at(base, start) or self._lsn != first_lsn:
            return False
        self._pos, self._lsn = end, next_lsn
        return True

    def _seek_time(self, since_ns: int) -> None:
        bases = list_segments(self._fs, self._path)
        chosen = bases[0] if bases else 0
        for base in reversed(bases):  # newest first: "since" is usually recent
            first = self._first_timestamp(base)
            if first is not None and first < since_ns:
                chosen = base
                break
        self._goto(chosen)
        self._since_ns = since_ns
        if self._open_segment():
            self._jump(lambda e: e.timestamp < since_ns)

    def _goto(self, base: int) -> None:
        self._unsealed_checked = -1  # the segment whose missing seal was looked into (below)
        self._next_checked = (-1, 0, 0)
        self._follow_earliest = False
        self._close_fd()
        self._base = base
        self._pos = fmt.SEGMENT_HEADER_SIZE
        self._lsn = base
        self._skip_below = base
        self._need = 0

    def _index_entries(self) -> list[fmt.IndexEntry]:
        try:
            raw = self._fs.read_file(
                os.path.join(self._path, fmt.index_name(self._base)), limits.SEGMENT_SIZE_LIMIT
            )
            base, _interval = fmt.decode_index_header(raw, fmt.index_name(self._base))
        except (OSError, ValueError, CorruptionError):
            return []  # derived data: without it we scan from the segment's start
        return fmt.decode_index_entries(raw) if base == self._base else []

    def _jump(self, before: object) -> None:
        """Move to the last index entry satisfying ``before`` whose record checks out."""
        entries = [e for e in self._index_entries() if before(e)]  # type: ignore[operator]
        for entry in reversed(entries[-4:]):  # bounded: a few entries, then scan from the start
            if self._record_at(entry.offset, entry.lsn) is not None:
                self._pos, self._lsn = entry.offset, entry.lsn
                return

    def _record_at(self, offset: int, lsn: int) -> fmt.Record | None:
        """The record at ``offset`` if it is whole, valid and carries ``lsn``; else None."""
        head = self._fs.pread(self._fd, fmt.RECORD_HEADER_SIZE, offset)
        if len(head) < fmt.RECORD_HEADER_SIZE:
            return None
        length = int.from_bytes(head[:4], "little")
        if length > self._size_max:
            return None
        data = self._fs.pread(self._fd, fmt.RECORD_OVERHEAD + length, offset)
        out: list[fmt.Record] = []
        seg.parse(data, 0, lsn, self._size_max, out)
        return out[0] if out else None

    def _first_timestamp(self, base: int) -> int | None:
        try:
            fd = self._fs.open(os.path.join(self._path, fmt.segment_name(base)), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            head = self._fs.pread(fd, fmt.SEGMENT_HEADER_SIZE + fmt.RECORD_HEADER_SIZE, 0)
        finally:
            self._fs.close(fd)
        if len(head) < fmt.SEGMENT_HEADER_SIZE + fmt.RECORD_HEADER_SIZE or not any(
            head[fmt.SEGMENT_HEADER_SIZE :]
        ):
            return None  # no record yet (the zeros after the header are preallocated space)
        # The header is checked when the segment is read; here a timestamp is only a hint.
        _len, _flags, _lsn, ts, _d = fmt.RECORD_HEADER.unpack_from(head, fmt.SEGMENT_HEADER_SIZE)
        return int(ts)

    # --- reading ----------------------------------------------------------------------------------
    def _open_segment(self, retry: bool = True) -> bool:
        """Open segment ``_base`` if not open. False if it does not exist (yet) or is being made.
        (``retry``: look once more if it was made between a failed open and the look at what
        segments exist.)"""
        if self._fd >= 0:
            return True
        path = os.path.join(self._path, fmt.segment_name(self._base))
        try:
            fd = self._fs.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return self._segment_removed(retry)
        head = self._fs.pread(fd, fmt.SEGMENT_HEADER_SIZE, 0)
        if len(head) < fmt.SEGMENT_HEADER_SIZE or not any(head):
            later = [b for b in list_segments(self._fs, self._path) if b > self._base]
            if later:
                # (its header was written meanwhile, and the segments after it made, if it is
                # there now: a segment's header is fsynced before the next segment is created)
                head = self._fs.pread(fd, fmt.SEGMENT_HEADER_SIZE, 0)
            if len(head) < fmt.SEGMENT_HEADER_SIZE or not any(head):
                self._fs.close(fd)
                if not later:
                    return False  # being created: its header is not written yet
                raise CorruptionError(
                    path,
                    0,
                    f"segment header missing ({len(head)} bytes, zeros), but segment {later[0]} "
                    f"follows: lsns from {self._base} on are unreadable (logspool repair rewrites it)",
                )
        try:
            header = fmt.decode_segment_header(head, path)
        except CorruptionError:
            self._fs.close(fd)
            raise
        if header.base_lsn != self._base:
            self._fs.close(fd)
            raise CorruptionError(path, 16, f"header base lsn {header.base_lsn}, name says {self._base}")
        self._fd = fd
        return True

    def locate(self) -> tuple[int, int] | None:
        """(segment base lsn, byte offset) of the record at ``position``, before anything is
        read from there; None if it is not (yet) in the log. Scans from the nearest index entry."""
        if operator.length_hint(self._pending):
            raise RuntimeError("locate() is for a reader that has not read from its position yet")
        if not self._open_segment():
            return None
        target = max(self._lsn, self._skip_below)
        pos, lsn = self._pos, self._lsn
        for _ in range(1 << 20):  # bounded: each turn parses at least one record or returns
            if lsn == target:
                return (self._base, pos)
            data = self._fs.pread(self._fd, limits.READ_CHUNK_SIZE, pos)
            infos: list[seg.RecordInfo] = []
            stop = seg.parse(data, 0, lsn, self._size_max, None, infos, pos)
            for info in infos:
                if info.lsn == target:
                    return (self._base, info.offset)
            if not infos:
                return None
            pos, lsn = stop.pos, stop.lsn
        raise AssertionError("locate() parsed 2^20 chunks without reaching its lsn")

    def _segment_removed(self, retry: bool = True) -> bool:
        """The segment to read next is missing. If retention removed it (later segments exist),
        go on from the earliest (reporting the gap) or raise DataLossError; else it is not made
        yet. True if the reader moved to a segment that is open now."""
        bases = list_segments(self._fs, self._path)
        if retry and self._base in bases:
            # Made since the open failed (a rotation by another process), maybe filled and
            # followed by more segments already: open it, once more.
            return self._open_segment(retry=False)
        if not bases or bases[0] <= self._base:
            later = [b for b in bases if b > self._base]
            if later:
                # Segments before and after it exist: not retention (which removes a prefix,
                # each removal durable before the next) nor a rotation (the next segment is
                # created after this one): it was deleted by hand, or lost.
                raise CorruptionError(
                    os.path.join(self._path, fmt.segment_name(self._base)),
                    0,
                    f"segment missing, but segment {later[0]} follows: lsns {self._base}.."
                    f"{later[0] - 1} are lost (logspool repair records the loss)",
                )
            return False  # not created yet (a rotation in progress), or nothing was removed
        earliest = bases[0]
        if self._follow_earliest:
            self._goto(earliest)
            self._follow_earliest = True
        else:
            lost_from = self.position
            if self._on_data_loss == "fail":
                raise DataLossError(self._path, self._name, lost_from, earliest)
            reason = "removed by retention before it was read"
            if self.gaps and self.gaps[-1].next_lsn == lost_from:  # removed while we moved on
                lost_from = self.gaps.pop().first_lsn
            self.gaps.append(Gap(lost_from, earliest, reason))
            _logger.warning("%s", DataLossError(self._path, self._name, lost_from, earliest))
            self._goto(earliest)
        return self._open_segment()

    def _before_fill(self) -> None:
        """Called when every record read so far was handed out (subscribers commit here)."""

    def _fill(self) -> bool:
        """Read what is available now into ``_pending``. True if there are records to return."""
        for _ in range(1 << 20):  # bounded: one turn per segment crossed or re-read
            if self._closed:
                raise ClosedError(self._path, "reader is closed")
            if not self._open_segment():
                return False
            start_pos = self._pos
            request = max(self._chunk, self._need)
            self._chunk = min(2 * self._chunk, limits.READ_CHUNK_SIZE)
            data = self._fs.pread(self._fd, request, start_pos)
            out: list[fmt.Record] = []
            gaps: list[Gap] = []
            stop = seg.parse(data, 0, self._lsn, self._size_max, out, None, start_pos, gaps)
            if gaps:
                self._add_gaps(gaps)
            self._need = 0
            self._pos, self._lsn = stop.pos, stop.lsn
            if out and (self._skip_below > out[0].lsn or self._since_ns is not None):
                out = self._filter(out)
            if out:
                self._pending = iter(out)
                self._follow_earliest = False
                return True
            kind = stop.kind
            if kind == seg.SEAL:
                self._goto(stop.next_lsn)
                continue
            if stop.pos > start_pos:
                continue  # records were read but all skipped (seek or since): read on
            if kind == seg.INCOMPLETE:
                if stop.need > len(data) == request:
                    self._need = stop.need  # a record larger than one chunk: read it whole
                    continue
                self._chunk = limits.READ_CHUNK_PROBE
                # Being written (or torn, until the next writer cuts it), unless a later segment
                # or the sync mark proves it whole.
                return self._next_segment_exists(kind)
            if kind == seg.TORN:
                # A whole record whose checksum fails (FORMAT.md §9.2): in the newest segment it
                # may be a record being copied into the preallocated zeros, or a torn tail the
                # next writer cuts: the end for now (a follower looks again), unless the sync
                # mark proves it fsynced or a later segment shows the segment was sealed: then
                # damage. What is on disk decides, never how long it has been there.
                self._chunk = limits.READ_CHUNK_PROBE
                return self._next_segment_exists(kind)
            if kind in (seg.END, seg.ZERO):
                # At the end: the next look is a small read (a tailing reader looks often, and
                # finds a few records at a time); the chunk grows again as records come.
                self._chunk = limits.READ_CHUNK_PROBE
                return self._next_segment_exists(kind)
            path = os.path.join(self._path, fmt.segment_name(self._base))
            raise CorruptionError(path, stop.pos, stop.reason or kind)
        raise AssertionError("reader did not settle")

    def _add_gaps(self, gaps: list[Gap]) -> None:
        """Report records repair quarantined that this reader passes (not those it seeks past)."""
        for gap in gaps:
            if gap.next_lsn <= self._skip_below:
                continue
            first = max(gap.first_lsn, self._skip_below)
            _logger.warning("%s: lsns %d..%d skipped: %s", self._path, first, gap.next_lsn - 1, gap.reason)
            self.gaps.append(Gap(first, gap.next_lsn, gap.reason))

    def _next_segment_exists(self, kind: str) -> bool:
        """At the end of an unsealed segment (``kind``: END or ZERO; or INCOMPLETE, a record not
        whole yet; or TORN, a whole record failing its checksum): has a later one been started?
        (After a crash that lost the seal, the next segment exists although this one has none.)
        Moves there if so (END, ZERO); raises CorruptionError if records of this segment are
        missing, or it ends in an incomplete or torn record, while a later segment exists."""
        # Looked for again at the same end position only after _NEXT_LOOK_NS (but at each look of
        # ``next``, a follower's, which looks when woken): the segment after this lsn is created
        # only after a seal at this very position, which the next read finds first (the seal is
        # written, and fsynced, before the segment after it is created). Only a seal damaged or
        # cut after this end was read makes one appear without it (FORMAT.md §9.2: go on),
        # found that much later. (A stat a look was a third of a kv.GET's catch-up of a store
        # shared with other processes, which iterates from its position before every read.)
        if kind in (seg.END, seg.ZERO) and self._lsn != self._base:
            base, pos, until = self._next_checked
            now = time.monotonic_ns()
            if base != self._base or pos != self._pos or now >= until:
                if os.path.exists(os.path.join(self._path, fmt.segment_name(self._lsn))):
                    self._goto(self._lsn)
                    return self._fill()
                self._next_checked = (self._base, self._pos, now + _NEXT_LOOK_NS)
        if self._unsealed_checked == self._base:
            return self._proven_end_reached()
        # Once per segment: a later segment means this one was sealed (the seal is durable before
        # the next segment is created), so ending here is damage -- unless the seal or more
        # records arrived after our read, which a second read shows.
        later = [b for b in list_segments(self._fs, self._path) if b > self._base]
        if not later:
            self._unsealed_checked = self._base
            return self._proven_end_reached()
        again = self._fs.pread(self._fd, max(limits.READ_CHUNK_SIZE, self._need), self._pos)
        stop = seg.parse(again, 0, self._lsn, self._size_max, None, None, self._pos)
        if stop.pos != self._pos or stop.kind not in _NOT_READ_ON:
            return self._fill()
        how = {
            seg.INCOMPLETE: "in an incomplete record",
            seg.TORN: f"in a record that fails its checksum ({stop.reason or 'torn'})",
        }.get(stop.kind, "without a seal")
        if later[0] > self._lsn:
            lost = f"lsns {self._lsn}..{later[0] - 1} are missing (logspool repair records the loss)"
        else:  # the next segment starts at this lsn: the damage is where the seal should be
            lost = "its seal is damaged; no lsn is missing (logspool repair writes the seal)"
        raise CorruptionError(
            os.path.join(self._path, fmt.segment_name(self._base)),
            self._pos,
            f"the segment ends at lsn {self._lsn} {how}, but segment {later[0]} follows: {lost}",
        )

    def _proven_end_reached(self) -> bool:
        """At the end of the records of the newest segment (or a record not complete yet): the
        end of the log, unless the
        writers' sync mark proves records fsynced past it (FORMAT.md §9): then they were
        acknowledged and are gone (cut off or zeroed), and this raises CorruptionError naming
        the file, the offset and the first lsn missing. Looked at once per end position. True if
        records came meanwhile (read on), False at the end."""
        if self._proven_checked == (self._base, self._pos):
            return False
        proven = proven_offset(self._marks.read(), self._base)
        if proven <= self._pos:
            self._proven_checked = (self._base, self._pos)
            return False
        # The mark is raised only over records already in the file: read again, after the mark.
        again = self._fs.pread(self._fd, max(limits.READ_CHUNK_PROBE, self._need), self._pos)
        stop = seg.parse(again, 0, self._lsn, self._size_max, None, None, self._pos)
        if stop.pos != self._pos or stop.kind not in _NOT_READ_ON:
            return self._fill()
        shown = proven_text(proven)
        what = (
            f"the record at lsn {self._lsn} fails its checksum ({stop.reason or 'torn'})"
            if stop.kind == seg.TORN
            else f"the records end at lsn {self._lsn}"
        )
        raise CorruptionError(
            os.path.join(self._path, fmt.segment_name(self._base)),
            self._pos,
            f"{what}, but the sync mark proves the segment fsynced to {shown}: acknowledged "
            f"records from lsn {self._lsn} on are missing or damaged",
        )

    def _filter(self, out: list[fmt.Record]) -> list[fmt.Record]:
        skip = self._skip_below
        out = [r for r in out if r.lsn >= skip]
        since = self._since_ns
        if since is not None and out:
            keep = [r for r in out if r.timestamp >= since]
            if keep:
                self._since_ns = None  # timestamps never decrease: the rest all qualify
                out = out[len(out) - len(keep) :]
            else:
                out = []
        return out

    def skip_to_end(self) -> int:
        """Move past every record present now, without returning them. Returns the position."""
        for _ in range(1 << 20):  # bounded: one turn per chunk
            if not self._fill():
                return self._lsn
            self._pending = iter(())
        raise AssertionError("log without end")

    def next(self, timeout: float | None = None) -> fmt.Record | None:
        """The next record, waiting up to ``timeout`` seconds (None: forever) for one to be
        appended; None if none came in time. Wakes within milliseconds of an append made by any
        process (inotify; polling where that is missing)."""
        rec = next(self._pending, None)
        if rec is not None:
            return rec
        self._before_fill()
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in range(1 << 62):  # bounded by the deadline
            if self._watch is not None:
                self._watch.drain()
            self._next_checked = (-1, 0, 0)  # (a follower's look, after a wake: looks past the end)
            if self._fill():
                if self._watch is not None:
                    self._watch.reset_backoff()
                return next(self._pending)
            remaining = 3600.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return None
            if self._watch is None:
                self._watch = DirectoryWatch(self._path)
                continue  # look once more now that the watch exists: closes the race
            self._watch.wait(remaining)
        raise AssertionError("next() waited 2^62 times")

    def __iter__(self) -> Iterator[fmt.Record]:
        """The records available now, in lsn order; ends at the current end of the log."""
        while True:
            yield from self._pending
            self._before_fill()
            if not self._fill():
                return

    def _close_fd(self) -> None:
        if self._fd >= 0:
            self._fs.close(self._fd)
            self._fd = -1

    def close(self) -> None:
        self._closed = True
        self._close_fd()
        self._marks.close()
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
