"""Group commit across handles: an "always" append never returns before an fsync covers it.

The sync mark (DIR/sync) lets a handle skip its fsync when another handle's fsync covered its
bytes. These tests check that claim against what was really fsynced: a FileSystem subclass
records, per file, the size it had when an fsync of it began (bytes below that are durable).
Two Log handles in one process have separate open file descriptions, so their flocks exclude
each other exactly as two processes' do.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading
import time

import pytest

import logspool
from logspool import _format as fmt
from logspool import _segment as seg
from logspool._fs import FileSystem
from logspool.errors import AppendError
from tests.crash.faultfs import covered_by_fsync


class SyncTracker(FileSystem):
    """Remembers, per file path, how many bytes an fsync has made durable: for a segment, the
    end of the valid records in it when the fsync began (not its size, which counts the zeros
    preallocated after them)."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.durable: dict[str, int] = {}
        self.mutex = threading.Lock()

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        with self.mutex:
            self.paths[fd] = os.path.realpath(path)
        return fd

    def fsync(self, fd: int) -> None:
        size = covered_by_fsync(self.paths[fd], fd)  # taken before: what the fsync certainly covers
        super().fsync(fd)
        with self.mutex:
            path = self.paths[fd]
            self.durable[path] = max(self.durable.get(path, 0), size)

    fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault, the same count)

    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        with self.mutex:  # bytes written past the cut later were never fsynced
            path = self.paths[fd]
            self.durable[path] = min(self.durable.get(path, 0), size)

    def snapshot(self) -> dict[str, int]:
        with self.mutex:
            return dict(self.durable)


def _record_ends(path: str) -> dict[int, tuple[str, int]]:
    """lsn -> (segment path, file offset where the record ends), from the files."""
    ends: dict[int, tuple[str, int]] = {}
    for name in sorted(os.listdir(path)):
        base = fmt.parse_segment_name(name)
        if base is None:
            continue
        seg_path = os.path.realpath(os.path.join(path, name))
        with open(seg_path, "rb") as f:
            data = f.read()
        infos: list[seg.RecordInfo] = []
        seg.parse(data, fmt.SEGMENT_HEADER_SIZE, base, 1 << 30, None, infos)
        for info in infos:
            ends[info.lsn] = (seg_path, info.offset + info.size)
    return ends


