"""Disk full and I/O errors through the _fs seam: nothing partial is visible, fsync errors stop.

A FileSystem subclass writes half of a segment write and then raises ENOSPC (what a filling disk
does), or fails an fsync with EIO. The log must report the error, keep every earlier record
readable, show nothing of the failed append, and accept appends once space is back; after an
fsync error the handle must refuse everything (fail-stop), and a reopen must recover.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import logspool
from logspool import jobs, kv
from logspool._fs import FileSystem


class DiskFills(FileSystem):
    """Fails segment writes with ENOSPC after writing half, and preallocation with ENOSPC, while
    ``full`` is set."""

    full = False

    def write(self, fd: int, data: bytes) -> None:
        if self.full and len(data) > 32:
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write(fd, data)

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        if self.full and len(data) > 32:
            os.pwrite(fd, data[: len(data) // 2], offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        super().pwrite(fd, data, offset)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().allocate(fd, offset, length)


class FsyncFails(FileSystem):
    broken = False

    def fsync(self, fd: int) -> None:
        if self.broken:
            raise OSError(errno.EIO, "Input/output error")
        super().fsync(fd)

    fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault, the same count)


def test_disk_full_leaves_nothing_partial_and_appends_resume(log_dir: str) -> None:
    fs = DiskFills()
    with logspool.open(log_dir, fs=fs) as log:
        log.append_many([b"before-1", b"before-2"])
        fs.full = True
        with pytest.raises(logspool.AppendError, match="No space left") as info:
            log.append(b"x" * 500)
        assert info.value.path == log_dir
        with pytest.raises(logspool.AppendError):
            log.append_many([b"y" * 100] * 10)
        assert [r.payload for r in log.read()] == [b"before-1", b"before-2"]
        assert logspool.verify(log_dir).ok
        fs.full = False
        assert log.append(b"after") == 2
    with logspool.open(log_dir) as log:
        assert [r.payload for r in log.read()] == [b"before-1", b"before-2", b"after"]


def test_fsync_error_makes_the_handle_fail_stop(log_dir: str) -> None:
    fs = FsyncFails()
    log = logspool.open(log_dir, fs=fs)
    log.append(b"acknowledged")
    fs.broken = True
    with pytest.raises(logspool.FailedError, match="Input/output error"):
        log.append(b"never acknowledged")
    fs.broken = False  # a retry would now "succeed": the handle must not allow it
    with pytest.raises(logspool.FailedError):
        log.append(b"retry")
    with pytest.raises(logspool.FailedError):
        log.sync()
    log.close()
    with logspool.open(log_dir) as again:
        payloads = [r.payload for r in again.read()]
    assert payloads[0] == b"acknowledged"
    assert b"retry" not in payloads


def _jobs_view(j: jobs.Journal) -> list[tuple[str, str, int]]:
    return [(job.key, job.state, job.token) for job in j.jobs()]


def test_a_job_decision_whose_write_fails_changes_nothing_and_the_handle_goes_on(tmp_path: Path) -> None:
    """A decision's ops are applied before they are written (one write a decision): when that write
    fails, the handle's state must be what the disk holds, not what the decision made."""
    fs = DiskFills()
    with jobs.open(tmp_path / "j", fs=fs) as j:
        j.put_many([("a", b"1"), ("b", b"2"), ("c", b"3")])
        first = j.take()
        assert isinstance(first, jobs.Job)
        before = _jobs_view(j)
        fs.full = True
        with pytest.raises(logspool.AppendError, match="No space left"):
            j.take(ack=first)  # an ack and a take in one write
        with pytest.raises(logspool.AppendError):
            j.take_many(2)
        fs.full = False
        assert _jobs_view(j) == before, "the failed decisions changed the handle's state"
        with jobs.open(tmp_path / "j") as other:
            assert _jobs_view(other) == before
        batch = j.take_many(5, ack=[first])  # the lease still holds: nothing acked it
        assert [job.key for job in batch] == ["b", "c"]
        assert j.stats().counters["acked"] == 1
    with jobs.open(tmp_path / "j") as again:
        assert [(k, s) for k, s, _ in _jobs_view(again)] == [("b", "leased"), ("c", "leased")]


def _kv_view(store: kv.Store) -> list[tuple[str, object, int]]:
    found = (store.entry(key) for key in ("k", "n"))
    return [(v.key, v.value, v.version) for v in found if v is not None]


