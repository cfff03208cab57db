"""The write queue: threads of one handle appending with durability "always" at once.

The thread with the write role holds it through its fsync; appends made meanwhile queue, and the
next leader writes them all with one write and one fsync. A FileSystem subclass holds the first
leader inside its fsync, so that the queue fills deterministically, and counts the writes and
fsyncs of segment files (bytes below the size a file had when an fsync of it began are durable).
Each test then checks what the caller of every append was told against the files.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

import pytest

import logspool
from logspool import _format as fmt
from logspool import _segment as seg
from logspool._fs import FileSystem
from tests.crash.faultfs import covered_by_fsync


class HeldFS(FileSystem):
    """Holds the first segment fsync after ``hold()`` until ``release()``; counts segment writes
    and fsyncs; with ``full`` set, a record write to a segment other than those in ``spared``
    writes half and fails with ENOSPC (a disk filling up)."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.durable: dict[str, int] = {}
        self.writes: list[tuple[str, int]] = []  # (segment name, bytes) of each write
        self.fsyncs = 0
        self.mutex = threading.Lock()
        self.holding = False
        self.in_fsync = threading.Event()
        self.gate = threading.Event()
        self.full = False
        self.spared: set[str] = set()

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        with self.mutex:
            self.paths[fd] = os.path.basename(path)
        return fd

    def _segment(self, fd: int) -> str | None:
        name = self.paths.get(fd, "")
        return name if fmt.parse_segment_name(name) is not None else None

    def hold(self) -> None:
        self.holding = True

    def release(self) -> None:
        self.holding = False
        self.gate.set()

    def _written(self, fd: int, data: bytes, offset: int | None) -> None:
        name = self._segment(fd)
        if name is not None:
            with self.mutex:
                self.writes.append((name, len(data)))
            if self.full and name not in self.spared and len(data) > fmt.SEGMENT_HEADER_SIZE:
                half = data[: len(data) // 2]
                os.write(fd, half) if offset is None else os.pwrite(fd, half, offset)
                raise OSError(errno.ENOSPC, "No space left on device")

    def write(self, fd: int, data: bytes) -> None:
        self._written(fd, data, None)
        super().write(fd, data)

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        self._written(fd, data, offset)
        super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        name = self._segment(fd)
        size = covered_by_fsync(self.paths[fd], fd)
        if name is not None and self.holding:
            self.holding = False
            self.in_fsync.set()
            assert self.gate.wait(30)
        super().fsync(fd)
        if name is not None:
            with self.mutex:
                self.fsyncs += 1
                self.durable[name] = max(self.durable.get(name, 0), size)

    fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault, the same count)

    def durable_snapshot(self) -> dict[str, int]:
        with self.mutex:
            return dict(self.durable)


def _wait_queued(log: logspool.Log, count: int) -> None:
    """Until ``count`` appends wait in the handle's write queue (its own state, read only)."""
    deadline = time.monotonic() + 10
    while len(log._wq) < count:
        assert time.monotonic() < deadline, f"{len(log._wq)} of {count} appends queued"
        time.sleep(0.001)


class Outcome:
    """What each appending thread was told: an lsn, or an exception."""

    def __init__(self) -> None:
        self.lsns: dict[bytes, int] = {}
        self.errors: dict[bytes, BaseException] = {}
        self.durable_at_return: dict[bytes, dict[str, int]] = {}
        self.mutex = threading.Lock()

    def append(self, log: logspool.Log, fs: HeldFS, payload: bytes) -> None:
        try:
            lsn = log.append(payload)
        except logspool.LogspoolError as err:
            with self.mutex:
                self.errors[payload] = err
            return
        seen = fs.durable_snapshot()
        with self.mutex:
            self.lsns[payload] = lsn
            self.durable_at_return[payload] = seen


def _record_ends(path: str) -> dict[int, tuple[str, int, bytes]]:
    """lsn -> (segment name, end offset, payload), read back from the files."""
    out: dict[int, tuple[str, int, bytes]] = {}
    for name in sorted(os.listdir(path)):
        base = fmt.parse_segment_name(name)
        if base is None:
            continue
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        infos: list[seg.RecordInfo] = []
        seg.parse(data, fmt.SEGMENT_HEADER_SIZE, base, 1 << 30, None, infos)
        for info in infos:
            payload = data[
                info.offset + fmt.RECORD_HEADER_SIZE : info.offset + info.size - fmt.RECORD_TRAILER_SIZE
            ]
            out[info.lsn] = (name, info.offset + info.size, payload)
    return out


def _start_queue(
    log: logspool.Log, fs: HeldFS, outcome: Outcome, payloads: list[bytes]
) -> list[threading.Thread]:
    """The first payload's append leads and is held in its fsync; the others queue behind it."""
    fs.hold()
    threads = [threading.Thread(target=outcome.append, args=(log, fs, payloads[0]))]
    threads[0].start()
    assert fs.in_fsync.wait(10)
    for payload in payloads[1:]:
        threads.append(threading.Thread(target=outcome.append, args=(log, fs, payload)))
        threads[-1].start()
    _wait_queued(log, len(payloads) - 1)
    return threads