def _append_from_threads(
    tracker: SyncTracker, handles: list[logspool.Log], per_handle: int, count: int, size: int
) -> dict[int, dict[str, int]]:
    """``per_handle`` threads on each handle append ``count`` records each, starting together;
    then the handles are closed. lsn -> what was durable when its append returned."""
    acked: dict[int, dict[str, int]] = {}
    lock = threading.Lock()
    start = threading.Barrier(len(handles) * per_handle)

    def writer(h: int, t: int) -> None:
        start.wait()
        for i in range(count):
            lsn = handles[h].append(f"h{h} t{t} {i}".encode() * size)
            seen = tracker.snapshot()  # what was durable when append returned
            with lock:
                acked[lsn] = seen

    threads = [
        threading.Thread(target=writer, args=(h, t)) for h in range(len(handles)) for t in range(per_handle)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for handle in handles:
        handle.close()
    return acked


def test_every_acknowledged_append_was_covered_by_an_fsync(log_dir: str) -> None:
    tracker = SyncTracker()
    logspool.open(log_dir, segment_size_max=16 * 1024, fs=tracker).close()
    handles = [logspool.open(log_dir, durability="always", fs=tracker) for _ in range(2)]
    acked = _append_from_threads(tracker, handles, 3, 150, 4)
    ends = _record_ends(log_dir)
    assert sorted(acked) == list(range(900))
    assert len({p for p, _ in ends.values()}) > 3  # rotations happened along the way
    for lsn, seen in acked.items():
        path, end = ends[lsn]
        assert seen.get(path, 0) >= end, f"lsn {lsn} acknowledged before an fsync covered it"


def test_a_cut_tail_lowers_the_sync_mark(log_dir: str) -> None:
    """A mark that counted bytes later cut must not let the record written in their place skip
    its fsync. (Writers raise the mark only over whole, valid records, so a mark over a partial
    record is damage: the opening writer refuses the log, and repair, which cuts the bytes,
    lowers the mark.)"""
    tracker = SyncTracker()
    with logspool.open(log_dir, durability="always", fs=tracker) as log:
        log.append(b"first")
    seg_path = os.path.realpath(os.path.join(log_dir, fmt.segment_name(0)))
    good_end = os.path.getsize(seg_path)
    # A writer that crashed mid-record left a header claiming 400 bytes and 300 of them.
    partial = fmt.encode_record(1, 1, 1, b"p" * 400)[:300]
    with open(seg_path, "ab") as f:
        f.write(partial)
        f.flush()
        os.fsync(f.fileno())
    # ...and some leader's fsync counted those bytes: the mark says so (true when written).
    sync_fd = os.open(os.path.join(log_dir, fmt.SYNC_NAME), os.O_RDWR)
    with mmap.mmap(sync_fd, fmt.SYNC_FILE_SIZE) as m:
        fmt.write_sync_mark(m, 0, good_end + len(partial))
    os.close(sync_fd)
    with pytest.raises(logspool.CorruptionError, match="sync mark proves"):
        logspool.open(log_dir, durability="always", fs=tracker)
    assert not logspool.repair(log_dir).unrepaired

    with logspool.open(log_dir, durability="always", fs=tracker) as log:
        before = tracker.snapshot().get(seg_path, 0)
        lsn = log.append(b"second, written where the partial record was")
        after = tracker.snapshot().get(seg_path, 0)
    path, end = _record_ends(log_dir)[lsn]
    assert path == seg_path and end < good_end + len(partial)  # inside the old mark's range
    assert before < end <= after  # covered by a real fsync, not by the stale mark
    with open(os.path.join(log_dir, fmt.SYNC_NAME), "rb") as f:
        assert fmt.read_sync_mark(f.read()) <= (0, os.path.getsize(seg_path))


def test_a_leader_that_measured_a_partial_record_cannot_leave_the_mark_over_the_cut(log_dir: str) -> None:
    """A write fails half-way; before the writer cuts the partial bytes, another handle's fsync
    measures the segment (partial bytes included) and raises the mark. The cut must not leave
    the mark above it: the next record written there would be acknowledged without an fsync."""

    class Interleaved(SyncTracker):
        full = False
        between: threading.Thread | None = None

        def pwrite(self, fd: int, data: bytes, offset: int) -> None:
            if self.full and len(data) > 1000:
                os.pwrite(fd, data[: len(data) // 2], offset)
                raise OSError(errno.ENOSPC, "No space left on device")
            super().pwrite(fd, data, offset)

        def truncate(self, fd: int, size: int) -> None:
            if self.between is not None:  # the other handle's leader runs now, to its end
                thread, self.between = self.between, None
                thread.start()
                thread.join()
            super().truncate(fd, size)

    fs = Interleaved()
    seg_path = os.path.realpath(os.path.join(log_dir, fmt.segment_name(0)))
    with (
        logspool.open(log_dir, durability="always", fs=fs) as writer,
        logspool.open(log_dir, durability="os", fs=fs) as other,
    ):
        other.append(b"written, not yet synced")
        fs.full = True
        fs.between = threading.Thread(target=other.sync)
        with pytest.raises(logspool.AppendError):
            writer.append(b"x" * 4000)
        fs.full = False
        assert fs.between is None  # the interleaving happened
        before = fs.snapshot().get(seg_path, 0)
        lsn = writer.append(b"small, where the partial record was")
        after = fs.snapshot().get(seg_path, 0)
    path, end = _record_ends(log_dir)[lsn]
    assert path == seg_path
    assert before < end <= after, "acknowledged on the word of a mark raised over cut bytes"


class SlowSyncTracker(SyncTracker):
    """A SyncTracker whose segment fsyncs last at least ``floor_s`` (a slower disk), counted."""

    def __init__(self, floor_s: float) -> None:
        super().__init__()
        self.floor_s = floor_s
        self.segment_fsyncs = 0

    def fsync(self, fd: int) -> None:
        start = time.monotonic()
        super().fsync(fd)
        if fmt.parse_segment_name(os.path.basename(self.paths[fd])) is not None:
            with self.mutex:
                self.segment_fsyncs += 1
            time.sleep(max(0.0, self.floor_s - (time.monotonic() - start)))

    fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault, the same count)


def test_handles_that_gather_still_acknowledge_only_what_an_fsync_covered(log_dir: str) -> None:
    """4 handles (each its own open file descriptions: they gather as processes do), 2 threads
    each, on a 3 ms fsync: the syncer of each fsync waits for the writers the last one covered,
    so fsyncs carry most of the 8 writers' records; every acknowledgement was still covered."""
    tracker = SlowSyncTracker(0.003)
    logspool.open(log_dir, fs=tracker).close()
    handles = [logspool.open(log_dir, durability="always", fs=tracker) for _ in range(4)]
    fsyncs_before = tracker.segment_fsyncs
    acked = _append_from_threads(tracker, handles, 2, 40, 1)
    fsyncs = tracker.segment_fsyncs - fsyncs_before
    ends = _record_ends(log_dir)
    assert sorted(acked) == list(range(320))
    for lsn, seen in acked.items():
        path, end = ends[lsn]
        assert seen.get(path, 0) >= end, f"lsn {lsn} acknowledged before an fsync covered it"
    assert fsyncs <= 70, f"{fsyncs} fsyncs for 320 records (measured: 43-44; 96-101 without gathering)"


def test_a_wrong_gathering_hint_costs_at_most_one_bounded_wait(log_dir: str) -> None:
    """The hint in the sync file is advisory: one that names records nobody will write makes
    the next syncer wait at most the capped gathering time, and that fsync replaces it."""
    tracker = SlowSyncTracker(0.001)
    with logspool.open(log_dir, durability="always", fs=tracker) as log:
        log.append(b"first")  # measures the fsync's cost
        with open(os.path.join(log_dir, fmt.SYNC_NAME), "r+b") as f:
            sync = mmap.mmap(f.fileno(), fmt.SYNC_FILE_SIZE)
            fmt.write_sync_gather(sync, 1, 200, 5)  # 199 records that will never come
            started = time.monotonic()
            assert log.append(b"second") == 1
            waited = time.monotonic() - started
            covered, target, epoch = fmt.read_sync_gather(sync)
            sync.close()
    # The wait is capped at limits.GATHER_WAIT_S_MAX (2 ms); without the cap it would last until
    # the records came, which is never: returning at all is the proof. The bound only keeps a
    # regression from hanging the suite, and is far from anything a loaded machine takes.
    assert waited < 30, f"{waited:.3f} s"
    assert (covered, epoch) == (2, 6)  # the fsync's own: through lsn 1, the epoch moved on
    assert target in (0, 3)  # no writer, or this one, expected back


class GatedSyncTracker(SyncTracker):
    """A SyncTracker whose segment fsyncs wait while ``gate`` is shut (at most 60 s), telling
    ``inside`` when one does."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.inside = threading.Event()

    def fsync(self, fd: int) -> None:
        if fmt.parse_segment_name(os.path.basename(self.paths[fd])) is not None and not self.gate.is_set():
            self.inside.set()
            assert self.gate.wait(60), "the test never opened the gate"
        super().fsync(fd)

    fdatasync = fsync


def test_a_sync_that_must_not_wait_returns_false_while_another_fsync_is_under_way(log_dir: str) -> None:
    """``Log.sync(wait=False)`` (a daemon's event loop): while another process holds the sync
    file's lock (as it does through its fsync), or another thread of the handle is fsyncing, it
    returns False at once, its records not claimed durable; with neither, True, and an fsync
    covered them. A ``sync()`` that may wait then finds them durable."""
    tracker = GatedSyncTracker()
    with logspool.open(log_dir, durability="os", fs=tracker) as log:
        log.append(b"first")
        seg_path, end = _record_ends(log_dir)[0]
        held = os.open(os.path.join(log_dir, fmt.SYNC_NAME), os.O_RDWR)  # (its own description:
        try:  # its flock excludes the handle's as another process's would)
            fcntl.flock(held, fcntl.LOCK_EX)
            assert log.sync(wait=False) is False
            assert tracker.snapshot().get(seg_path, 0) < end, "an fsync ran under another's lock"
            fcntl.flock(held, fcntl.LOCK_UN)
        finally:
            os.close(held)
        assert log.sync(wait=False) is True
        assert tracker.snapshot()[seg_path] >= end

        log.append(b"second")
        seg_path, end = _record_ends(log_dir)[1]
        tracker.gate.clear()
        syncer = threading.Thread(target=log.sync)
        syncer.start()
        try:
            assert tracker.inside.wait(60), "the other thread's fsync never began"
            assert log.sync(wait=False) is False  # (that thread holds the handle's sync role)
        finally:
            tracker.gate.set()
            syncer.join(60)
        assert log.sync(wait=False) is True
        assert tracker.snapshot()[seg_path] >= end


class LockOnWrite(FileSystem):
    """Once ``armed``: the first pwrite (a recovery rewriting a tail never fsynced) is followed by
    another open file description taking the sync file's exclusive lock, as another process
    holds it through its fsync, until ``release()``."""

    def __init__(self, sync_path: str) -> None:
        self.sync_path = sync_path
        self.armed = False
        self.held = -1

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        super().pwrite(fd, data, offset)
        if self.armed:
            self.armed = False
            self.held = os.open(self.sync_path, os.O_RDWR)
            fcntl.flock(self.held, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.held >= 0:
            os.close(self.held)
            self.held = -1


def test_a_catch_up_that_must_not_wait_leaves_a_recovery_to_the_next_writer(log_dir: str) -> None:
    """``Log.exclusive(timeout_s=0)`` (a daemon's event loop) finds its segment cut under it (a
    repair cut records never fsynced): catching up means a recovery, whose steps fsync and
    change the mark under the sync file's lock (another process may take it between them: the
    I/O seam takes it at the recovery's first write). It raises LockedError at once, never
    starting the recovery; the next writer that may wait recovers, and every record the cut
    left is read once, with the new one after them."""
    seam = LockOnWrite(os.path.join(log_dir, fmt.SYNC_NAME))
    a = logspool.open(log_dir, fs=seam)
    b = logspool.open(log_dir, durability="os")
    try:
        a.append(b"x")  # (fsynced: the mark covers it)
        b.append(b"y")  # (not fsynced)
        with a.exclusive():
            pass  # (a adopts y)
        seg = os.path.join(log_dir, sorted(n for n in os.listdir(log_dir) if n.endswith(".seg"))[-1])
        cut = a._active.end
        b.append(b"z")
        b.close()  # (its writer lock given back)
        with a.exclusive():
            pass  # (a adopts z)
        os.truncate(seg, cut)  # (z is cut, as a repair cuts records never fsynced)
        outcome: list[object] = []

        def enter() -> None:
            try:
                with a.exclusive(timeout_s=0, sync=False):
                    outcome.append("entered")
            except Exception as err:
                outcome.append(err)

        seam.armed = True
        t = threading.Thread(target=enter)
        t.start()
        try:
            t.join(30)  # (a wait for the lock would last until it is given back, below)
            assert not t.is_alive(), "exclusive(timeout_s=0) waited for the sync file's lock"
        finally:
            seam.armed = False
            seam.release()  # (a thread left waiting goes on now)
            t.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], logspool.LockedError), outcome
        assert isinstance(outcome[0].__cause__, AppendError), "refused for the writer lock, not the catch-up"
        a.append(b"after")
    finally:
        b.close()
        a.close()
    with logspool.open(log_dir, readonly=True) as log:
        assert [r.payload for r in log.read()] == [b"x", b"y", b"after"]
