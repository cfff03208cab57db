"""A batch appended with ``Tail.append_batch`` is seen whole or not at all, by every reader and
after every crash (FORMAT.md §7.1: its first record's CRC is written complemented, the rest of the
batch after it, then an fsync, then the right CRC).

How:
- power loss at every operation of a workload of batches (across rotations, one larger than a
  segment, several chunks each) and plain appends, through the ``_fs`` seam: each crash state the
  model allows holds a prefix of the appends in which every batch is whole or absent, holds every
  acknowledged one, verifies clean, and reads the same after a second open (with the batches
  through ``append_batch``, and through ``append_framed``, framed by the Spark commit's numpy
  framer);
- the death of the process at every operation (the files as the page cache holds them, opened
  in the same boot, where a torn write followed by valid records would be damage): the same;
- writer processes killed with SIGKILL at random moments while appending large batches: the log
  opens and holds whole batches only;
- reader processes polling (one-shot reads) and following (a tail) while large batches are
  appended never see part of one: a one-shot read ends at a batch boundary, and a follower that
  has the first record of a batch has all of it at once (``next(timeout=0)``).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import logspool
from logspool import _format as fmt
from logspool._fs import FileSystem
from tests.crash.faultfs import FaultFS, PowerLoss, materialize

STATES_PER_CUT = 2 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))
_RECORD = re.compile(rb"b(\d+):(\d+)/(\d+):")


def batch(n: int, count: int, size: int = 100) -> list[bytes]:
    """Payloads that say their batch, their place in it and its count."""
    out = []
    for i in range(count):
        head = b"b%d:%d/%d:" % (n, i, count)
        out.append(head + b"." * max(0, size - len(head)))
    return out


def framed(payloads: list[bytes]) -> int:
    return sum(len(p) for p in payloads) + len(payloads) * fmt.RECORD_OVERHEAD


def check_whole(payloads: list[bytes]) -> list[int]:
    """The batch numbers the payloads hold, each batch whole and in order; AssertionError if a
    batch is there in part."""
    batches: list[int] = []
    i = 0
    while i < len(payloads):  # bounded: each turn takes one whole batch
        m = _RECORD.match(payloads[i])
        assert m is not None, f"record {i} is not one of a batch: {payloads[i][:40]!r}"
        n, at, count = (int(g) for g in m.groups())
        assert at == 0, f"record {i} is record {at} of batch {n}: the batch's start is missing"
        got = payloads[i : i + count]
        assert len(got) == count, f"batch {n}: {len(got)} of its {count} records are there"
        assert got == batch(n, count, len(payloads[i])), f"batch {n} is not as appended"
        batches.append(n)
        i += count
    return batches


# --- power loss and process death at every operation ---------------------------------------------
Workload = Callable[[str, FaultFS, list[list[bytes]], list[list[bytes]]], None]


def numpy_framer(chunks: list[list[bytes]]) -> Callable[[Any], Iterator[Any]]:
    """``Tail.append_framed``'s ``frame`` for ``chunks``: framed as the Spark commit frames
    (``logspool.spark._framing``, numpy), a block a chunk."""
    import numpy as np

    from logspool.spark import _framing

    def frame(start: Any) -> Iterator[Any]:
        lsn, offset, due = start.lsn, start.offset, start.index_due
        for chunk in chunks:
            sizes = np.array([len(p) for p in chunk], np.uint32)
            data = memoryview(b"".join(chunk))
            block = _framing.frame(
                sizes,
                data,
                _framing.payload_crcs(sizes, data),
                lsn=lsn,
                timestamp=start.timestamp,
                durable_lsn=start.durable_lsn,
                offset=offset,
                due=due,
                interval=start.index_interval,
            )
            yield block
            lsn, offset, due = lsn + block.count, offset + len(block.data), block.due

    return frame


def batches_workload(durability: str, framing: str = "batch") -> Workload:
    """Batches and single appends (each a batch of one); ``attempted`` gets each before its call,
    ``acked`` after the call that made it durable returned. ``framing``: "batch", the batches
    through ``append_batch``; "framed", through ``append_framed`` (the Spark commit's)."""

    def run(path: str, fs: FaultFS, attempted: list[list[bytes]], acked: list[list[bytes]]) -> None:
        log = logspool.open(path, fs=fs, durability=durability, segment_size_max=4096, index_interval=512)
        plan = [(1, 1), (12, 3), (1, 1), (40, 4), (8, 2), (25, 5), (1, 1)]  # (records, chunks)
        for n, (count, chunks) in enumerate(plan):
            payloads = batch(n, count)
            attempted.append(payloads)
            if count == 1:
                log.append(payloads[0])
            else:
                step = -(-count // chunks)
                chunks = [payloads[i : i + step] for i in range(0, count, step)]
                with log.exclusive() as tail:
                    if framing == "framed":
                        tail.append_framed(numpy_framer(chunks), size=framed(payloads))
                    else:
                        tail.append_batch(chunks, size=framed(payloads))
            if durability == "os":
                log.sync()
            acked[:] = attempted
        log.close()

    return run


def check_state(path: str, attempted: list[list[bytes]], acked: list[list[bytes]]) -> None:
    with logspool.open(path) as log:
        got = [(r.lsn, r.payload) for r in log.read()]
    assert [lsn for lsn, _p in got] == list(range(len(got))), "lsns are not 0, 1, 2, ..."
    numbers = check_whole([p for _lsn, p in got])
    assert numbers == list(range(len(numbers))), f"not a prefix of the batches appended: {numbers}"
    assert len(numbers) <= len(attempted)
    assert len(numbers) >= len(acked), f"acknowledged batches lost: {len(numbers)} < {len(acked)}"
    report = logspool.verify(path)
    assert report.ok, [str(p) for p in report.problems]
    with logspool.open(path) as log:
        assert [(r.lsn, r.payload) for r in log.read()] == got, "a second open changed the records"


@pytest.mark.parametrize(
    ("durability", "framing"), [("always", "batch"), ("os", "batch"), ("always", "framed")]
)
def test_power_loss_or_process_death_at_every_operation_leaves_each_batch_whole_or_absent(
    fast_dir: Path, durability: str, framing: str
) -> None:
    if framing == "framed":
        pytest.importorskip("numpy")
        pytest.importorskip("pyarrow")
    workload = batches_workload(durability, framing)
    clean = fast_dir / "clean"
    fs = FaultFS(str(clean))
    workload(str(clean / "log"), fs, [], [])
    total = fs.count
    rng = random.Random(28)
    for n in range(1, total + 1):
        work = fast_dir / f"cut{n}"
        work.mkdir()
        fs = FaultFS(str(work), crash_at=n)
        attempted: list[list[bytes]] = []
        acked: list[list[bytes]] = []
        try:
            workload(str(work / "log"), fs, attempted, acked)
        except PowerLoss:
            pass
        finally:
            fs.release()
        assert fs.crashed, f"operation {n} of {total} was never reached"
        where = f"operation {n} of {total}"
        for k, state in enumerate(fs.crash_states(rng, STATES_PER_CUT)):
            target = fast_dir / f"after{n}.{k}"
            materialize(state, str(target))  # (opened in another boot: a power loss)
            try:
                check_state(str(target / "log"), attempted, acked)
            except AssertionError as err:
                raise AssertionError(f"power cut at {where}, state {k}: {err}") from err
        # The process died there instead: the files hold every write made, and the next open
        # runs in the same boot (FaultFS's), where damage followed by valid records is damage.
        if (work / "log" / "meta").exists():
            same_boot = FaultFS(str(work))
            same_boot._boot = fs._boot
            try:
                with logspool.open(str(work / "log"), fs=same_boot) as log:
                    payloads = [r.payload for r in log.read()]
                numbers = check_whole(payloads)
                assert numbers == list(range(len(numbers))), numbers
                assert len(numbers) >= len(acked)
            except (AssertionError, logspool.CorruptionError) as err:
                raise AssertionError(f"process death at {where}: {err}") from err
            finally:
                same_boot.release()
    assert total > 60


# --- real processes --------------------------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import sys, logspool
    from logspool import _format as fmt
    path, start, count, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    log = logspool.open(path, segment_size_max=int(sys.argv[5]), durability="os")
    print("open", flush=True)
    for n in range(start, 1 << 30):
        head = [b"b%d:%d/%d:" % (n, i, count) for i in range(count)]
        payloads = [h + b"." * (100 - len(h)) for h in head]
        size = sum(map(len, payloads)) + count * fmt.RECORD_OVERHEAD
        with log.exclusive() as tail:
            tail.append_batch((payloads[i : i + chunk] for i in range(0, count, chunk)), size=size)
        print(n, flush=True)
    """
)


def test_writers_killed_while_appending_large_batches_leave_whole_batches(tmp_path: Path) -> None:
    """Kill -9 a writer of large batches at random moments, until at least three kills landed
    inside a batch (its recovery cut an unpublished batch, keeping a copy in quarantine/), within
    a bound of rounds and time; after each, the log holds whole batches, in order."""
    path = str(tmp_path / "log")
    quarantine = Path(path) / "quarantine"
    rng = random.Random(5)
    next_batch = next_lsn = 0
    inside = rnd = 0
    deadline = time.monotonic() + 150
    for rnd in range(200):  # bounded; ends once enough kills were seen inside a batch
        if rnd >= 12 and (inside >= 3 or time.monotonic() > deadline):
            break
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, path, str(next_batch), "5000", "300", str(1 << 20)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "open"
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.communicate()
        with logspool.open(path) as log:  # recovery (same boot): no CorruptionError
            new = [r.payload for r in log.read(next_lsn)]  # (what the last round left was checked)
        numbers = check_whole(new)
        assert numbers == list(range(next_batch, next_batch + len(numbers))), f"round {rnd}: {numbers}"
        next_batch += len(numbers)
        next_lsn += len(new)
        inside = len(list(quarantine.iterdir())) if quarantine.exists() else 0
    assert inside >= 3, f"only {inside} of {rnd} kills landed inside a batch: nothing was proven"
    assert logspool.verify(path).ok


READER = textwrap.dedent(
    """
    import sys, time, logspool
    path, total = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    deadline = time.monotonic() + 90
    with logspool.open(path, readonly=True) as log:
        follower = log.reader(start="earliest")
        polled = followed = 0
        while time.monotonic() < deadline and followed < total:
            polled += len(list(log.read(start=polled)))  # a one-shot read: at a batch boundary
            rec = follower.next(timeout=0.002)
            while rec is not None:  # a follower: the first record of a batch brings all of it
                at, count = rec.payload.split(b":")[1].split(b"/")
                rest = int(count) - int(at) - 1
                for _ in range(rest):
                    if follower.next(timeout=0) is None:
                        print("partial", rec.lsn, flush=True)
                        sys.exit(1)
                followed += 1 + rest
                rec = follower.next(timeout=0)
            print(polled, followed, flush=True)
    """
)


def test_readers_in_other_processes_never_see_part_of_a_batch(tmp_path: Path) -> None:
    path = str(tmp_path / "log")
    count, batches = 30000, 10  # ~4 MiB a batch, written in 15 chunks: it takes a while
    with logspool.open(path, segment_size_max=16 << 20) as log:
        log.append(b"b0:0/1:" + b"." * 93)
    total = 1 + count * batches
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, path, str(total)], stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None
    assert reader.stdout.readline().strip() == "ready"
    lines: list[list[int]] = []

    def reader_at(end: int) -> None:
        """Until the reader has followed the log to ``end`` (it looks at the end while the next
        batch is written, rather than lag behind the writer)."""
        assert reader.stdout is not None
        for line in reader.stdout:  # bounded: the reader stops after 90 s
            lines.append([int(x) if x.isdigit() else -1 for x in line.split()])
            if lines[-1][-1] >= end or lines[-1][0] == -1:
                return

    with logspool.open(path, durability="os", segment_size_max=16 << 20) as log:
        for n in range(1, batches + 1):
            reader_at(1 + count * (n - 1))
            payloads = batch(n, count)
            with log.exclusive() as tail:
                tail.append_batch(
                    (payloads[i : i + 2000] for i in range(0, count, 2000)), size=framed(payloads)
                )
    out, _ = reader.communicate(timeout=120)
    lines += [[int(x) if x.isdigit() else -1 for x in line.split()] for line in out.split("\n") if line]
    assert reader.returncode == 0, lines[-3:]
    boundaries = {1 + count * k for k in range(batches + 1)}
    assert lines and lines[-1][1] == total, lines[-1:]
    for polled, followed in lines:
        assert polled in boundaries, f"a one-shot read saw {polled} records: part of a batch"
        assert followed in boundaries, followed


@pytest.mark.parametrize(
    ("change", "cut"),
    [
        (lambda right: right[:2] + bytes(b ^ 0xFF for b in right[2:]), True),  # a publish torn mid-CRC
        (lambda right: bytes(b ^ 0xFF for b in right), True),  # never published
        (lambda right: right[:3] + bytes([right[3] ^ 0x01]), False),  # damage, not a publish
    ],
    ids=["torn-publish", "unpublished", "damage"],
)
def test_an_unpublished_head_is_cut_in_the_same_boot_and_other_damage_is_still_reported(
    tmp_path: Path, change: Callable[[bytes], bytes], cut: bool
) -> None:
    """The batch's first record with each CRC byte right or complemented (a publish torn across a
    page boundary, or none) is cut with the batch, in the boot that wrote it; a CRC wrong in any
    other way, with valid records after it, is damage there as before."""
    path = tmp_path / "log"
    with logspool.open(path, durability="os") as log:
        log.append(b"before")
        payloads = batch(1, 5)
        with log.exclusive() as tail:
            tail.append_batch([payloads], size=framed(payloads))
    segment = path / "00000000000000000000.seg"
    data = bytearray(segment.read_bytes())
    crc_at = fmt.SEGMENT_HEADER_SIZE + fmt.RECORD_OVERHEAD + len(b"before") + 32 + len(payloads[0])
    data[crc_at : crc_at + 4] = change(bytes(data[crc_at : crc_at + 4]))
    segment.write_bytes(bytes(data))
    if cut:
        with logspool.open(path) as log:  # (this boot: the one that wrote the log)
            assert [r.payload for r in log.read()] == [b"before"]
        assert logspool.verify(path).ok
    else:
        with pytest.raises(logspool.CorruptionError, match="followed by valid records"):
            logspool.open(path)


# --- an exception of any kind between the first write and the publish ----------------------------
class _InterruptingFS(FileSystem):
    """The real file system, whose next fsync, once armed, raises KeyboardInterrupt (as a Ctrl-C
    arriving there would) after the fsync itself."""

    armed = False

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt

    fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault, the same count)


@pytest.mark.parametrize("mode", ["single_writer", "hold", "plain"])
def test_an_interrupted_batch_is_never_written_over_nor_read(tmp_path: Path, mode: str) -> None:
    """A KeyboardInterrupt in the batch's fsync (after its records were written, before the
    publish) leaves the handle unsure of its end: the next append recovers it first, so the
    unpublished batch is cut, never left readable behind appends that skipped the catch-up (a
    single writer, or a handle holding the writer lock between appends: review of issue 28)."""
    path = tmp_path / "log"
    fs = _InterruptingFS()
    log = logspool.open(
        path, fs=fs, single_writer=mode == "single_writer", durability="always" if mode == "plain" else "os"
    )
    try:
        log.append_many([b"A%d" % i for i in range(3)])
        if mode == "hold":
            log.append(b"A3")
            log.append(b"A4")  # (a burst: the handle keeps the writer lock between them)
        before = [b"A%d" % i for i in range(5 if mode == "hold" else 3)]
        payloads = batch(1, 5)
        fs.armed = True
        with pytest.raises(KeyboardInterrupt), log.exclusive() as tail:
            tail.append_batch([payloads], size=framed(payloads))
        assert not fs.armed, "the batch's fsync was not reached"
        after = [log.append(b"C%d" % i) for i in range(2)]
        assert after == [len(before), len(before) + 1]
        with logspool.open(path, readonly=True) as reader:
            assert [r.payload for r in reader.read()] == [*before, b"C0", b"C1"]
    finally:
        log.close()
    with logspool.open(path) as log:  # a writer's recovery keeps the same records
        assert [r.payload for r in log.read()] == [*before, b"C0", b"C1"]
    assert logspool.verify(path).ok


def test_a_live_writer_never_adopts_the_unpublished_batch_of_a_writer_that_died(tmp_path: Path) -> None:
    """A handle that dies at any operation of its batch (the process gone: every write made is in
    the files) leaves a live writer in another handle, whose catch-up trusts the tail hint (FORMAT.md
    §8.1), a log with the batch whole or absent: the hint names no record of a batch before its
    publish (review of issue 28: nothing else held that order)."""
    before = [b"A%d" % i for i in range(3)]
    payloads = batch(1, 40)

    def run(work: Path, crash_at: int) -> FaultFS:
        """The log with a live writer; a second handle through FaultFS appends the batch, dying
        at operation ``crash_at`` (0: never); the live writer appends after it."""
        path = work / "log"
        with logspool.open(path, durability="os") as log:
            log.append_many(before)
        live = logspool.open(path, durability="os")  # another handle, the real file system
        try:
            live.append(b"B0")
            fs = FaultFS(str(work), crash_at=crash_at)
            try:
                dying = logspool.open(path, fs=fs, durability="os")
                with dying.exclusive() as tail:
                    tail.append_batch([payloads[:15], payloads[15:]], size=framed(payloads))
            except PowerLoss:
                pass
            finally:
                fs.release()  # (its flock goes with its fds, as a dead process's does)
            live.append(b"C0")
        finally:
            live.close()
        return fs

    total = run(tmp_path / "clean", 0).count
    for n in range(1, total + 1):
        work = tmp_path / f"cut{n}"
        assert run(work, n).crashed, f"operation {n} of {total} was never reached"
        with logspool.open(work / "log", readonly=True) as log:
            got = [r.payload for r in log.read()]
        assert got in ([*before, b"B0", b"C0"], [*before, b"B0", *payloads, b"C0"]), f"operation {n}: {got}"
        assert logspool.verify(work / "log").ok, f"operation {n}"
