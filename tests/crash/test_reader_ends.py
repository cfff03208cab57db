"""A reader at the end of a segment, against what other handles do meanwhile (found by a review
of the reader's once-per-end look for the next segment).

* A segment made, filled and sealed by another handle between the reader's failed open of it
  and its listing of the directory is read, not reported missing (the listing shows segments
  after it: it looked like a segment deleted between two others).
* A follower parked at the end of an unsealed segment goes on when a segment appears after it
  without a seal there (damage: FORMAT.md §9.2 says go on), and a seek back reads through it;
  the look for that segment is cached a short while, never for good.

How: through the I/O seam only. The writer's creation of the next segment waits at a gate (its
``open`` with O_CREAT), and the reader's failed open of that segment lets the writer go on,
append and rotate, before it returns, as a reader descheduled between the two would see it.
"""

from __future__ import annotations

import os
import threading
import time

import logspool
from logspool import _format as fmt
from logspool._fs import FileSystem


class GatedCreate(FileSystem):
    """The writer's: creating segment ``base`` waits until ``go`` is set (``at`` set first)."""

    def __init__(self, base: int) -> None:
        super().__init__()
        self.name = fmt.segment_name(base)
        self.at = threading.Event()
        self.go = threading.Event()

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        if flags & os.O_CREAT and path.endswith(self.name) and not self.go.is_set():
            self.at.set()
            assert self.go.wait(60)
        return super().open(path, flags, mode)


class LateListing(FileSystem):
    """The reader's: when its open of segment ``base`` fails, ``meanwhile`` runs before the
    failure is seen (once)."""

    def __init__(self, base: int, meanwhile: object) -> None:
        super().__init__()
        self.name = fmt.segment_name(base)
        self.meanwhile = meanwhile
        self.ran = False

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        try:
            return super().open(path, flags, mode)
        except FileNotFoundError:
            if path.endswith(self.name) and not self.ran:
                self.ran = True
                self.meanwhile()  # type: ignore[operator]
            raise


def test_a_segment_made_filled_and_sealed_after_a_failed_open_is_read(log_dir: str) -> None:
    gate = GatedCreate(3)
    log = logspool.open(log_dir, durability="os", fs=gate)
    log.append_many([b"a", b"b", b"c"])
    rotating = threading.Thread(target=log.cutover)  # (seals segment 0, then waits to make 3)
    rotating.start()
    assert gate.at.wait(60)

    def meanwhile() -> None:
        gate.go.set()
        rotating.join(60)
        log.append(b"d")  # lsn 3, in segment 3
        log.cutover()  # segment 3 sealed, segment 4 made

    reader_fs = LateListing(3, meanwhile)
    with logspool.open(log_dir, readonly=True, fs=reader_fs) as view:
        records = list(view.read())
    assert reader_fs.ran
    assert [r.payload for r in records] == [b"a", b"b", b"c", b"d"]
    log.close()


def test_a_follower_goes_on_past_a_seal_lost_after_it_reached_the_end(log_dir: str) -> None:
    log = logspool.open(log_dir, durability="os")
    log.append_many([b"%d" % i for i in range(5)])
    reader = log.reader("earliest")
    assert [r.lsn for r in reader] == [0, 1, 2, 3, 4]
    assert reader.next(timeout=0.05) is None  # (at the end: the look for a segment after it made)
    first = os.path.join(log_dir, fmt.segment_name(0))
    log.cutover()  # (segment 0: its records, then its seal, nothing after)
    os.truncate(first, os.path.getsize(first) - fmt.RECORD_OVERHEAD)  # the seal lost: damage
    log.append(b"after")
    got = reader.next(timeout=30)  # (a follower looks past the end at each look)
    assert got is not None and (got.lsn, got.payload) == (5, b"after")
    reader.seek(0)
    assert [r.lsn for r in reader] == [0, 1, 2, 3, 4, 5]
    reader.close()
    log.close()


def test_an_iterating_reader_goes_on_past_a_lost_seal_a_little_later(log_dir: str) -> None:
    """As a store's catch-up reads (iterating from its position before each read): the look for
    a segment after the end is cached for a moment, never for good."""
    log = logspool.open(log_dir, durability="os")
    log.append_many([b"%d" % i for i in range(5)])
    reader = log.reader("earliest")
    assert [r.lsn for r in reader] == [0, 1, 2, 3, 4]
    first = os.path.join(log_dir, fmt.segment_name(0))
    log.cutover()
    os.truncate(first, os.path.getsize(first) - fmt.RECORD_OVERHEAD)  # the seal lost: damage
    log.append(b"after")
    deadline = time.monotonic() + 30
    got: list[int] = []
    while not got and time.monotonic() < deadline:  # (bounded: the cache lasts 0.1 s)
        got = [r.lsn for r in reader]
        time.sleep(0.01)
    assert got == [5]
    reader.close()
    log.close()
