"""Zeros written ahead of a durable writer's records (``ActiveSegment._zero_ahead``,
``limits.ZERO_AHEAD_SIZE``): they may only ever cover zeros, never a record, and never make a
segment longer; a writer that does not wait for its fsyncs writes none; a failed one changes
nothing.

How: a FileSystem subclass (the one I/O seam) checks each write of zeros as it happens: the bytes
it covers read as zeros before it, and it ends inside the file. Two handles of one log append in
turns (as two processes would: each its own writer lock's holder in turn), so that each writes
its zeros past records the other wrote after its own last append.
"""

from __future__ import annotations

import errno
import os

import logspool
from logspool import limits
from logspool._fs import FileSystem

RECORD = b"r" * 150  # (a group commit of 13 such records is the 2 KB the limit's note measured)


class ChecksZeros(FileSystem):
    """Records each pwrite of zeros past 4 KiB (the zero-ahead's; a record is never all zeros)
    after checking that it covers only zeros and ends inside the file. ``fail``: such writes
    write half, then raise ENOSPC."""

    def __init__(self) -> None:
        super().__init__()
        self.zero_writes: list[tuple[int, int]] = []
        self.fail = False

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        if len(data) >= 4096 and not any(data):
            before = os.pread(fd, len(data), offset)
            assert before == bytes(len(before)), f"zeros written over data at {offset}"
            assert offset + len(data) <= os.fstat(fd).st_size, "zeros written past the file's end"
            self.zero_writes.append((offset, len(data)))
            if self.fail:
                os.pwrite(fd, data[: len(data) // 2], offset)
                raise OSError(errno.ENOSPC, "No space left on device")
        super().pwrite(fd, data, offset)


def test_a_durable_writer_zeroes_ahead_of_its_records_never_over_them(log_dir: str) -> None:
    fs = ChecksZeros()
    a = logspool.open(log_dir, fs=fs)
    b = logspool.open(log_dir, fs=fs)
    written: list[bytes] = []
    for i in range(300):  # ~600 KB of records in groups of 13, the two handles in turns
        group = [RECORD[:-8] + b"%08d" % (13 * i + j) for j in range(13)]
        (a if i % 2 == 0 else b).append_many(group)
        written += group
    a.close()
    b.close()
    # Ahead of ~600 KB of records, 128 KiB at a time, by both handles: several writes each.
    assert len(fs.zero_writes) >= 4
    assert all(size <= limits.ZERO_AHEAD_SIZE for _, size in fs.zero_writes)
    assert len({offset for offset, _ in fs.zero_writes}) == len(fs.zero_writes)
    with logspool.open(log_dir) as log:
        assert [r.payload for r in log.read()] == written
    assert logspool.verify(log_dir).ok


def test_a_writer_that_does_not_wait_for_its_fsync_writes_no_zeros(log_dir: str) -> None:
    fs = ChecksZeros()
    with logspool.open(log_dir, fs=fs, durability="os") as log:
        for _ in range(100):
            log.append_many([RECORD] * 13)
    assert fs.zero_writes == []


def test_a_failed_zero_write_changes_nothing(log_dir: str) -> None:
    fs = ChecksZeros()
    fs.fail = True
    with logspool.open(log_dir, fs=fs) as log:
        for i in range(100):
            log.append_many([b"%d-%d" % (i, j) + RECORD for j in range(13)])
        assert fs.zero_writes  # (each tried, half written, refused: the appends went on)
        assert log.append(b"last") == 1300
    with logspool.open(log_dir) as log:
        payloads = [r.payload for r in log.read()]
    assert payloads[:2] == [b"0-0" + RECORD, b"0-1" + RECORD] and payloads[-1] == b"last"
    assert len(payloads) == 1301
    assert logspool.verify(log_dir).ok


def test_zeros_never_follow_a_seal_after_another_writer_cut_the_zeros(log_dir: str) -> None:
    """A durable handle idle while a ``single_writer`` one appends and closes (its close cuts the
    preallocated zeros, and it leaves no tail hint: the first catches up by parsing), then seals
    the segment: no zeros after the seal, the file not lengthened (a review found both: the
    first handle still believed in the space it had preallocated)."""
    fs = ChecksZeros()
    segment = 256 * 1024
    a = logspool.open(log_dir, fs=fs, segment_size_max=segment)
    a.append_many([RECORD] * 13)  # (preallocated to the segment's size, zeros written ahead)
    with logspool.open(log_dir, single_writer=True) as b:
        for _ in range(130):
            b.append_many([b"b" * 1500])
    first = os.path.join(log_dir, "00000000000000000000.seg")
    cut = os.path.getsize(first)
    assert cut < segment  # (the zeros after b's records were cut)
    a.append_many([b"d" * 1000] * 60)  # (does not fit: a seals the first segment)
    a.close()
    with open(first, "rb") as f:
        sealed = f.read()
    assert len(sealed) == cut + 36 and any(sealed[-36:])  # its records, then the seal: nothing after
    report = logspool.verify(log_dir)
    assert report.ok, [str(p) for p in report.problems]
    with logspool.open(log_dir) as log:
        assert len(list(log.read())) == 13 + 130 + 60