def test_a_kv_decision_whose_write_fails_changes_nothing_and_the_handle_goes_on(tmp_path: Path) -> None:
    fs = DiskFills()
    with kv.open(tmp_path / "kv", fs=fs) as store:
        store.set("k", "one")
        store.set("n", 5)
        fs.full = True
        with pytest.raises(logspool.AppendError, match="No space left"):
            store.set("k", "two" * 20)
        with pytest.raises(logspool.AppendError):
            store.add("n", 1)
        with pytest.raises(logspool.AppendError):
            store.delete("k")
        fs.full = False
        assert _kv_view(store) == [("k", "one", 0), ("n", 5, 1)]
        assert store.add("n", 1) == 6
    with kv.open(tmp_path / "kv") as again:
        assert _kv_view(again) == [("k", "one", 0), ("n", 6, 2)]


def test_a_real_full_file_system_fails_appends_cleanly_and_recovers(tmp_path: Path) -> None:
    """The same as the injected ENOSPC, on a kernel file system that is really full: a 1 MiB tmpfs
    (needs root and mount; skipped with the reason otherwise)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) to make a small tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=False)
    if done.returncode != 0:
        pytest.skip("root, but cannot mount a tmpfs here")
    try:
        log_dir = str(mount / "log")
        acked = []
        with logspool.open(log_dir, segment_size_max=256 * 1024) as log:
            with pytest.raises(logspool.AppendError, match="No space left"):
                for i in range(100_000):  # bounded: 1 MiB fills long before
                    log.append(b"%06d" % i + b"." * 1000)
                    acked.append(i)
            assert len(acked) > 100
            assert [int(r.payload[:6]) for r in log.read()] == acked  # nothing partial
            report = logspool.verify(log_dir)
            assert report.ok, [str(p) for p in report.problems]
            # Free space (retention would; here the first segment goes), and appends work again.
            first = os.path.join(log_dir, sorted(n for n in os.listdir(log_dir) if n.endswith(".seg"))[0])
            log.enforce_retention(logspool.Retention(size_max=300 * 1024))
            assert not os.path.exists(first)
            assert log.append(b"after") == acked[-1] + 1
        with logspool.open(log_dir) as log:
            got = [(r.lsn, r.payload[:6]) for r in log.read()]
        kept = [(i, b"%06d" % i) for i in acked if i >= got[0][0]]
        assert got == [*kept, (acked[-1] + 1, b"after")] and len(kept) < len(acked)
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_batch_that_fails_at_any_operation_is_in_the_log_whole_or_not_at_all(tmp_path: Path) -> None:
    """append_many into 4 KiB segments, larger than one segment and starting in a part-full one,
    with ENOSPC injected at each mutating operation in turn (the rotation's seal, fsyncs, the
    new segment's creation, the write): after the error, and after a reopen, either all 30
    records of the batch are there or none (a caller that retries must not duplicate any). An
    AppendError means none; a FailedError (an fsync failed: the handle stops for good, and what
    reached the disk is unknown) allows the whole batch too, never a part of it."""
    from tests.crash.faultfs import Fault, FaultFS

    batch = [b"batch-%02d-" % i + b"b" * 150 for i in range(30)]
    failures = 0
    for n in range(1, 80):  # bounded: the batch is a few dozen operations
        path = tmp_path / f"log{n}"
        with logspool.open(path, segment_size_max=4096) as log:
            log.append_many([b"before-%d" % i for i in range(10)])
        fs = FaultFS(str(path))
        log = logspool.open(path, fs=fs, segment_size_max=4096)
        fs.fault = Fault(fs.count + n, errno.ENOSPC)
        outcomes: list[list[bytes]] = [batch]
        try:
            log.append_many(batch)
        except logspool.AppendError:
            outcomes = [[]]
        except logspool.FailedError:
            outcomes = [[], batch]
        failures += len(outcomes) == 1 and not outcomes[0]
        fs.fault = None
        log.close()
        fs.release()
        for _ in range(2):  # as the failed handle left it, then after a writer reopened it
            with logspool.open(path, readonly=True) as reader:
                got = [r.payload for r in reader.read()]
            assert got[:10] == [b"before-%d" % i for i in range(10)]
            assert got[10:] in outcomes, f"fault at {n}: {len(got) - 10} of the batch"
            logspool.open(path).close()
        assert logspool.verify(path).ok
        if fs.faults_raised == 0:
            break
    assert failures >= 5, f"only {failures} operations of the batch failed with AppendError"
