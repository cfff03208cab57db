"""A failed fsync, under the semantics Linux really has (fsyncgate), then a power failure.

When fsync fails, Linux drops the dirty pages it could not write, marks them clean and clears
the error: a second fsync "succeeds" without writing them, and reads keep returning them from
the page cache until the power goes. ``FaultFS(fsyncgate=True)`` models exactly that.

- The variant we reject, "retry the fsync and carry on" (a FileSystem that retries once), goes
  on acknowledging appends; after the power failure acknowledged records are gone. The sweep
  over every fsync of the workload must find that, or this test proves nothing.
- Our log fails stop (FailedError, nothing acknowledged past the failure). After the power
  failure, every record acknowledged before it is there, at every fsync the fault can hit.
"""

from __future__ import annotations

import errno
from pathlib import Path

import logspool
from tests.crash.faultfs import Fault, FaultFS, materialize

RECORDS = 24


class RetryingFS(FaultFS):
    """The rejected variant: an fsync that fails is retried, and the caller carries on."""

    def fsync(self, fd: int) -> None:
        try:
            super().fsync(fd)
        except OSError:
            super().fsync(fd)  # "succeeds": the dropped pages are never written

    fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault, the same count)


def payload(i: int) -> bytes:
    return b"acknowledged-%03d-" % i + b"p" * 100


def appends(path: Path, fs: FaultFS) -> list[bytes]:
    """Append until done or until the log fails; returns the acknowledged payloads."""
    acked: list[bytes] = []
    with logspool.open(path, fs=fs, durability="always", segment_size_max=1 << 20) as log:
        for i in range(RECORDS):
            try:
                log.append(payload(i))
            except logspool.FailedError:
                break
            acked.append(payload(i))
    return acked


def lost_after_power_failure(fs: FaultFS, base: Path, acked: list[bytes]) -> list[bytes]:
    """Cut the power (keep only what the disk has) and return the acknowledged records missing."""
    fs.release()
    state = next(fs.crash_states(__import__("random").Random(0), 1))  # only what reached the disk
    target = base / "after"
    materialize(state, str(target))
    try:
        with logspool.open(target / "log", readonly=True) as log:
            got = {r.payload for r in log.read()}
    except logspool.CorruptionError:
        got = set()
    return [p for p in acked if p not in got]


def fsync_ops(base: Path) -> list[int]:
    """The operation numbers of the appends' fsyncs in a clean run (after the log exists)."""
    (base / "count").mkdir()
    fs = FaultFS(str(base / "count"))
    appends(base / "count" / "log", fs)
    fs.release()
    # (An fsync right after an msync makes the sync mark durable, on close and at most once a
    # second: not an append's.)
    ops = [n + 1 for n, kind in enumerate(fs.kinds) if kind == "fsync" and fs.kinds[n - 1] != "msync"]
    return ops[len(ops) - RECORDS :]  # one per durable append


def test_retrying_a_failed_fsync_would_lose_acknowledged_records(fast_dir: Path) -> None:
    lost_somewhere = 0
    for n in fsync_ops(fast_dir)[:-1]:
        work = fast_dir / f"retry{n}"
        work.mkdir()
        fs = RetryingFS(str(work), fault=Fault(n, errno.EIO, ops=("fsync",)), fsyncgate=True)
        acked = appends(work / "log", fs)
        assert len(acked) == RECORDS  # the retry hid the error: everything was acknowledged
        lost_somewhere += bool(lost_after_power_failure(fs, work, acked))
    assert lost_somewhere > 0, "the fsyncgate model never lost an acknowledged record"


def test_our_log_fails_stop_and_loses_nothing_acknowledged(fast_dir: Path) -> None:
    ops = fsync_ops(fast_dir)
    for k, n in enumerate(ops):
        work = fast_dir / f"ours{n}"
        work.mkdir()
        fs = FaultFS(str(work), fault=Fault(n, errno.EIO, ops=("fsync",)), fsyncgate=True)
        acked = appends(work / "log", fs)
        assert fs.faults_raised == 1 and len(acked) == k, "the failed append was acknowledged"
        assert lost_after_power_failure(fs, work, acked) == [], f"fsync {k} failed"


def test_a_log_reopened_after_the_failure_in_the_same_boot_leaves_no_hole(fast_dir: Path) -> None:
    """The dropped pages are still readable, so a new handle adopts their records and writes
    after them; unless it makes those pages dirty again, its own fsyncs leave a hole on disk in
    front of records it acknowledged, and the next open after a power failure refuses the log."""
    ops = fsync_ops(fast_dir)
    for n in ops[:-1]:
        work = fast_dir / f"reopen{n}"
        work.mkdir()
        fs = FaultFS(str(work), fault=Fault(n, errno.EIO, ops=("fsync",)), fsyncgate=True)
        acked = appends(work / "log", fs)
        with logspool.open(work / "log", fs=fs, durability="always") as log:
            for i in range(100, 105):
                log.append(payload(i))
                acked.append(payload(i))
        assert lost_after_power_failure(fs, work, acked) == [], f"fault at operation {n}"
        with logspool.open(work / "after" / "log") as log:
            assert [r.lsn for r in log.read()] == list(range(log.info().next_lsn))
        assert logspool.verify(work / "after" / "log").ok


def _rotating_appends(path: Path, fs: FaultFS) -> list[bytes]:
    """``appends``, with records of 200 KB into segments of 1 MiB: a new segment every fifth
    record; an append that fails without failing the log (not acknowledged) goes on to the next."""
    acked: list[bytes] = []
    try:
        log = logspool.open(path, fs=fs, durability="always", segment_size_max=1 << 20)
    except (logspool.FailedError, OSError):
        return acked  # (creating the log failed, its meta or its first segment: never opened)
    with log:
        for i in range(20):
            big = payload(i) + b"r" * 200_000
            try:
                log.append(big)
            except logspool.FailedError:
                break
            except logspool.AppendError:
                continue
            acked.append(big)
    return acked


def test_a_failed_fsync_of_a_new_segment_or_its_directory_fails_the_log(fast_dir: Path) -> None:
    """Each fsync a rotation makes to create the next segment (its file, then its directory)
    fails in turn: the log fails stop, and after a power failure nothing acknowledged is missing.
    (Before, a failed directory fsync was an append's error only: the next append found the new
    segment there, wrote into it and was acknowledged, and the power failure took the segment's
    name with its records.)"""
    (fast_dir / "count").mkdir()
    counting = FaultFS(str(fast_dir / "count"))
    _rotating_appends(fast_dir / "count" / "log", counting)
    counting.release()
    kinds = counting.kinds
    # a new segment's fsyncs: the fsync of its file just before the directory's, and that one
    creating = [n + 1 for n, kind in enumerate(kinds) if kind == "fsync_dir"]
    creating += [n for n in creating if kinds[n - 2] == "fsync"]
    assert len(creating) >= 4, f"the workload rotated too little: {kinds}"
    for n in sorted(creating):
        kind = kinds[n - 1]
        work = fast_dir / f"rotate{n}"
        work.mkdir()
        fs = FaultFS(str(work), fault=Fault(n, errno.EIO, ops=(kind,)), fsyncgate=True)
        acked = _rotating_appends(work / "log", fs)
        assert fs.faults_raised == 1, f"the {kind} at operation {n} was not reached"
        if not acked:  # (the log was never created: nothing to lose)
            fs.release()
            continue
        assert lost_after_power_failure(fs, work, acked) == [], f"{kind} at operation {n} failed"