def test_appends_queued_behind_an_fsync_go_out_in_one_write_and_one_fsync(log_dir: str) -> None:
    fs = HeldFS()
    outcome = Outcome()
    payloads = [f"thread {i}".encode() for i in range(7)]
    with logspool.open(log_dir, durability="always", fs=fs) as log:
        threads = _start_queue(log, fs, outcome, payloads)
        writes_before, fsyncs_before = len(fs.writes), fs.fsyncs
        fs.release()
        for th in threads:
            th.join()
        assert len(fs.writes) - writes_before == 1  # the six queued records: one write
        assert fs.fsyncs - fsyncs_before == 2  # the held one, and one for the six
    assert not outcome.errors
    ends = _record_ends(log_dir)
    assert sorted(ends) == list(range(7))
    assert ends[0][2] == payloads[0]
    for payload, lsn in outcome.lsns.items():
        name, end, stored = ends[lsn]
        assert stored == payload  # each thread was told the lsn of its own record
        assert outcome.durable_at_return[payload].get(name, 0) >= end  # fsynced before the return


def test_a_failed_batch_fails_every_append_in_it_and_leaves_nothing(log_dir: str) -> None:
    fs = HeldFS()
    outcome = Outcome()
    payloads = [f"thread {i}".encode() * 10 for i in range(6)]
    with logspool.open(log_dir, durability="always", fs=fs) as log:
        threads = _start_queue(log, fs, outcome, payloads)
        fs.full = True
        fs.release()
        for th in threads:
            th.join()
        assert set(outcome.lsns) == {payloads[0]}  # written before the disk filled
        assert set(outcome.errors) == set(payloads[1:])
        for err in outcome.errors.values():
            assert isinstance(err, logspool.AppendError)
            assert "No space left" in str(err) and err.path == log_dir
        assert [r.payload for r in log.read()] == [payloads[0]]
        fs.full = False
        assert log.append(b"after") == 1  # the handle goes on
    assert logspool.verify(log_dir).ok
    with logspool.open(log_dir, readonly=True) as log:
        assert [r.payload for r in log.read()] == [payloads[0], b"after"]


def test_a_batch_cut_by_a_failure_after_a_rotation_acknowledges_exactly_what_it_wrote(
    log_dir: str,
) -> None:
    """Three 1,000-byte records fill a 4 KiB segment: the queued batch is written in two
    chunks, and the disk fills before the second. The first chunk's appends succeed (their
    records are in the log, fsynced by the rotation); the others fail, and are not there."""
    fs = HeldFS()
    outcome = Outcome()
    payloads = [bytes([65 + i]) * 1000 for i in range(7)]
    with logspool.open(log_dir, durability="always", segment_size_max=4096, fs=fs) as log:
        fs.spared = {fmt.segment_name(0)}
        threads = _start_queue(log, fs, outcome, payloads)
        fs.full = True
        fs.release()
        for th in threads:
            th.join()
        fs.full = False
        assert log.append(b"after") == len(outcome.lsns)
    stored = {payload: lsn for lsn, (_, _, payload) in _record_ends(log_dir).items()}
    assert stored.pop(b"after") == len(outcome.lsns)
    assert len(outcome.lsns) == 3 and len(outcome.errors) == 4
    assert stored == outcome.lsns  # told success exactly for the records in the log, right lsns
    ends = _record_ends(log_dir)
    for payload, lsn in outcome.lsns.items():
        name, end, _ = ends[lsn]
        assert outcome.durable_at_return[payload].get(name, 0) >= end
    for err in outcome.errors.values():
        assert isinstance(err, logspool.AppendError) and "No space left" in str(err)
    assert logspool.verify(log_dir).ok


def test_an_fsync_failure_fails_the_whole_batch_and_stops_the_handle(log_dir: str) -> None:
    class FsyncFailsAfterHold(HeldFS):
        broken = False

        def fsync(self, fd: int) -> None:
            if self.broken and self._segment(fd) is not None and not self.holding:
                raise OSError(errno.EIO, "Input/output error")
            super().fsync(fd)

        fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault)

    fs = FsyncFailsAfterHold()
    outcome = Outcome()
    payloads = [f"thread {i}".encode() for i in range(5)]
    with logspool.open(log_dir, durability="always", fs=fs) as log:
        threads = _start_queue(log, fs, outcome, payloads)
        fs.broken = True
        fs.release()  # the held fsync completes; the batch's fsync fails
        for th in threads:
            th.join()
        assert set(outcome.lsns) == {payloads[0]}
        assert set(outcome.errors) == set(payloads[1:])
        for err in outcome.errors.values():
            assert isinstance(err, logspool.FailedError) and "Input/output error" in str(err)
        with pytest.raises(logspool.FailedError):
            log.append(b"refused")


class Interrupted(BaseException):
    """What the test's SIGINT handler raises in the main thread (as KeyboardInterrupt would)."""


def test_an_interrupted_queued_append_does_not_strand_the_others(log_dir: str) -> None:
    """Ctrl-C in a thread waiting in the queue (the main thread: signals go there) takes it out of
    the queue; the leader and the threads behind it go on, and so does the interrupted one."""
    fs = HeldFS()
    outcome = Outcome()

    def on_sigint(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with logspool.open(log_dir, durability="always", fs=fs) as log:
            fs.hold()
            leader = threading.Thread(target=outcome.append, args=(log, fs, b"leader"))
            leader.start()
            assert fs.in_fsync.wait(10)

            def interrupt_when_queued() -> None:
                _wait_queued(log, 1)
                os.kill(os.getpid(), signal.SIGINT)

            threading.Thread(target=interrupt_when_queued).start()
            with pytest.raises(Interrupted):
                log.append(b"interrupted")
            behind = threading.Thread(target=outcome.append, args=(log, fs, b"behind"))
            behind.start()
            _wait_queued(log, 1)
            fs.release()
            leader.join(10)
            behind.join(10)
            assert not leader.is_alive() and not behind.is_alive(), "a thread was stranded"
            assert log.append(b"after") == 2
    finally:
        signal.signal(signal.SIGINT, previous)
    assert outcome.lsns == {b"leader": 0, b"behind": 1} and not outcome.errors
    with logspool.open(log_dir, readonly=True) as log:
        assert [r.payload for r in log.read()] == [b"leader", b"behind", b"after"]


class SlowFsyncFS(FileSystem):
    """fsyncs of segment files last at least ``floor_s`` (a slower disk); counts them."""

    def __init__(self, floor_s: float) -> None:
        self.floor_s = floor_s
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        start = time.monotonic()
        super().fsync(fd)
        self.fsyncs += 1
        time.sleep(max(0.0, self.floor_s - (time.monotonic() - start)))

    fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault, the same count)


def test_threads_acknowledged_together_are_written_together_again(log_dir: str) -> None:
    """4 threads appending in a loop: without gathering, the threads one fsync acknowledges miss
    the next batch (it starts with the ones that queued during the fsync), so batches alternate
    between halves of them. The leader waits (less than an fsync) for them to queue again."""
    fs = SlowFsyncFS(0.005)
    count, each = 4, 40
    start = threading.Barrier(count)
    with logspool.open(log_dir, durability="always", fs=fs) as log:
        opened = fs.fsyncs

        def work(i: int) -> None:
            start.wait()
            for j in range(each):
                log.append(f"{i} {j}".encode())

        threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        fsyncs = fs.fsyncs - opened
    records = [r.payload.decode().split() for r in logspool.open(log_dir, readonly=True).read()]
    assert sorted(records, key=lambda r: (int(r[0]), int(r[1]))) == [
        [str(i), str(j)] for i in range(count) for j in range(each)
    ]
    for i in range(count):  # each thread's records in its order
        assert [int(j) for t, j in records if int(t) == i] == list(range(each))
    # 160 records in batches of 4 take 40 fsyncs (measured: 40); without gathering 57-59.
    assert fsyncs <= 48, f"{fsyncs} fsyncs for {count * each} records"


def test_a_thread_that_stops_appending_does_not_hold_up_the_others(log_dir: str) -> None:
    """The leader waits for the threads of the last batch; one that never appends again costs
    that wait once (at most an fsync's time, capped), and the others go on."""
    fs = SlowFsyncFS(0.02)
    with logspool.open(log_dir + "-alone", durability="always", fs=fs) as log:
        started = time.monotonic()  # the baseline, in the same run: a thread alone from the start
        for _ in range(10):
            log.append(b"alone")
        alone = time.monotonic() - started
    with logspool.open(log_dir, durability="always", fs=fs) as log:
        for _ in range(3):  # two threads in one batch: both expected back, then one leaves
            pair = [threading.Thread(target=log.append, args=(p,)) for p in (b"a", b"b")]
            for th in pair:
                th.start()
            for th in pair:
                th.join()
        started = time.monotonic()
        for _ in range(10):
            log.append(b"alone")
        elapsed = time.monotonic() - started
        assert log.next_lsn == 16
    # 10 fsyncs of 20 ms, and one wait of at most 2 ms for the thread that left: about the
    # baseline. Waiting for it at every append (the failure) would add an fsync's time to each,
    # twice the baseline; the bound is relative, so a loaded machine slows both alike.
    assert elapsed < 1.5 * alone + 0.05, f"{elapsed:.3f} s for 10 appends alone, {alone:.3f} s at the start"
